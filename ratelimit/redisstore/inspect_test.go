package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// The modes the conformance suite does not run whole: Kong's layout and
// periodic sync, in both layouts, are held to the inspect timelines and
// to Peek on the timelines their limits fit.
func TestInspectKongLayout(t *testing.T) {
	_, c := standalone(t)
	ratelimittest.RunInspect(t, factory(c, Options{KongLayout: true}))
}

func TestInspectPeriodic(t *testing.T) {
	_, c := standalone(t)
	ratelimittest.RunInspect(t, factory(c, Options{SyncRate: time.Second}))
	for _, tl := range ratelimittest.Timelines() {
		t.Run("Peek/"+tl.Name, func(t *testing.T) {
			s := factory(c, Options{SyncRate: time.Second})(t)
			defer s.Close()
			ratelimittest.PlayPeek(t, s, tl)
		})
	}
}

func TestInspectPeriodicKongLayout(t *testing.T) {
	_, c := standalone(t)
	ratelimittest.RunInspect(t, factory(c, Options{SyncRate: time.Second, KongLayout: true}))
}

// A reset on one node is seen by another sharing the namespace: at its
// next decision in synchronous mode, after the two nodes' next sync cycles
// in periodic mode.
func TestResetSeenByOtherNodes(t *testing.T) {
	_, c := standalone(t)
	limits := []ratelimit.Limit{ratelimit.PerMinute(2).Fixed()}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"sync", Options{}},
		{"sync/kong", Options{KongLayout: true}},
		{"periodic", Options{SyncRate: time.Second}},
		{"periodic/kong", Options{SyncRate: time.Second, KongLayout: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.opts
			o.Namespace, o.CallerClock, o.ManualSync, o.Strict = "reset-"+t.Name(), true, true, true
			a, b := newStore(t, c, o), newStore(t, c, o)
			now := ratelimittest.At(0)
			r := ratelimit.Request{Key: "consumer", Limits: limits, Now: now}
			sync := func(ss ...*Store) {
				t.Helper()
				if o.SyncRate <= 0 {
					return
				}
				for _, s := range ss {
					if err := s.Sync(ctx, now); err != nil {
						t.Fatalf("Sync: %v", err)
					}
				}
			}
			take(t, a, r)
			take(t, b, r)
			sync(a, b, a, b)
			if d := take(t, b, r); d.Allowed {
				t.Fatal("third call allowed before the reset")
			}
			if err := a.Reset(ctx, r); err != nil {
				t.Fatalf("Reset: %v", err)
			}
			sync(a, b)
			got, err := b.Inspect(ctx, r)
			if err != nil || got[0].Current != 0 {
				t.Fatalf("the other node's Inspect after the reset: %+v, %v; want 0", got, err)
			}
			if d := take(t, b, r); !d.Allowed {
				t.Fatal("the other node denies after the reset")
			}
		})
	}
}
