// Package repeats thins out log lines for errors that repeat on every
// request, such as a counter store that keeps refusing a command: the first
// error of a kind is logged, then at most one per interval, carrying the
// number of errors of that kind left out since the previous line. Counting
// every error is the metrics' job.
package repeats

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// DefaultEvery is the interval of a Gate whose Every is zero.
const DefaultEvery = 30 * time.Second

// maxKinds bounds the kinds a Gate remembers. Past it, the Gate forgets
// them all, so each kind's next error is logged again.
const maxKinds = 1024

// A Gate decides which repeated errors to log. The zero value is ready to
// use. A Gate is safe for concurrent use.
type Gate struct {
	// Every is the least time between two lines of one kind. Zero means
	// DefaultEvery.
	Every time.Duration

	mu    sync.Mutex
	kinds map[string]*kind
}

type kind struct {
	last time.Time // when the kind was last logged
	left int64     // errors of the kind not logged since then
}

// Pass records one error of the given kind at now. It reports whether to
// log it and, when it does, how many errors of that kind were left out
// since the previous line. If the clock steps back, the kind waits at most
// Every from the earlier time.
func (g *Gate) Pass(kindName string, now time.Time) (ok bool, left int64) {
	every := g.Every
	if every <= 0 {
		every = DefaultEvery
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	k := g.kinds[kindName]
	if k == nil {
		if g.kinds == nil || len(g.kinds) >= maxKinds {
			g.kinds = make(map[string]*kind)
		}
		g.kinds[kindName] = &kind{last: now}
		return true, 0
	}
	if now.Before(k.last) {
		k.last = now
	}
	if now.Sub(k.last) < every {
		k.left++
		return false, 0
	}
	left = k.left
	k.last, k.left = now, 0
	return true, left
}

// A Logger writes the lines its Gate passes to Log, with an attribute
// "unlogged": the number of errors of the kind left out since the
// previous line. The zero value, and a nil *Logger, discard every line.
type Logger struct {
	Gate
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Warn logs msg at Warn level if the Gate passes an error of the kind.
func (l *Logger) Warn(kind, msg string, args ...any) { l.log(slog.LevelWarn, kind, msg, args) }

// Error logs msg at Error level if the Gate passes an error of the kind.
func (l *Logger) Error(kind, msg string, args ...any) { l.log(slog.LevelError, kind, msg, args) }

func (l *Logger) log(level slog.Level, kind, msg string, args []any) {
	if l == nil || l.Log == nil {
		return
	}
	now := l.Now
	if now == nil {
		now = time.Now
	}
	if ok, left := l.Pass(kind, now()); ok {
		l.Log.Log(context.Background(), level, msg, append(args, "unlogged", left)...)
	}
}
