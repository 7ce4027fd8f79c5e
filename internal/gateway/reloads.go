package gateway

import (
	"errors"
	"sync"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// ReloadHistory is how many configuration loads Reloads remembers.
const ReloadHistory = 32

// A Reload is one configuration load: applied, unchanged (the serving
// configuration again) or rejected, with its errors.
type Reload struct {
	Time   time.Time `json:"time"`
	Source string    `json:"source"`
	// Result is "applied", "unchanged" or "rejected".
	Result string `json:"result"`
	// Generation and ConfigHash are the serving configuration's after the
	// load: the new one when applied, the one kept otherwise (0 and ""
	// before any was applied).
	Generation uint64 `json:"generation"`
	ConfigHash string `json:"configuration_hash,omitempty"`
	// Errors are a rejected configuration's problems.
	Errors []ReloadError `json:"errors,omitempty"`
}

// ReloadError is one problem of a rejected configuration: the field it
// is at ("" for the document) and the message.
type ReloadError struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// reloadLog is a ring of the last ReloadHistory loads.
type reloadLog struct {
	mu   sync.Mutex
	ring [ReloadHistory]Reload
	n    int // loads recorded, ever
}

func (l *reloadLog) add(r Reload) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ring[l.n%len(l.ring)] = r
	l.n++
}

// Reloads returns the last ReloadHistory configuration loads, the newest
// first.
func (g *Gateway) Reloads() []Reload {
	l := &g.reloadLog
	l.mu.Lock()
	defer l.mu.Unlock()
	k := min(l.n, len(l.ring))
	out := make([]Reload, k)
	for i := range k {
		out[i] = l.ring[(l.n-1-i)%len(l.ring)]
	}
	return out
}

// recordReload adds a load to the history. Called with g.loadMu held.
func (g *Gateway) recordReload(source, result string, err error) {
	r := Reload{Time: g.now(), Source: source, Result: result}
	if gen := g.gen.Load(); gen != nil {
		r.Generation, r.ConfigHash = gen.seq, gen.hash
	}
	var errs kongconf.Errors
	switch {
	case errors.As(err, &errs):
		for _, fe := range errs {
			r.Errors = append(r.Errors, ReloadError{fe.Path, fe.Message})
		}
	case err != nil:
		r.Errors = []ReloadError{{Message: err.Error()}}
	}
	g.reloadLog.add(r)
}
