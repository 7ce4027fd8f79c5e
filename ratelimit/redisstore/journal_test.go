package redisstore

import (
	"context"
	"errors"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

var getCalls = regexp.MustCompile(`cmdstat_get:calls=(\d+)`)

// gets counts the GETs Redis ran: a pull reads each fixed-window counter
// with one GET of its window.
func gets(t *testing.T, srv *testservers.RedisServer) int {
	t.Helper()
	info, _ := srv.Do(t, "INFO", "commandstats").(string)
	m := getCalls.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

func syncAt(t *testing.T, s *Store, now time.Time) {
	t.Helper()
	if err := s.Sync(context.Background(), now); err != nil {
		t.Fatalf("sync at %s: %v", now.Sub(ratelimittest.T0), err)
	}
}

// A periodic cycle reads from Redis only the counters other nodes changed
// since the node's previous cycle, however many idle counters it holds;
// the node still learns every total the others pushed.
func TestPeriodicCycleReadsOnlyWhatChanged(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("journal-reads")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}
	req := func(i int) ratelimit.Request {
		return ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now}
	}
	for i := range 200 {
		take(t, a, req(i))
	}
	syncAt(t, a, now) // pushes 200, then (first cycle) reads the 200
	for range 3 {
		take(t, b, req(7))
	}
	syncAt(t, b, now)

	before := gets(t, srv)
	syncAt(t, a, now.Add(100*time.Millisecond))
	if n := gets(t, srv) - before; n != 1 {
		t.Fatalf("node a's cycle ran %d reads, want 1: the counter node b pushed", n)
	}
	if d := take(t, a, req(7)); d.State(0).Remaining != 5 {
		t.Fatalf("node a: remaining %d on k7, want 5 (1 + 3 counted, plus this call)", d.State(0).Remaining)
	}
	before = gets(t, srv)
	syncAt(t, b, now.Add(200*time.Millisecond)) // nothing changed elsewhere
	if n := gets(t, srv) - before; n != 0 {
		t.Fatalf("an idle cycle ran %d reads, want 0", n)
	}
}

// Whatever the journal says, a node reads every counter it holds within
// sweepEvery, a shard at a time: each idle counter once, and no cycle
// reads more than a few shards' worth.
func TestPeriodicSweepSpreadsReads(t *testing.T) {
	srv, c := standalone(t)
	a := newStore(t, c, periodic("periodic-sweep"))
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerHour(10).Fixed()}
	const n = 640
	for i := range n {
		take(t, a, ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now})
	}
	syncAt(t, a, now) // the first cycle reads them all
	step := sweepEvery / time.Duration(len(a.local.shards))
	total, most := 0, 0
	for i := 1; i <= len(a.local.shards); i++ {
		before := gets(t, srv)
		syncAt(t, a, now.Add(time.Duration(i)*step))
		reads := gets(t, srv) - before
		total += reads
		most = max(most, reads)
	}
	if total != n {
		t.Fatalf("a sweep read %d counters, want each of the %d once", total, n)
	}
	if most > 4*n/len(a.local.shards) {
		t.Fatalf("one cycle of the sweep read %d counters, more than four shards' worth (%d)", most, 4*n/len(a.local.shards))
	}
}

// In periodic mode too, a sliding window's previous count is read until it
// is final (the grace of synchronous mode, plus a cycle, in which other
// nodes push what they counted before the edge); then the node keeps it,
// and its pushes read only the current window, while decisions still weigh
// the previous count and see the other nodes' hits. Pulls still read both
// windows (see TestPeriodicLatePushIntoThePreviousWindow).
func TestPeriodicFinalPreviousWindowIsReadOnce(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("periodic-prev-final")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	lim := []ratelimit.Limit{ratelimit.PerMinute(10).Sliding()}
	t0 := ratelimittest.At(0)
	syncAt(t, a, t0) // a's first cycle: a full read of nothing
	for range 5 {
		take(t, b, ratelimit.Request{Key: "k", Limits: lim, Now: t0})
	}
	syncAt(t, b, t0)
	t1 := t0.Add(time.Minute)
	readsAt := func(at time.Duration) int {
		take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: t1.Add(at)})
		before := gets(t, srv)
		syncAt(t, a, t1.Add(at))
		return gets(t, srv) - before
	}
	readsAt(0) // also reads back the counter b pushed
	// A minute's window: a grace of 1 s, plus the 100 ms cycle.
	for _, at := range []time.Duration{100 * time.Millisecond, time.Second} {
		if n := readsAt(at); n != 1 {
			t.Fatalf("push at +%s: %d GETs, want 1 (the previous window may still change)", at, n)
		}
	}
	if n := readsAt(1100 * time.Millisecond); n != 1 {
		t.Fatalf("first push past the grace: %d GETs, want 1", n)
	}
	if n := readsAt(2 * time.Second); n != 0 {
		t.Fatalf("push at +2s: %d GETs, want 0 (the final count is known)", n)
	}
	for range 3 {
		take(t, b, ratelimit.Request{Key: "k", Limits: lim, Now: t1.Add(40 * time.Second)})
	}
	syncAt(t, b, t1.Add(40*time.Second))
	before := gets(t, srv)
	syncAt(t, a, t1.Add(50*time.Second))
	if n := gets(t, srv) - before; n != 2 {
		t.Fatalf("a's pull of b's push: %d GETs, want 2 (a pull reads both windows)", n)
	}
	// At +54 s: 5 x 6/60 = 0.5 of the previous window, 5 counted by a and
	// 3 by b: 8.5, so one more call fits in 10 and the second is denied.
	at := t1.Add(54 * time.Second)
	for i := range 2 {
		d := take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: at})
		if d.Allowed != (i == 0) {
			t.Fatalf("call %d at 8.5+%d of 10: allowed=%v (the previous window or b's calls were not weighed)", i, i, d.Allowed)
		}
	}
}

// A node that counted hits before an edge and pushes them late (its first
// cycle after a fallback) adds them to the previous window after the
// others hold it final: the journal tells them, and their pull reads the
// previous window again, whether the pull comes from the journal alone or
// from the sweep of the counter's shard too (the sweep keeps final
// previous counts, but not of a counter the journal reports changed).
func TestPeriodicLatePushIntoThePreviousWindow(t *testing.T) {
	_, c := standalone(t)
	for _, swept := range []bool{false, true} {
		opts := periodic("periodic-late-prev-" + strconv.FormatBool(swept))
		a, b := newStore(t, c, opts), newStore(t, c, opts)
		lim := []ratelimit.Limit{ratelimit.PerMinute(10).Sliding()}
		t0 := ratelimittest.At(0)
		syncAt(t, a, t0)
		syncAt(t, b, t0)
		take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: t0})
		syncAt(t, a, t0)
		for range 5 {
			take(t, b, ratelimit.Request{Key: "k", Limits: lim, Now: t0.Add(50 * time.Second)})
		}
		t1 := t0.Add(time.Minute)
		take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: t1.Add(2 * time.Second)})
		syncAt(t, a, t1.Add(2*time.Second)) // a holds the previous count, 1, final
		step := sweepEvery / time.Duration(len(a.local.shards))
		pullAt := t1.Add(2*time.Second + step/2) // no shard of a's sweep is due yet
		if swept {
			a.mode.(*periodicMode).cycle.sweep = a.local.shardIndex("k") // the shard a's sweep reads next...
			pullAt = t1.Add(2*time.Second + step)                        // ...and the only one due then
		}
		syncAt(t, b, t1.Add(2*time.Second+step/4)) // b pushes its 5 late
		syncAt(t, a, pullAt)
		// At +6 s: 6 x 54/60 = 5.4 of the previous window, 1 of this one:
		// three more calls fit in 10.
		allowed := 0
		for range 10 {
			if take(t, a, ratelimit.Request{Key: "k", Limits: lim, Now: t1.Add(6 * time.Second)}).Allowed {
				allowed++
			}
		}
		if allowed != 3 {
			t.Fatalf("swept=%v: a admitted %d calls at 6.4 of 10, want 3: b's late hits in the previous window were not seen", swept, allowed)
		}
	}
}

// A fixed limit of the same window as a sliding one shares its counter; a
// push for the fixed limit alone, which does not read the previous window,
// does not leave the sliding limit a previous count of zero.
func TestPeriodicFixedLimitKeepsTheSlidingPreviousCount(t *testing.T) {
	_, c := standalone(t)
	a := newStore(t, c, periodic("periodic-fixed-sliding"))
	sliding := []ratelimit.Limit{ratelimit.PerMinute(10).Sliding()}
	fixed := []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}
	t0 := ratelimittest.At(0)
	syncAt(t, a, t0)
	for range 8 {
		take(t, a, ratelimit.Request{Key: "k", Limits: sliding, Now: t0})
	}
	syncAt(t, a, t0)
	t1 := t0.Add(time.Minute)
	take(t, a, ratelimit.Request{Key: "k", Limits: sliding, Now: t1.Add(2 * time.Second)})
	syncAt(t, a, t1.Add(2*time.Second)) // the previous count, 8, final
	take(t, a, ratelimit.Request{Key: "k", Limits: fixed, Now: t1.Add(3 * time.Second)})
	syncAt(t, a, t1.Add(3*time.Second))
	take(t, a, ratelimit.Request{Key: "k", Limits: sliding, Now: t1.Add(5 * time.Second)})
	syncAt(t, a, t1.Add(5*time.Second))
	// At +6 s: 8 x 54/60 = 7.2 of the previous window, 3 of this one:
	// the next call would make 11.2 of 10.
	if d := take(t, a, ratelimit.Request{Key: "k", Limits: sliding, Now: t1.Add(6 * time.Second)}); d.Allowed {
		t.Fatal("allowed at 11.2 of 10: the previous window's 8 were forgotten")
	}
}

// With a SyncRate longer than a sweep step, each cycle sweeps the shards
// due since the last one: every counter is still read within sweepEvery.
func TestPeriodicSweepKeepsUpWithALongSyncRate(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("periodic-sweep-slow")
	opts.SyncRate = 10 * time.Second
	a := newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerHour(10).Fixed()}
	const n = 640
	for i := range n {
		take(t, a, ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now})
	}
	syncAt(t, a, now)
	before := gets(t, srv)
	for at := opts.SyncRate; at <= sweepEvery; at += opts.SyncRate {
		syncAt(t, a, now.Add(at))
	}
	if got := gets(t, srv) - before; got != n {
		t.Fatalf("the cycles of one sweepEvery read %d counters, want each of the %d once", got, n)
	}
}

// A node pushing a counter that another node pushed after its previous
// cycle reads it back: the total sync.lua returned may predate that push.
func TestPeriodicCycleRereadsCountersBothNodesPushed(t *testing.T) {
	_, c := standalone(t)
	opts := periodic("journal-both")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(100).Fixed()}, Now: now}
	take(t, a, r)
	syncAt(t, a, now)
	take(t, b, r)
	syncAt(t, b, now)
	take(t, a, r)
	take(t, b, r)
	syncAt(t, b, now.Add(100*time.Millisecond))
	syncAt(t, a, now.Add(100*time.Millisecond))
	syncAt(t, b, now.Add(200*time.Millisecond))
	for name, s := range map[string]*Store{"a": a, "b": b} {
		if d := take(t, s, r); d.State(0).Remaining != 95 {
			t.Fatalf("node %s: remaining %d, want 95 (4 counted by both nodes, plus this call)", name, d.State(0).Remaining)
		}
	}
}

// When the journal is lost (a flush, a new server) a node cannot trust its
// place in it, even once the new journal's numbers pass it: it reads every
// counter it holds.
func TestJournalLossMeansFullRead(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("journal-lost")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(100).Fixed()}, Now: now}
	take(t, a, r)
	syncAt(t, a, now)
	syncAt(t, a, now) // a's cursor is now 2
	srv.Do(t, "FLUSHALL")
	take(t, b, r)
	take(t, b, r)
	for i := range 5 { // the new journal's sequence passes a's cursor
		syncAt(t, b, now.Add(time.Duration(i)*time.Millisecond))
	}
	syncAt(t, a, now.Add(100*time.Millisecond))
	if d := take(t, a, r); d.State(0).Remaining != 97 {
		t.Fatalf("node a: remaining %d after the flush, want 97 (Redis holds b's 2 hits, plus this call)", d.State(0).Remaining)
	}
}

// Journal entries older than the retention are dropped, so the journal
// holds only recent changes; a node whose place in it is older reads every
// counter it holds.
func TestJournalIsTrimmedByAge(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("journal-trim")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerHour(100).Fixed()}
	take(t, a, ratelimit.Request{Key: "old", Limits: lim, Now: now})
	syncAt(t, a, now)
	later := now.Add(journalRetention + time.Second) // past the retention (max(10 s, 50 x 100 ms))
	take(t, b, ratelimit.Request{Key: "new", Limits: lim, Now: later})
	syncAt(t, b, later)
	log := a.tag + "}:journal:log"
	entries, _ := srv.Do(t, "LRANGE", log, "0", "-1").([]any)
	if len(entries) != 1 || entries[0] != encodeMembers([]string{journalMember("new", storekit.CounterID(lim[0]))}) {
		t.Fatalf("journal entries after the retention %q, want only b's call with the new counter", entries)
	}
	take(t, b, ratelimit.Request{Key: "old", Limits: lim, Now: later})
	syncAt(t, b, later.Add(100*time.Millisecond))
	before := gets(t, srv)
	syncAt(t, a, later.Add(200*time.Millisecond)) // a's cursor predates the trim
	if n := gets(t, srv) - before; n != 1 {
		t.Fatalf("node a ran %d reads, want 1: a full read of the one counter it holds", n)
	}
	if d := take(t, a, ratelimit.Request{Key: "old", Limits: lim, Now: later}); d.State(0).Remaining != 97 {
		t.Fatalf("node a: remaining %d on old, want 97", d.State(0).Remaining)
	}
}

// On Cluster the journal sits in one slot and the counters in theirs; a
// cycle still reads only what changed.
func TestPeriodicJournalCluster(t *testing.T) {
	_, c := cluster(t)
	opts := periodic("journal-cluster")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerMinute(100)}
	for i := range 50 {
		take(t, a, ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now})
	}
	syncAt(t, a, now)
	for i := range 50 {
		take(t, b, ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now})
	}
	syncAt(t, b, now)
	syncAt(t, a, now.Add(100*time.Millisecond))
	for i := range 50 {
		if d := take(t, a, ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now}); d.State(0).Remaining != 97 {
			t.Fatalf("node a: remaining %d on k%d, want 97 (one hit of each node, plus this call)", d.State(0).Remaining, i)
		}
	}
}

// A large cycle is one journal entry; another node learns every counter
// in it.
func TestJournalRecordsLargeCycles(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("journal-split")
	a, b := newStore(t, c, opts), newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerMinute(100).Fixed()}
	const n = 5000
	req := func(i int) ratelimit.Request {
		return ratelimit.Request{Key: "k" + strconv.Itoa(i), Limits: lim, Now: now}
	}
	for i := range n {
		take(t, b, req(i))
	}
	syncAt(t, b, now) // b's first cycle: a full read of its own counters
	for i := range n {
		take(t, a, req(i))
		take(t, b, req(i))
	}
	syncAt(t, a, now)
	syncAt(t, b, now.Add(100*time.Millisecond)) // pushes n counters
	before := gets(t, srv)
	syncAt(t, a, now.Add(200*time.Millisecond))
	if got := gets(t, srv) - before; got != n {
		t.Fatalf("node a ran %d reads, want %d: every counter node b pushed", got, n)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if d := take(t, a, req(i)); d.State(0).Remaining != 96 {
			t.Fatalf("node a: remaining %d on k%d, want 96 (b's 2 and a's 1 counted, plus this call)", d.State(0).Remaining, i)
		}
	}
}

// One sync.lua call pushes many counters; one that does not hold a counter
// fails alone, reported as a bad reply naming it, and the others are
// pushed and merged.
func TestPushBatchIsolatesABadCounter(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("push-batch")
	a := newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	lim := []ratelimit.Limit{ratelimit.PerMinute(100).Fixed()}
	for _, k := range []string{"a", "bad", "c"} {
		take(t, a, ratelimit.Request{Key: k, Limits: lim, Now: now})
	}
	bad := testWindowKey(a, "bad", lim[0], now)
	srv.Do(t, "HSET", bad, "f", "v")
	err := a.Sync(context.Background(), now)
	if !errors.Is(err, ErrBadReply) || !strings.Contains(err.Error(), "WRONGTYPE") {
		t.Fatalf("cycle over a hash: %v, want ErrBadReply with WRONGTYPE", err)
	}
	for _, k := range []string{"a", "c"} {
		if got, _ := srv.Do(t, "GET", testWindowKey(a, k, lim[0], now)).(string); got != "1" {
			t.Fatalf("counter %s in Redis %q, want a count of 1", k, got)
		}
	}
	if typ, _ := srv.Do(t, "TYPE", bad).(string); typ != "hash" {
		t.Fatalf("the foreign key became a %s", typ)
	}
}

// A journal entry keeps every member whole, whatever bytes its key holds.
func TestJournalEntryRoundTrip(t *testing.T) {
	members := []string{"1:a", "7:", "3600000:k:with:colons", "12:line\nbreak", "5:12:34", ""}
	var got []string
	if err := decodeMembers(encodeMembers(members), func(m string) { got = append(got, m) }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, members) {
		t.Fatalf("decoded %q, want %q", got, members)
	}
	for _, bad := range []string{"x", "3:ab", "-1:a", ":a", "2"} {
		if err := decodeMembers(bad, func(string) {}); err == nil {
			t.Errorf("decodeMembers(%q) = nil, want an error", bad)
		}
	}
}

// A log that lost entries behind the journal's back (one of its lists
// evicted) cannot vouch for what changed: the next cycle reads every
// counter, and the log starts again.
func TestJournalPartialLossMeansFullRead(t *testing.T) {
	srv, c := standalone(t)
	opts := periodic("journal-partial")
	a := newStore(t, c, opts)
	now := ratelimittest.At(5 * time.Second)
	take(t, a, ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(100).Fixed()}, Now: now})
	syncAt(t, a, now)
	syncAt(t, a, now.Add(100*time.Millisecond))
	before := gets(t, srv)
	syncAt(t, a, now.Add(200*time.Millisecond))
	if n := gets(t, srv) - before; n != 0 {
		t.Fatalf("an idle cycle ran %d reads, want 0", n)
	}
	srv.Do(t, "DEL", a.tag+"}:journal:log")
	before = gets(t, srv)
	syncAt(t, a, now.Add(300*time.Millisecond))
	if n := gets(t, srv) - before; n != 1 {
		t.Fatalf("the cycle after a partial loss ran %d reads, want 1: a full read", n)
	}
	before = gets(t, srv)
	syncAt(t, a, now.Add(400*time.Millisecond))
	if n := gets(t, srv) - before; n != 0 {
		t.Fatalf("the next idle cycle ran %d reads, want 0: the log started again", n)
	}
}

// periodic returns the options of a node in periodic mode (sync_rate 0.1)
// whose cycles the test runs, on the caller's clock.
// periodic is the options of a store whose cycles the test drives. The
// call deadline is generous: on a loaded machine a cycle that met the
// default 200 ms deadline would fail and force a full read next, and the
// tests count the reads.
func periodic(ns string) Options {
	return Options{Namespace: ns, CallerClock: true, ManualSync: true, SyncRate: 100 * time.Millisecond, Timeout: 10 * time.Second}
}
