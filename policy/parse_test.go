package policy

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files")

// parse picks the parser by the fixture's name prefix.
func parse(name string, raw []byte) (any, error) {
	if strings.HasPrefix(name, "basic") {
		return ParseBasic(raw)
	}
	return ParseAdvanced(raw)
}

// TestGolden: Kong config in, normalised policy out.
func TestGolden(t *testing.T) {
	ins, _ := filepath.Glob("testdata/golden/*.json")
	if len(ins) == 0 {
		t.Fatal("no golden inputs")
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := parse(name, raw)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			got, err := json.MarshalIndent(cfg, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			out := strings.TrimSuffix(in, ".json") + ".golden"
			if *update {
				if err := os.WriteFile(out, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(out)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if string(got) != string(want) {
				t.Errorf("normalised config differs from %s:\n%s", out, got)
			}
		})
	}
}

// TestInvalid: one fixture per validation failure, with the exact
// messages, in order.
func TestInvalid(t *testing.T) {
	ins, _ := filepath.Glob("testdata/invalid/*.json")
	if len(ins) == 0 {
		t.Fatal("no fixtures")
	}
	for _, in := range ins {
		name := strings.TrimSuffix(filepath.Base(in), ".json")
		t.Run(name, func(t *testing.T) {
			raw, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(strings.TrimSuffix(in, ".json") + ".err")
			if err != nil {
				t.Fatal(err)
			}
			_, err = parse(name, raw)
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a *ValidationError", err)
			}
			if !errors.Is(err, ErrInvalidConfig) {
				t.Errorf("err does not wrap ErrInvalidConfig")
			}
			var b strings.Builder
			for _, fe := range ve.Errors {
				b.WriteString(fe.String() + "\n")
			}
			if b.String() != string(want) {
				t.Errorf("errors:\n%s\nwant:\n%s", b.String(), want)
			}
		})
	}
}

func TestNamespaceDefault(t *testing.T) {
	a, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[1]}`))
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Namespace) != 32 || a.Namespace == b.Namespace {
		t.Errorf("auto namespaces %q, %q: want two different random 32-character strings", a.Namespace, b.Namespace)
	}
	c, err := ParseAdvanced([]byte(`{"limit":[1],"window_size":[1],"__plugin_id":"p-1"}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Namespace != "p-1" {
		t.Errorf("namespace = %q, want the plugin id", c.Namespace)
	}
}

func TestParseOverride(t *testing.T) {
	o, err := ParseOverride([]byte(`{"limit":[50,5],"window_size":[3600,60],"window_type":"fixed"}`))
	if err != nil {
		t.Fatal(err)
	}
	if o.Limit[0] != 5 || o.WindowSize[0] != 60 || o.WindowType != WindowFixed {
		t.Errorf("override = %+v, want sorted fixed limits", o)
	}
	_, err = ParseOverride([]byte(`{"limit":[1],"window_size":[1,2],"retry_after_jitter_max":-1}`))
	want := "policy: invalid config: config.window_size: You must provide the same number of windows and limits; config.retry_after_jitter_max: Non-negative retry_after_jitter_max value is expected"
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// FuzzParse: no input panics, and every error names a field.
func FuzzParse(f *testing.F) {
	for _, dir := range []string{"testdata/golden/*.json", "testdata/invalid/*.json"} {
		ins, _ := filepath.Glob(dir)
		for _, in := range ins {
			raw, err := os.ReadFile(in)
			if err != nil {
				f.Fatal(err)
			}
			f.Add(raw)
		}
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, p := range []func([]byte) error{
			func(b []byte) error { _, err := ParseAdvanced(b); return err },
			func(b []byte) error { _, err := ParseBasic(b); return err },
			func(b []byte) error { _, err := ParseOverride(b); return err },
		} {
			err := p(raw)
			if err == nil {
				continue
			}
			var ve *ValidationError
			if !errors.As(err, &ve) || len(ve.Errors) == 0 {
				t.Fatalf("error %v is not a non-empty *ValidationError", err)
			}
			for _, fe := range ve.Errors {
				if fe.Path != "config" && !strings.HasPrefix(fe.Path, "config.") || fe.Message == "" {
					t.Fatalf("error %q does not name a field", fe)
				}
			}
		}
	})
}

// TestKongStringTypes: path and header_name are checked as Kong's path and
// header_name types (kong/db/schema/typedefs.lua): what Kong accepts loads.
func TestKongStringTypes(t *testing.T) {
	for _, p := range []string{"/", "/orders", "/a%2Fb/%7e", "/v1/~x:@!$&'()*+,;=._-"} {
		if msg := checkURLPath(p); msg != "" {
			t.Errorf("path %q: %s", p, msg)
		}
	}
	for _, p := range []string{"orders", "/a//b", "/a b", "/a?b", "/a#b", "/é", "/a%", "/a%4", "/a%g0"} {
		if checkURLPath(p) == "" {
			t.Errorf("path %q accepted", p)
		}
	}
	for _, h := range []string{"X-Tenant", "x_tenant", "A1"} {
		if msg := checkHeaderName(h); msg != "" {
			t.Errorf("header name %q: %s", h, msg)
		}
	}
	for _, h := range []string{"X Tenant", "X-Tenant:", "X.Tenant", "é"} {
		if checkHeaderName(h) == "" {
			t.Errorf("header name %q accepted", h)
		}
	}
}
