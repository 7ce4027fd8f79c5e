package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/configsource"
)

// TestReloadFileUnderLoad rewrites the watched config file while clients
// send requests: every request succeeds, a broken file is rejected and
// counted, and the counters of an unchanged namespace survive every
// reload.
func TestReloadFileUnderLoad(t *testing.T) {
	up := echoUpstream(t)
	path := filepath.Join(t.TempDir(), "kong.yml")
	doc := func(gen int) string {
		return withUpstream(fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: UPSTREAM/g%d
    routes: [{name: r, paths: [/]}]
    plugins:
      - name: rate-limiting-advanced
        config: {limit: [1000000], window_size: [3600], window_type: fixed, identifier: ip, namespace: keep}
`, gen), up)
	}
	write := func(s string) {
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write(doc(0))
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	src, err := configsource.OpenFile(context.Background(), path, configsource.FileOptions{
		Handlers: configsource.Handlers{Apply: func(d configsource.Document) error { return g.Load(d.Data, "file") }},
		Debounce: 5 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	base := serve(t, g)

	var failed, served atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{}
			for i := 0; i < 2000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				res, err := c.Get(base + "/x")
				if err != nil {
					failed.Add(1)
					continue
				}
				_, _ = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				served.Add(1)
				if res.StatusCode != 200 {
					failed.Add(1)
				}
			}
		}()
	}
	waitGen := func(want uint64) {
		deadline := time.Now().Add(10 * time.Second)
		for g.Status().Generation < want {
			if time.Now().After(deadline) {
				t.Fatalf("generation %d not reached (at %d)", want, g.Status().Generation)
			}
			<-time.After(5 * time.Millisecond) // poll interval, bounded by the deadline
		}
	}
	for i := 1; i <= 5; i++ {
		write(doc(i))
		waitGen(uint64(i + 1))
	}
	write(strings.Replace(doc(6), "paths: [/]", "paths: [bad]", 1))
	deadline := time.Now().Add(10 * time.Second)
	for testutilRejected(g) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("broken file not rejected")
		}
		<-time.After(5 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed during file reloads", failed.Load(), served.Load())
	}
	r := do(t, "GET", base+"/x", nil)
	if e := r.echoed(t); e.Path != "/g5/x" {
		t.Errorf("serving %q, want the last valid file's /g5/x", e.Path)
	}
	used := served.Load() + 1
	if got := r.header.Get("X-RateLimit-Remaining-Hour"); got != fmt.Sprint(1000000-used) {
		t.Errorf("remaining %s after %d requests: counters did not survive the reloads", got, used)
	}
}

func testutilRejected(g *Gateway) float64 {
	return counterValue(g.metrics.reloads.WithLabelValues("file", "rejected"))
}

// serve runs g on 127.0.0.1:0 until the test ends.
func serve(t *testing.T, g *Gateway) string {
	t.Helper()
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- g.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = g.Shutdown(ctx)
		<-done
	})
	return "http://" + ln.Addr().String()
}
