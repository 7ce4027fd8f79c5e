package configsource

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/seed-008287da/sluice/internal/testservers"
)

func etcdClient(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func put(t *testing.T, cli *clientv3.Client, k, v string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if _, err := cli.Put(ctx, k, v); err != nil {
		t.Fatal(err)
	}
}

func del(t *testing.T, cli *clientv3.Client, k string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if _, err := cli.Delete(ctx, k); err != nil {
		t.Fatal(err)
	}
}

func TestEtcdKey(t *testing.T) {
	srv := testservers.Etcd(t)
	cli := etcdClient(t, srv.Endpoint())
	r := newRecorder()
	e, err := OpenEtcd(context.Background(), EtcdOptions{Handlers: r.handlers(), Endpoints: []string{srv.Endpoint()}, Key: "/sluice/config"})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	// The key does not exist yet: reported, nothing delivered.
	r.nextError(t, ErrNotFound)

	put(t, cli, "/sluice/config", "v1")
	d := r.nextData(t, "v1")
	if d.Source != "etcd:/sluice/config" || d.Revision == 0 {
		t.Fatalf("document %+v", d)
	}
	put(t, cli, "/sluice/configx", "other key") // not watched: no prefix
	put(t, cli, "/sluice/config", "v1")         // same bytes: not delivered
	put(t, cli, "/sluice/config", "bad")
	r.nextRejected(t, "bad")
	put(t, cli, "/sluice/config", "v2")
	if d2 := r.nextData(t, "v2"); d2.Revision <= d.Revision {
		t.Fatalf("revision %d after %d", d2.Revision, d.Revision)
	}
	del(t, cli, "/sluice/config")
	r.nextError(t, ErrNotFound)
	put(t, cli, "/sluice/config", "v3")
	r.nextData(t, "v3")
	r.quiet(t)

	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestEtcdPrefix(t *testing.T) {
	srv := testservers.Etcd(t)
	cli := etcdClient(t, srv.Endpoint())
	put(t, cli, "/quotas/acme", "a1")
	r := newRecorder()
	e, err := OpenEtcd(t.Context(), EtcdOptions{Handlers: r.handlers(), Client: cli, Key: "/quotas/", Prefix: true})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	entries := func(d Document) string {
		var s []string
		for _, en := range d.Entries {
			s = append(s, en.Key+"="+string(en.Value))
		}
		return strings.Join(s, ",")
	}
	if d := r.next(t); entries(d) != "/quotas/acme=a1" || d.Data != nil || d.Source != "etcd-prefix:/quotas/" {
		t.Fatalf("first snapshot %+v", d)
	}
	put(t, cli, "/quotas/globex", "g1")
	if d := r.next(t); entries(d) != "/quotas/acme=a1,/quotas/globex=g1" {
		t.Fatalf("snapshot %q", entries(d))
	}
	put(t, cli, "/quotas/initech", "bad")
	select {
	case <-r.rejected:
	case <-time.After(deadline):
		t.Fatal("no rejection")
	}
	del(t, cli, "/quotas/initech")
	del(t, cli, "/quotas/acme")
	if d := r.next(t); entries(d) != "/quotas/globex=g1" {
		t.Fatalf("snapshot %q", entries(d))
	}
	del(t, cli, "/quotas/globex")
	if d := r.next(t); d.Entries == nil || len(d.Entries) != 0 {
		t.Fatalf("empty prefix gave %+v", d)
	}
	// Close leaves a caller's client open.
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	put(t, cli, "/quotas/after", "x")
}

// etcd goes away and comes back on the same port with the same data: the
// source keeps delivering, and a change made while it was down is seen.
func TestEtcdRestart(t *testing.T) {
	srv := testservers.Etcd(t)
	cli := etcdClient(t, srv.Endpoint())
	put(t, cli, "/sluice/config", "v1")
	r := newRecorder()
	e, err := OpenEtcd(t.Context(), EtcdOptions{Handlers: r.handlers(), Endpoints: []string{srv.Endpoint()}, Key: "/sluice/config", RetryMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	r.nextData(t, "v1")

	srv.Stop()
	srv.Restart(t)
	put(t, cli, "/sluice/config", "v2")
	r.nextData(t, "v2")

	srv.Stop()
	srv.Restart(t)
	put(t, cli, "/sluice/config", "v3")
	r.nextData(t, "v3")
	r.quiet(t)
}

// A watch that starts from a compacted revision fails with ErrCompacted;
// the source re-reads the key and goes on.
func TestEtcdResyncAfterCompaction(t *testing.T) {
	srv := testservers.Etcd(t)
	cli := etcdClient(t, srv.Endpoint())
	put(t, cli, "/k", "v1")
	r := newRecorder()
	e := &Etcd{o: EtcdOptions{Handlers: r.handlers(), Key: "/k", RequestTimeout: deadline, RetryMin: time.Millisecond, RetryMax: time.Millisecond},
		cli: cli, source: "etcd:/k", done: make(chan struct{})}
	if err := e.sync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := e.publish(); err != nil {
		t.Fatal(err)
	}
	r.nextData(t, "v1")
	// Move on and compact past the source's revision before it watches.
	put(t, cli, "/k", "v2")
	put(t, cli, "/k", "v2b")
	resp, err := cli.Get(t.Context(), "/k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	e.cancel = cancel
	go e.run(ctx)
	defer e.Close()
	r.nextError(t, rpctypes.ErrCompacted)
	r.nextData(t, "v2b")
	put(t, cli, "/k", "v3")
	r.nextData(t, "v3")
}

func TestEtcdOpenErrors(t *testing.T) {
	r := newRecorder()
	if _, err := OpenEtcd(t.Context(), EtcdOptions{Handlers: r.handlers(), Endpoints: []string{"http://127.0.0.1:1"}}); err == nil {
		t.Fatal("no Key accepted")
	}
	if _, err := OpenEtcd(t.Context(), EtcdOptions{Handlers: r.handlers(), Key: "/k"}); err == nil {
		t.Fatal("no Client or Endpoints accepted")
	}
	srv := testservers.Etcd(t)
	cli := etcdClient(t, srv.Endpoint())
	put(t, cli, "/k", "bad")
	if _, err := OpenEtcd(t.Context(), EtcdOptions{Handlers: r.handlers(), Client: cli, Key: "/k"}); !errors.Is(err, ErrRejected) {
		t.Fatalf("rejected first document: %v", err)
	}
	srv.Stop()
	_, err := OpenEtcd(t.Context(), EtcdOptions{Handlers: r.handlers(), Endpoints: []string{srv.Endpoint()}, Key: "/k", RequestTimeout: 500 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "configsource: reading etcd etcd:/k") {
		t.Fatalf("etcd down: %v", err)
	}
}
