package kongplugin

import (
	"fmt"
	"slices"
	"testing"

	"github.com/seed-008287da/sluice/internal/kongplugin/kongtest"
	"github.com/seed-008287da/sluice/internal/testservers"
)

// Two plugin-server processes (two Kong nodes) share one concurrency limit
// through a real redis-server: a lease taken on one node counts on the
// other, and a release on one frees a slot for the other.
func TestConcurrencyAcrossNodesWithRedis(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Password: "s3cret"})
	conf := fmt.Sprintf(`{"limit": 2, "identifier": "consumer", "namespace": "poll", "strategy": "redis",
		"redis": {"host": "127.0.0.1", "port": %d, "password": "s3cret", "timeout": 2000}}`, srv.Port())
	nodeA, _ := newTestProcess(t, Options{})
	nodeB, _ := newTestProcess(t, Options{})
	a := instance[*ConcurrencyConfig](t, nodeA.NewConcurrency, conf)
	b := instance[*ConcurrencyConfig](t, nodeB.NewConcurrency, conf)
	req := kongtest.Request{Consumer: consumer("c1")}

	kA := kongtest.New(t, req)
	kA.Run(a.Access)
	kB := kongtest.New(t, req)
	kB.Run(b.Access)
	if kA.Exit() != nil || kB.Exit() != nil {
		t.Fatalf("first two leases denied: %+v %+v; logs %q %q", kA.Exit(), kB.Exit(), kA.Logs(), kB.Logs())
	}
	k := kongtest.New(t, req)
	k.Run(a.Access)
	if e := k.Exit(); e == nil || e.Status != 429 {
		t.Fatalf("third lease across nodes: exit %+v, logs %q", e, k.Logs())
	}
	// The lease is in Redis, not in node A's memory.
	if n := srv.Do(t, "DBSIZE"); n == int64(0) {
		t.Errorf("no keys in redis")
	}
	if calls := kB.Run(b.Log); !slices.Equal(calls, []string{"kong.ctx.shared.get"}) {
		t.Fatalf("log calls = %q", calls)
	}
	k = kongtest.New(t, req)
	k.Run(a.Access)
	if k.Exit() != nil {
		t.Fatalf("denied on node A after node B released: %+v", k.Exit())
	}
	if logs := k.Logs(); len(logs) != 0 {
		t.Errorf("logs = %q", logs)
	}
}
