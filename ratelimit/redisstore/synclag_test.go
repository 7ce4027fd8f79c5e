package redisstore

import (
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

// TestSyncTiming: a periodic store reports its interval, no cycle before
// the first, then the time of the last completed one; a synchronous store
// reports nothing.
func TestSyncTiming(t *testing.T) {
	_, c := standalone(t)
	s := newStore(t, c, Options{Namespace: "lag", SyncRate: 100 * time.Millisecond, CallerClock: true, ManualSync: true})
	st := s.SyncTiming()
	if st.Interval != 100*time.Millisecond || !st.LastSync.IsZero() || st.Opened.IsZero() {
		t.Fatalf("before a cycle: %+v", st)
	}
	if age := st.Age(st.Opened.Add(3 * time.Second)); age != 3*time.Second {
		t.Errorf("age before a cycle %v, want the time since New", age)
	}
	take(t, s, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(5)}, Now: ratelimittest.At(0)})
	at := ratelimittest.At(1)
	if err := s.Sync(t.Context(), at); err != nil {
		t.Fatal(err)
	}
	st = s.SyncTiming()
	if !st.LastSync.Equal(at) || st.Decisions != 1 {
		t.Fatalf("after a cycle: %+v", st)
	}
	if age := st.Age(at.Add(250 * time.Millisecond)); age != 250*time.Millisecond {
		t.Errorf("age %v", age)
	}
	sync := newStore(t, c, Options{Namespace: "lag-sync", CallerClock: true, ManualSync: true})
	if st := sync.SyncTiming(); st != (SyncTiming{}) || st.Age(at) != 0 {
		t.Errorf("synchronous store: %+v", st)
	}
}
