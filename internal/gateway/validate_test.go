package gateway

import (
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

var update = flag.Bool("update", false, "rewrite golden files")

func validator(t testing.TB) *Gateway {
	t.Helper()
	shared := NewShared(policy.RegistryOptions{})
	t.Cleanup(func() { _ = shared.Close() })
	g, err := New(Options{Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestInvalidPluginConfigs checks each fixture in testdata/invalid, one
// failure each, against the exact messages in its .golden file.
func TestInvalidPluginConfigs(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil || len(files) < 10 {
		t.Fatalf("fixtures: %v, %v", files, err)
	}
	g := validator(t)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			err = g.Validate(data)
			if !errors.Is(err, kongconf.ErrInvalid) {
				t.Fatalf("got %v, want an error wrapping kongconf.ErrInvalid", err)
			}
			fes, _ := field.Of(err)
			var got strings.Builder
			for _, fe := range fes {
				got.WriteString(fe.String() + "\n")
			}
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want) {
				t.Errorf("errors:\n%s\nwant:\n%s", got.String(), want)
			}
		})
	}
}

// goWords are Go's words that must never reach a user: type names and
// encoding/json's prefixes.
var goWords = regexp.MustCompile(`\[\]|map\[|json:|Go value|float64|int64|\bbool\b|interface|struct|%!`)

// FuzzPluginConfig feeds every plugin arbitrary JSON as its config: no
// panic, and every rejection is a list of field errors under the plugin's
// config (or of the whole document) in the user's words.
func FuzzPluginConfig(f *testing.F) {
	names := []string{"key-auth", "request-termination", "sluice-dimensions", "rate-limiting-advanced", "rate-limiting", "sluice-concurrency", "basic-auth", "jwt", "acl"}
	for i := range names {
		f.Add(uint8(i), `{}`)
	}
	f.Add(uint8(0), `{"key_names":{},"hide_credentials":[]}`)
	f.Add(uint8(1), `{"status_code":"x","body":1}`)
	f.Add(uint8(2), `{"dimensions":[{"type":"header","header":7}],"overrides_file":[1]}`)
	f.Add(uint8(3), `{"limit":[1],"window_size":[1],"redis":{"port":"x"}}`)
	f.Add(uint8(4), `{"second":"x","policy":[]}`)
	f.Add(uint8(5), `{"limit":2,"lease_ttl":1e999}`)
	f.Add(uint8(6), `{"anonymous":"nobody","realm":7}`)
	f.Add(uint8(7), `{"claims_to_verify":["iat"],"maximum_expiration":-1,"uri_param_names":"jwt"}`)
	f.Add(uint8(8), `{"allow":["a"],"deny":["b"]}`)
	g := validator(f)
	f.Fuzz(func(t *testing.T, which uint8, config string) {
		if !json.Valid([]byte(config)) {
			return
		}
		doc, _ := json.Marshal(map[string]any{
			"_format_version": "3.0",
			"plugins":         []any{map[string]any{"name": names[int(which)%len(names)], "config": json.RawMessage(config)}},
		})
		err := g.Validate(doc)
		if err == nil {
			return
		}
		fes, ok := field.Of(err)
		if !ok || len(fes) == 0 {
			t.Fatalf("error %v lists no field errors", err)
		}
		for _, fe := range fes {
			// A document the YAML reader rejects (a duplicated key, a
			// control character) has its problem in the document as a whole.
			underPlugin := fe.Path == "plugins[0]" || strings.HasPrefix(fe.Path, "plugins[0].")
			if !underPlugin && fe.Path != "" || fe.Message == "" {
				t.Fatalf("error %q does not name a field of the plugin", fe)
			}
			if goWords.MatchString(fe.Message) {
				t.Fatalf("error %q speaks Go", fe)
			}
		}
	})
}
