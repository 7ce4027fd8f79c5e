package decision

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

const reloadV1 = `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 3}
`

func TestReloadKeepsCounters(t *testing.T) {
	type event struct {
		gen uint64
		err error
	}
	var mu sync.Mutex
	var events []event
	s := newService(t, reloadV1, newClock(t0).optsWith(Options{OnReload: func(g uint64, err error) {
		mu.Lock()
		events = append(events, event{g, err})
		mu.Unlock()
	}}))
	c, _ := serveGRPC(t, s)
	k := request("d", desc("k", "v"))
	runSteps(t, c, []step{
		{"1", k, OK, codes_(OK), []uint32{2}, []uint32{3}},
		{"2", k, OK, codes_(OK), []uint32{1}, nil},
	})
	// Same window, higher limit: the two hits are still counted.
	if err := s.Reload([]byte(strings.Replace(reloadV1, "requests_per_unit: 3", "requests_per_unit: 5", 1))); err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{
		{"3", k, OK, codes_(OK), []uint32{2}, []uint32{5}},
		{"4", k, OK, codes_(OK), []uint32{1}, nil},
		{"5", k, OK, codes_(OK), []uint32{0}, nil},
		{"6", k, OVER, codes_(OVER), nil, nil},
	})
	// A bad file is rejected with every error; the old config stays.
	err := s.Reload([]byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n    extra: 1\n"))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "fortnight") || !strings.Contains(err.Error(), "extra: unknown field") {
		t.Errorf("bad reload: %v", err)
	}
	// A store change needs a restart.
	if err := s.Reload([]byte("store: {type: redis, redis: {host: 127.0.0.1}}\n" + reloadV1)); !errors.Is(err, ErrStoreChanged) {
		t.Errorf("store change: %v, want ErrStoreChanged", err)
	}
	runSteps(t, c, []step{{"7", k, OVER, codes_(OVER), nil, []uint32{5}}})
	st := s.Status()
	if st.Generation != 2 || st.ReloadErrors != 2 || !strings.Contains(st.LastReloadError, "restart") || st.ConfigSHA256 == "" {
		t.Errorf("status %+v", st)
	}
	// Removing the limit answers OK; bringing it back finds the count.
	if err := s.Reload([]byte("domain: d\ndescriptors: []\n")); err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{{"8", k, OK, codes_(OK), nil, []uint32{noLimit}}})
	if err := s.Reload([]byte(reloadV1)); err != nil {
		t.Fatal(err)
	}
	runSteps(t, c, []step{{"9", k, OVER, codes_(OVER), nil, []uint32{3}}})
	mu.Lock()
	defer mu.Unlock()
	want := []uint64{2, 2, 2, 3, 4}
	if len(events) != len(want) {
		t.Fatalf("OnReload events %v", events)
	}
	for i, e := range events {
		if e.gen != want[i] || (e.err != nil) != (i == 1 || i == 2) {
			t.Errorf("OnReload %d: %v, want generation %d", i, e, want[i])
		}
	}
}

// Decisions in flight during reloads see one config or the other, never a
// mix, and the race detector sees no unsynchronised access.
func TestReloadUnderLoad(t *testing.T) {
	s := newService(t, reloadV1, newClock(t0).opts())
	c, _ := serveGRPC(t, s)
	v2 := strings.Replace(reloadV1, "requests_per_unit: 3", "requests_per_unit: 1000", 1)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				resp := call(t, c, request("d", desc("k", string(rune('a'+w)))))
				if n := resp.Statuses[0].CurrentLimit.RequestsPerUnit; n != 3 && n != 1000 {
					t.Errorf("limit %d", n)
				}
			}
		}()
	}
	for i := range 20 {
		data := reloadV1
		if i%2 == 0 {
			data = v2
		}
		if err := s.Reload([]byte(data)); err != nil {
			t.Error(err)
		}
	}
	wg.Wait()
}

// The same rejected bytes delivered again (the watcher's first read of the
// file the service started with) give the same error without a second log
// line or load error; other bytes are read, and after a configuration is
// applied the old bad bytes are read again.
func TestRejectedOnce(t *testing.T) {
	var logs syncLog
	o := newClock(t0).opts()
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	o.PeerStats = true
	o.StartInvalid = true
	bad := []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: minutes}\n")
	s, err := OpenFiles([]File{{Name: "c.yaml", Data: bad}}, o)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.ReloadFiles([]File{{Name: "c.yaml", Data: bad}}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("the same bad file again: %v, want the config error", err)
	}
	if n := strings.Count(logs.String(), "config rejected"); n != 1 {
		t.Fatalf("%d rejection lines, want 1:\n%s", n, logs.String())
	}
	loadErrors := func() uint64 {
		for _, st := range s.PeerStats() {
			if st.Name == "ratelimit.service.config_load_error" {
				return st.Value
			}
		}
		return 0
	}
	if n := loadErrors(); n != 1 {
		t.Fatalf("config_load_error %d, want 1", n)
	}
	if err := s.ReloadFiles([]File{{Name: "c.yaml", Data: []byte(reloadV1)}}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReloadFiles([]File{{Name: "c.yaml", Data: bad}}); !errors.Is(err, ErrInvalidConfig) || loadErrors() != 2 {
		t.Fatalf("bad bytes after a good config: %v, config_load_error %d; want a second rejection", err, loadErrors())
	}
}
