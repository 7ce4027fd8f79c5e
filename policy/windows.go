package policy

import (
	"errors"
	"fmt"
	"time"

	"github.com/seed-008287da/sluice/internal/kongname"
	"github.com/seed-008287da/sluice/ratelimit"
)

// ErrMismatchedWindows is returned by Windows when the two lists differ in
// length. Its text is Kong's.
//
//lint:ignore ST1005 the text is Kong's, byte for byte.
var ErrMismatchedWindows = errors.New(kongname.MismatchedWindows)

// Windows pairs counts[i] with windows[i] into limits of one algorithm, the
// way Kong's rate-limiting-advanced config lists them. It returns
// ErrMismatchedWindows when the lists differ in length and the first invalid
// limit's error otherwise, naming its index.
func Windows(alg ratelimit.Algorithm, counts []int64, windows []time.Duration) ([]ratelimit.Limit, error) {
	if len(counts) != len(windows) {
		return nil, ErrMismatchedWindows
	}
	ls := make([]ratelimit.Limit, len(counts))
	for i := range counts {
		ls[i] = ratelimit.Limit{Algorithm: alg, Count: counts[i], Window: windows[i]}
		if err := ls[i].Validate(); err != nil {
			return nil, fmt.Errorf("limit %d: %w", i, err)
		}
	}
	return ls, nil
}

// WindowName returns the name Kong gives a window size in header names:
// "second", "minute", "hour", "day", "month" (30 days) and "year" (365
// days); any other size is its number of seconds ("30", "7200"), or of
// milliseconds with an "ms" suffix when it is not a whole second.
func WindowName(w time.Duration) string { return kongname.Window(w) }
