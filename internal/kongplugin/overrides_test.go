package kongplugin

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/ratelimit"
)

// watchDeadline bounds how long a test waits for a real source to deliver.
const watchDeadline = 15 * time.Second

// notifyingWatch wraps the default ConfigSourceWatch so a test learns about
// each delivered document instead of sleeping.
func notifyingWatch(applied chan<- error) dimensions.WatchFunc {
	w := dimensions.ConfigSourceWatch(testLogger())
	return func(src dimensions.Source, apply func([][]byte) error) (func(), error) {
		return w(src, func(docs [][]byte) error {
			err := apply(docs)
			applied <- err
			return err
		})
	}
}

func waitApplied(t *testing.T, applied <-chan error, wantErr bool) {
	t.Helper()
	select {
	case err := <-applied:
		if (err != nil) != wantErr {
			t.Fatalf("apply error = %v, want error %v", err, wantErr)
		}
	case <-time.After(watchDeadline):
		t.Fatalf("no overrides delivered within %s", watchDeadline)
	}
}

// tenantQuota runs sluice-dimensions for tenant acme and returns the
// published quota.
func tenantQuota(t *testing.T, p *Process, conf string) []ratelimit.Limit {
	t.Helper()
	cfg := instance[*DimensionsConfig](t, p.NewDimensions, conf)
	k := kongtest.New(t, kongtest.Request{Headers: http.Header{"X-Tenant": {"acme"}}})
	k.Run(cfg.Access)
	if e := k.Exit(); e != nil {
		t.Fatalf("exit %d %s; logs %q", e.Status, e.Body, k.Logs())
	}
	rec, err := decodeShared(k.Shared()[DefaultSharedKey])
	if err != nil {
		t.Fatal(err)
	}
	return rec.Quota
}

func TestOverridesFromWatchedFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "overrides.json")
	write := func(s string) {
		t.Helper()
		// Write-then-rename, as editors and config managers do.
		tmp := file + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"overrides": [{"dimension": "tenant", "value": "acme", "limit": [3], "window_size": [60]}]}`)
	applied := make(chan error, 8)
	p, _ := newTestProcess(t, Options{WatchOverrides: notifyingWatch(applied)})
	conf := `{"dimensions": [{"name": "tenant", "type": "header", "header": "X-Tenant"}], "overrides_file": "` + file + `"}`
	if q := tenantQuota(t, p, conf); !slices.Equal(q, []ratelimit.Limit{ratelimit.PerMinute(3)}) {
		t.Fatalf("initial quota = %v", q)
	}
	waitApplied(t, applied, false)

	write(`{"overrides": [{"dimension": "tenant", "value": "acme", "limit": [9], "window_size": [60]}]}`)
	waitApplied(t, applied, false)
	if q := tenantQuota(t, p, conf); !slices.Equal(q, []ratelimit.Limit{ratelimit.PerMinute(9)}) {
		t.Fatalf("quota after the file changed = %v", q)
	}
	write(`{"overrides": [{"dimension": "tenant", "value": "acme", "limit": [0], "window_size": [60]}]}`)
	waitApplied(t, applied, true)
	if q := tenantQuota(t, p, conf); !slices.Equal(q, []ratelimit.Limit{ratelimit.PerMinute(9)}) {
		t.Fatalf("quota after a rejected document = %v", q)
	}
}

func TestOverridesFromEtcdPrefix(t *testing.T) {
	etcd := testservers.Etcd(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcd.Endpoint()}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	put := func(k, v string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := cli.Put(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	put("/sluice/overrides/a", `{"overrides": [{"dimension": "tenant", "value": "other", "limit": [1], "window_size": [1]}]}`)
	applied := make(chan error, 8)
	p, _ := newTestProcess(t, Options{WatchOverrides: notifyingWatch(applied)})
	conf := `{"dimensions": [{"name": "tenant", "type": "header", "header": "X-Tenant"}],
		"overrides": [{"dimension": "tenant", "value": "acme", "limit": [2], "window_size": [60]}],
		"overrides_etcd_endpoints": ["` + etcd.Endpoint() + `"], "overrides_etcd_prefix": "/sluice/overrides/"}`
	// The centre's table replaces the inline overrides: acme has none.
	if q := tenantQuota(t, p, conf); q != nil {
		t.Fatalf("quota with a centre table lacking acme = %v", q)
	}
	waitApplied(t, applied, false)
	put("/sluice/overrides/b", `{"overrides": [{"dimension": "tenant", "value": "acme", "limit": [42], "window_size": [3600]}]}`)
	waitApplied(t, applied, false)
	if q := tenantQuota(t, p, conf); !slices.Equal(q, []ratelimit.Limit{ratelimit.PerHour(42)}) {
		t.Fatalf("quota after the etcd put = %v", q)
	}
}

func testLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
