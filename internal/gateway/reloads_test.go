package gateway

import (
	"fmt"
	"testing"
)

// TestReloadHistory: every load is recorded, the newest first, rejected
// ones with their errors and the generation kept; the history holds the
// last ReloadHistory loads.
func TestReloadHistory(t *testing.T) {
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(i int) []byte {
		return fmt.Appendf(nil, "_format_version: \"3.0\"\nservices: [{name: s%d, url: \"http://127.0.0.1:9\"}]\n", i)
	}
	if err := g.Load(cfg(0), "file"); err != nil {
		t.Fatal(err)
	}
	if err := g.Load(cfg(0), "file"); err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte("_format_version: \"3.0\"\nservices: [{name: x, url: 'not a url'}]\n"), "admin"); err == nil {
		t.Fatal("a broken configuration was applied")
	}
	h := g.Reloads()
	if len(h) != 3 || h[0].Result != "rejected" || h[1].Result != "unchanged" || h[2].Result != "applied" {
		t.Fatalf("history %+v", h)
	}
	if r := h[0]; r.Source != "admin" || r.Generation != 1 || r.ConfigHash != h[2].ConfigHash || len(r.Errors) == 0 ||
		r.Errors[0].Field != "services[0].url" || r.Errors[0].Message == "" {
		t.Errorf("rejected load %+v", r)
	}
	for i := 1; i <= ReloadHistory+5; i++ {
		if err := g.Load(cfg(i), "etcd"); err != nil {
			t.Fatal(err)
		}
	}
	h = g.Reloads()
	if len(h) != ReloadHistory || h[0].Generation != uint64(ReloadHistory+6) || h[len(h)-1].Generation != 7 {
		t.Errorf("%d loads kept, newest generation %d, oldest %d", len(h), h[0].Generation, h[len(h)-1].Generation)
	}
}
