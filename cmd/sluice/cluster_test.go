package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// TestTwoGatewaysShareRedis runs two sluice processes against one real
// redis-server: together they admit exactly the limit.
func TestTwoGatewaysShareRedis(t *testing.T) {
	rs := testservers.Redis(t, testservers.RedisOptions{})
	path := filepath.Join(t.TempDir(), "kong.yml")
	cfg := fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:9
    routes:
      - name: r
        paths: [/]
        plugins:
          - name: request-termination
            config: {status_code: 200, message: ok}
          - name: rate-limiting-advanced
            config:
              limit: [5]
              window_size: [3600]
              window_type: fixed
              identifier: ip
              namespace: shared-%d
              strategy: redis
              sync_rate: 0
              redis: {host: 127.0.0.1, port: %d}
`, time.Now().UnixNano(), rs.Port())
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	a := start(t, "-c", path, "--watch=false")
	b := start(t, "-c", path, "--watch=false")
	allowed := 0
	for i := 0; i < 8; i++ {
		for _, s := range []*sluice{a, b} {
			res := get(t, s.proxy+"/")
			switch res.StatusCode {
			case 200:
				allowed++
			case 429:
			default:
				t.Fatalf("status %d", res.StatusCode)
			}
		}
	}
	if allowed != 5 {
		t.Errorf("two gateways admitted %d of 16, want the shared limit 5", allowed)
	}
	a.stop(t)
	b.stop(t)
}

// TestEtcdConfig serves the configuration held in etcd and follows a
// change of the key; a rejected document keeps the previous one.
func TestEtcdConfig(t *testing.T) {
	es := testservers.Etcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{es.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(v string) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, "/sluice/kong.yml", v); err != nil {
			t.Fatal(err)
		}
	}
	doc := func(msg string) string {
		return fmt.Sprintf(`
_format_version: "3.0"
services:
  - name: s
    url: http://127.0.0.1:9
    routes:
      - name: r
        paths: [/]
        plugins:
          - name: request-termination
            config: {status_code: 200, message: %s}
`, msg)
	}
	put(doc("one"))
	s := start(t, "--etcd-endpoints", es.Endpoint(), "--etcd-key", "/sluice/kong.yml")
	body := func() string {
		res, err := httpGetBody(s.proxy + "/")
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if b := body(); !strings.Contains(b, `"one"`) {
		t.Fatalf("first document: %s", b)
	}
	// Clients keep sending while etcd changes; none may fail.
	var failed, sent atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				select {
				case <-stop:
					return
				default:
				}
				b, err := httpGetBody(s.proxy + "/")
				sent.Add(1)
				if err != nil || !strings.Contains(b, `"message"`) {
					failed.Add(1)
				}
			}
		}()
	}
	// The broken document must be seen (and rejected) before the next
	// one, which etcd would otherwise deliver in its place.
	put("_format_version: \"3.0\"\nservices: [{name: s, colour: red}]")
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, m := httpGetBodyMust(t, s.admin+"/metrics")
		if strings.Contains(m, `sluice_config_reloads_total{result="rejected",source="etcd"} 1`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rejected etcd document not counted:\n%s", grep(m, "sluice_config_reloads_total"))
		}
		pollPause()
	}
	if b := body(); !strings.Contains(b, `"one"`) {
		t.Errorf("after a rejected document: %s, want the first one serving", b)
	}
	put(doc("two"))
	deadline = time.Now().Add(20 * time.Second)
	for !strings.Contains(body(), `"two"`) {
		if time.Now().After(deadline) {
			t.Fatalf("etcd change not applied: %s", body())
		}
		pollPause()
	}
	close(stop)
	wg.Wait()
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed while etcd changed", failed.Load(), sent.Load())
	}
	s.stop(t)
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
