package repeats

import (
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestGate(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var g Gate // DefaultEvery
	steps := []struct {
		kind     string
		at       time.Duration
		ok       bool
		wantLeft int64
	}{
		{"a", 0, true, 0},
		{"a", time.Second, false, 0},
		{"b", time.Second, true, 0}, // kinds are apart
		{"a", 29 * time.Second, false, 0},
		{"a", 30 * time.Second, true, 2},
		{"a", 31 * time.Second, false, 0},
		{"a", 10 * time.Minute, true, 1},
		{"a", 10*time.Minute + time.Second, false, 0},
		// The clock steps back a minute: the kind waits Every from there.
		{"a", 9 * time.Minute, false, 0},
		{"a", 9*time.Minute + 29*time.Second, false, 0},
		{"a", 9*time.Minute + 30*time.Second, true, 3},
	}
	for i, s := range steps {
		ok, left := g.Pass(s.kind, t0.Add(s.at))
		if ok != s.ok || left != s.wantLeft {
			t.Errorf("step %d (%s at %v): Pass = %v, %d; want %v, %d", i, s.kind, s.at, ok, left, s.ok, s.wantLeft)
		}
	}
}

func TestGateEvery(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	g := Gate{Every: time.Second}
	if ok, _ := g.Pass("a", t0); !ok {
		t.Fatal("first error not passed")
	}
	if ok, _ := g.Pass("a", t0.Add(999*time.Millisecond)); ok {
		t.Fatal("error within Every passed")
	}
	if ok, left := g.Pass("a", t0.Add(time.Second)); !ok || left != 1 {
		t.Fatalf("error after Every: Pass = %v, %d; want true, 1", ok, left)
	}
}

func TestGateForgetsPastMaxKinds(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	var g Gate
	g.Pass("first", t0)
	for i := range maxKinds {
		g.Pass(strconv.Itoa(i), t0)
	}
	if len(g.kinds) > maxKinds {
		t.Fatalf("gate remembers %d kinds, more than %d", len(g.kinds), maxKinds)
	}
	if ok, _ := g.Pass("first", t0.Add(time.Second)); !ok {
		t.Fatal("a forgotten kind's next error was not passed")
	}
}

func TestLogger(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	now := t0
	var buf strings.Builder
	l := Logger{Log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	})), Now: func() time.Time { return now }}
	for range 5 {
		l.Warn("p1", "counter store failed", "plugin", "p1")
	}
	l.Error("p2", "store failed", "domain", "d")
	now = t0.Add(DefaultEvery)
	l.Warn("p1", "counter store failed", "plugin", "p1")
	want := "level=WARN msg=\"counter store failed\" plugin=p1 unlogged=0\n" +
		"level=ERROR msg=\"store failed\" domain=d unlogged=0\n" +
		"level=WARN msg=\"counter store failed\" plugin=p1 unlogged=4\n"
	if buf.String() != want {
		t.Errorf("log:\n%s\nwant:\n%s", buf.String(), want)
	}
	var zero Logger
	zero.Warn("k", "discarded") // no logger: no panic, no line
}
