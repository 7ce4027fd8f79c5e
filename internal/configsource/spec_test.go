package configsource

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/seed-008287da/sluice/internal/testservers"
)

func TestOpenSpec(t *testing.T) {
	r := newRecorder()
	for _, s := range []Spec{{}, {File: "a", EtcdEndpoints: []string{"b"}}, {EtcdEndpoints: []string{"b"}}} {
		if _, err := Open(t.Context(), s, r.handlers()); !errors.Is(err, ErrSpec) {
			t.Errorf("Open(%+v) = %v, want ErrSpec", s, err)
		}
	}

	path := filepath.Join(t.TempDir(), "quotas.json")
	write(t, path, "f1")
	src, err := Open(t.Context(), Spec{File: path}, r.handlers())
	if err != nil {
		t.Fatal(err)
	}
	r.nextData(t, "f1")
	src.Close()

	srv := testservers.Etcd(t)
	cli := etcdClient(t, srv.Endpoint())
	put(t, cli, "/q/acme", "e1")
	src, err = Open(t.Context(), Spec{EtcdEndpoints: []string{srv.Endpoint()}, EtcdKey: "/q/", EtcdPrefix: true}, r.handlers())
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if d := r.next(t); len(d.Values()) != 1 || string(d.Values()[0]) != "e1" {
		t.Fatalf("prefix document %+v", d)
	}
}
