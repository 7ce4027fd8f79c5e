package dimensions

import (
	"errors"
	"testing"
)

// Distinct value tuples must give distinct keys, whatever bytes the values
// hold (a bare join with ":" would let ("a:b", "c") and ("a", "b:c")
// collide).
func FuzzKeyDistinct(f *testing.F) {
	b, err := New([]byte(`{"dimensions":[
		{"type":"header","header":"X-A"},
		{"type":"query","query":"b"},
		{"type":"path_segment","index":0}],"on_missing":"placeholder","placeholder":"-"}`), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Add("a:b", "c", "x", "a", "b:c", "x")
	f.Add("1:", "", "p", "", "1:", "p")
	f.Add("-", "q", "s", "", "q", "s")
	f.Fuzz(func(t *testing.T, a1, b1, p1, a2, b2, p2 string) {
		in := func(a, q, p string) *Input {
			in := &Input{Path: "/" + p}
			in.SetHeader("x-a", a)
			in.SetQuery("b", q)
			return in
		}
		k1, ok1 := b.Key(in(a1, b1, p1))
		k2, ok2 := b.Key(in(a2, b2, p2))
		if !ok1 || !ok2 {
			t.Fatal("placeholder config gave no key")
		}
		// What the key is made of: the values, with the placeholder for a
		// missing one and the first path segment only.
		norm := func(a, q, p string) [3]string {
			v := [3]string{a, q, segment("/"+p, 0)}
			for i := range v {
				if v[i] == "" {
					v[i] = "-"
				}
			}
			return v
		}
		if (norm(a1, b1, p1) == norm(a2, b2, p2)) != (k1 == k2) {
			t.Fatalf("tuples %q and %q gave keys %q and %q", norm(a1, b1, p1), norm(a2, b2, p2), k1, k2)
		}
	})
}

// Parse never panics, reports failures as *ConfigError, and a config it
// accepts compiles and builds keys.
func FuzzParse(f *testing.F) {
	f.Add([]byte(tenantCfg))
	f.Add([]byte(`{"dimensions":[{"type":"path_regex","pattern":"^/(?P<t>[^/]+)","group":"t"}],"on_missing":"placeholder"}`))
	f.Add([]byte(`{"dimensions":[{"type":"jwt_claim","claim":"a.b"}],"jwt":{"keys":[{"algorithm":"HS256","secret":"x"}]}}`))
	f.Add([]byte(`{"dimensions":[{"type":"ip"}],"overrides":[{"values":["1"],"limit":[1,2],"window_size":[1,2]}]}`))
	f.Add([]byte(`{"dimensions":[{"type":"path_segment","index":-2}],"x":[1,{}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Errors) == 0 {
				t.Fatalf("Parse error %v is not a non-empty *ConfigError", err)
			}
			return
		}
		b, err := Compile(cfg, Options{})
		if err != nil {
			t.Fatalf("Parse accepted what Compile rejects: %v", err)
		}
		in := fullInput()
		in.Path = string(data)
		b.Resolve(in)
	})
}

func FuzzParseOverrides(f *testing.F) {
	f.Add([]byte(`{"overrides":[{"dimension":"tenant","value":"acme","limit":[1000],"window_size":[60]}]}`))
	f.Add([]byte(`{"overrides":[{"values":["a","b"],"limit":[1,2],"window_size":[0.001,1e9],"window_type":"fixed"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		tbl, err := ParseOverrides(data)
		if err != nil {
			var ce *ConfigError
			if !errors.As(err, &ce) || len(ce.Errors) == 0 {
				t.Fatalf("error %v is not a non-empty *ConfigError", err)
			}
			return
		}
		for _, d := range tbl.Dimensions() {
			tbl.Lookup(d, "")
		}
	})
}
