package dimensions

import (
	"testing"
)

// TestWatchReplacesInlineOverrides: a watched source's documents replace
// the inline overrides as a whole, a rejected set keeps the table in
// force, and a source that holds nothing gives the inline overrides back.
func TestWatchReplacesInlineOverrides(t *testing.T) {
	var apply func([][]byte) error
	stopped := 0
	watch := func(src Source, a func([][]byte) error) (func(), error) {
		apply = a
		return func() { stopped++ }, nil
	}
	l, err := Watch(Source{File: "/q.json"}, watch, nil)
	if err != nil {
		t.Fatal(err)
	}
	b := mustNew(t, tenantCfg, Options{Overrides: l.Overrides()})
	quota := func() string {
		t.Helper()
		r := b.Resolve(req("acme", "GET"))
		if !r.Overridden {
			return ""
		}
		return r.Quota.Limits[0].String()
	}
	if q := quota(); q != "1000/1m0s sliding" {
		t.Fatalf("before any document: %q, want the inline override", q)
	}
	if err := apply([][]byte{[]byte(`{"overrides": [{"dimension": "tenant", "value": "acme", "limit": [7], "window_size": [60]}]}`)}); err != nil {
		t.Fatal(err)
	}
	if q := quota(); q != "7/1m0s sliding" {
		t.Fatalf("after a document: %q", q)
	}
	if err := apply([][]byte{[]byte(`{"overrides": [{"dimension": "tenant"}]}`)}); err == nil {
		t.Fatal("a broken document was accepted")
	}
	if q := quota(); q != "7/1m0s sliding" {
		t.Fatalf("after a rejected document: %q", q)
	}
	if err := apply([][]byte{[]byte(`{"overrides": []}`)}); err != nil {
		t.Fatal(err)
	}
	if q := quota(); q != "" {
		t.Fatalf("after an empty table: %q, want no override", q)
	}
	if err := apply(nil); err != nil {
		t.Fatal(err)
	}
	if q := quota(); q != "1000/1m0s sliding" {
		t.Fatalf("with nothing at the source: %q, want the inline override", q)
	}
	if err := l.Close(); err != nil || stopped != 1 {
		t.Fatalf("Close = %v, stopped %d times", err, stopped)
	}
}

func TestSourceCheckAndString(t *testing.T) {
	for _, tc := range []struct {
		src  Source
		want string
	}{
		{Source{}, ""},
		{Source{File: "/q"}, ""},
		{Source{EtcdEndpoints: []string{"http://e:2379"}, EtcdPrefix: "/q/"}, ""},
		{Source{EtcdPrefix: "/q/"}, "config.overrides_etcd_endpoints: both overrides_etcd_endpoints and overrides_etcd_prefix are required"},
		{Source{EtcdEndpoints: []string{"http://e:2379"}}, "config.overrides_etcd_endpoints: both overrides_etcd_endpoints and overrides_etcd_prefix are required"},
		{Source{File: "/q", EtcdPrefix: "/q/"}, "config.overrides_file: set either overrides_file or overrides_etcd_*, not both"},
	} {
		errs := tc.src.Check("config")
		got := ""
		if len(errs) > 0 {
			got = errs[0].String()
		}
		if got != tc.want || len(errs) > 1 {
			t.Errorf("%+v: Check = %v, want %q", tc.src, errs, tc.want)
		}
	}
	a := Source{EtcdEndpoints: []string{"http://a:1", "http://b:2"}, EtcdPrefix: "/p/"}
	b := Source{EtcdEndpoints: []string{"http://a:1"}, EtcdPrefix: `http://b:2"/p/`}
	if a.String() == b.String() {
		t.Errorf("distinct sources share %q", a.String())
	}
}
