package decision

import (
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// OpenStore opens the store sc selects. now is the clock of stores that
// need one; nil means time.Now.
func OpenStore(sc StoreConfig, now func() time.Time) (ratelimit.Store, error) {
	switch sc.Type {
	case "", "memory":
		return memorystore.New(memorystore.Options{MaxKeys: int(sc.Memory.MaxKeys)}), nil
	}
	return nil, fmt.Errorf("%w: unknown store %q", ErrInvalidConfig, sc.Type)
}
