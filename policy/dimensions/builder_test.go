package dimensions

import (
	"errors"
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/ratelimit"
)

func mustNew(t testing.TB, cfg string, opts Options) *Builder {
	t.Helper()
	b, err := New([]byte(cfg), opts)
	if err != nil {
		t.Fatalf("New(%s): %v", cfg, err)
	}
	return b
}

func fullInput() *Input {
	in := &Input{
		Method:   "get",
		Path:     "/tenants/acme/orders/42",
		ClientIP: "203.0.113.7",
		Consumer: ConsumerInfo{ID: "c-1", Username: "alice", CustomID: "cust-9"},
		Route:    Entity{ID: "r-1", Name: "orders"},
		Service:  Entity{ID: "s-1", Name: "shop"},
	}
	in.SetHeader("X-Tenant", "acme")
	in.SetQuery("plan", "gold")
	return in
}

func TestKeyEachDimension(t *testing.T) {
	tests := []struct {
		dim  string
		want string
	}{
		{`{"type":"header","header":"x-tenant"}`, "acme"},
		{`{"type":"query","query":"plan"}`, "gold"},
		{`{"type":"path_segment","index":1}`, "acme"},
		{`{"type":"path_segment"}`, "tenants"},
		{`{"type":"path_segment","index":-1}`, "42"},
		{`{"type":"path_segment","index":-4}`, "tenants"},
		{`{"type":"path_regex","pattern":"^/tenants/([^/]+)"}`, "acme"},
		{`{"type":"path_regex","pattern":"~^/tenants/[^/]+/orders/(?P<order>\\d+)$","group":"order"}`, "42"},
		{`{"type":"path_regex","pattern":"^/(t)enants/([^/]+)","group":"2"}`, "acme"},
		{`{"type":"method"}`, "GET"},
		{`{"type":"ip"}`, "203.0.113.7"},
		{`{"type":"consumer"}`, "c-1"},
		{`{"type":"consumer","field":"username"}`, "alice"},
		{`{"type":"consumer","field":"custom_id"}`, "cust-9"},
		{`{"type":"route"}`, "r-1"},
		{`{"type":"route","field":"name"}`, "orders"},
		{`{"type":"service"}`, "s-1"},
		{`{"type":"service","field":"name"}`, "shop"},
	}
	for _, tt := range tests {
		t.Run(tt.dim, func(t *testing.T) {
			b := mustNew(t, `{"dimensions":[`+tt.dim+`]}`, Options{})
			key, ok := b.Key(fullInput())
			if !ok || key != ratelimit.Key(tt.want) {
				t.Fatalf("Key = %q, %v; want %q", key, ok, ratelimit.Key(tt.want))
			}
		})
	}
}

func TestKeyMissing(t *testing.T) {
	cfg := `{"dimensions":[{"type":"header","header":"X-Tenant"},{"type":"query","query":"user"%s}]%s}`
	in := fullInput() // has no "user" query argument
	tests := []struct {
		name, dimExtra, cfgExtra string
		want                     string
		ok                       bool
	}{
		{"default skips", "", "", "", false},
		{"skip", ``, `,"on_missing":"skip"`, "", false},
		{"placeholder default", ``, `,"on_missing":"placeholder"`, ratelimit.Key("acme", "-"), true},
		{"placeholder literal", ``, `,"on_missing":"placeholder","placeholder":"anon"`, ratelimit.Key("acme", "anon"), true},
		{"dimension overrides config", `,"on_missing":"placeholder","placeholder":"none"`, `,"on_missing":"skip"`, ratelimit.Key("acme", "none"), true},
		{"dimension skips", `,"on_missing":"skip"`, `,"on_missing":"placeholder"`, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := mustNew(t, strings.Replace(strings.Replace(cfg, "%s", tt.dimExtra, 1), "%s", tt.cfgExtra, 1), Options{})
			key, ok := b.Key(in)
			if key != tt.want || ok != tt.ok {
				t.Fatalf("Key = %q, %v; want %q, %v", key, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestKeyPrefixAndOrder(t *testing.T) {
	b := mustNew(t, `{"key_prefix":"biz","dimensions":[{"type":"method"},{"type":"header","header":"X-Tenant"},{"type":"ip"}]}`, Options{})
	key, ok := b.Key(fullInput())
	if want := ratelimit.Key("biz", "GET", "acme", "203.0.113.7"); !ok || key != want {
		t.Fatalf("Key = %q, %v; want %q", key, ok, want)
	}
	if got := b.Names(); strings.Join(got, ",") != "method,header:x-tenant,ip" {
		t.Fatalf("Names = %v", got)
	}
}

func TestEmptyValuesAreMissing(t *testing.T) {
	b := mustNew(t, `{"dimensions":[{"type":"path_segment","index":3},{"type":"path_regex","pattern":"^/x/(a)?"}],"on_missing":"placeholder"}`, Options{})
	key, ok := b.Key(&Input{Path: "/x/"})
	if want := ratelimit.Key("-", "-"); !ok || key != want {
		t.Fatalf("Key = %q, %v; want %q", key, ok, want)
	}
}

func TestNeedsAndFill(t *testing.T) {
	b := mustNew(t, `{"dimensions":[
		{"type":"header","header":"X-Tenant"},
		{"name":"t2","type":"header","header":"x-tenant"},
		{"type":"query","query":"plan"},
		{"type":"consumer","field":"username"}]}`, Options{})
	n := b.Needs()
	if n.Method || n.Path || n.ClientIP || !n.Consumer || n.Route || n.Service ||
		strings.Join(n.Headers, ",") != "x-tenant" || strings.Join(n.Query, ",") != "plan" {
		t.Fatalf("Needs = %+v", n)
	}
	if n.Calls() != 3 {
		t.Fatalf("Calls = %d, want 3", n.Calls())
	}
	a := &countingAccessor{}
	var in Input
	if err := b.Fill(&in, a); err != nil {
		t.Fatal(err)
	}
	if strings.Join(a.calls, ",") != "consumer,header:x-tenant,query:plan" {
		t.Fatalf("accessor calls = %v", a.calls)
	}
	key, ok := b.Key(&in)
	if want := ratelimit.Key("acme", "acme", "gold", "alice"); !ok || key != want {
		t.Fatalf("Key = %q, %v; want %q", key, ok, want)
	}

	a.fail = true
	if err := b.Fill(&in, a); !errors.Is(err, errAccessor) || !strings.Contains(err.Error(), "reading consumer") {
		t.Fatalf("Fill error = %v", err)
	}
}

var errAccessor = errors.New("pdk down")

type countingAccessor struct {
	calls []string
	fail  bool
}

func (a *countingAccessor) rec(s string) error {
	a.calls = append(a.calls, s)
	if a.fail {
		return errAccessor
	}
	return nil
}
func (a *countingAccessor) Method() (string, error)   { return "GET", a.rec("method") }
func (a *countingAccessor) Path() (string, error)     { return "/p", a.rec("path") }
func (a *countingAccessor) ClientIP() (string, error) { return "192.0.2.1", a.rec("ip") }
func (a *countingAccessor) Consumer() (ConsumerInfo, error) {
	return ConsumerInfo{ID: "id", Username: "alice"}, a.rec("consumer")
}
func (a *countingAccessor) Route() (Entity, error)   { return Entity{ID: "r"}, a.rec("route") }
func (a *countingAccessor) Service() (Entity, error) { return Entity{ID: "s"}, a.rec("service") }
func (a *countingAccessor) Header(name string) (string, error) {
	return "acme", a.rec("header:" + name)
}
func (a *countingAccessor) QueryArg(name string) (string, error) {
	return "gold", a.rec("query:" + name)
}

func TestInputReset(t *testing.T) {
	in := fullInput()
	in.Reset()
	if in.Method != "" || len(in.Headers) != 0 || cap(in.Headers) == 0 || in.header("x-tenant") != "" {
		t.Fatalf("Reset left %+v", in)
	}
}

func TestCompileFromGo(t *testing.T) {
	cfg := &Config{
		Dimensions: []Dimension{{Type: Header, Header: "X-Tenant"}},
		Overrides: []Override{{Dimension: "header:x-tenant", Value: "acme", Quota: Quota{
			Limits: []ratelimit.Limit{ratelimit.PerMinute(1000)},
		}}},
	}
	b, err := Compile(cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := b.Resolve(fullInput())
	if !r.Overridden || r.Quota.Limits[0].Count != 1000 || r.By != "header:x-tenant" {
		t.Fatalf("Resolve = %+v", r)
	}
	if _, err := Compile(nil, Options{}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("Compile(nil) = %v", err)
	}
	if _, err := Compile(&Config{Dimensions: []Dimension{{Type: Header, Header: "X", OnMissing: 9}}}, Options{}); err == nil {
		t.Fatal("Compile accepted on_missing 9")
	}
}

func TestSegment(t *testing.T) {
	tests := []struct {
		path string
		i    int
		want string
	}{
		{"/a/b/c", 0, "a"}, {"/a/b/c", 2, "c"}, {"/a/b/c", 3, ""},
		{"/a/b/c", -1, "c"}, {"/a/b/c", -3, "a"}, {"/a/b/c", -4, ""},
		{"", 0, ""}, {"/", 0, ""}, {"/a//c", 1, ""}, {"/a/b/", -1, ""}, {"a/b", 1, "b"},
	}
	for _, tt := range tests {
		if got := segment(tt.path, tt.i); got != tt.want {
			t.Errorf("segment(%q, %d) = %q, want %q", tt.path, tt.i, got, tt.want)
		}
	}
}
