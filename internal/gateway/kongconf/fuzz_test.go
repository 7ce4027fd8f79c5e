package kongconf

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

var goWords = regexp.MustCompile(`\[\][a-z]|map\[[a-z]|json:|Go value|float64|int64|interface \{|%!`)

// FuzzDecode reads arbitrary documents with every environment reference
// resolvable: no panic, every problem has a message in the user's words,
// and a nil model comes only with an error.
func FuzzDecode(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/invalid/*")
	seeds = append(seeds, "../testdata/deck/kong.yml")
	for _, s := range seeds {
		if b, err := os.ReadFile(s); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte("_format_version: \"2.1\"\nroutes: [{paths: ['/a/%2e(b|c)+', '/x%41']}]\n"))
	f.Add([]byte("_format_version: \"3.0\"\nconsumers: [{username: u, custom_id: \"${{ env \"DECK_X\" }}\"}]\n"))
	f.Add([]byte("_format_version: \"3.0\"\nconsumers: [{username: u, keyauth_credentials: [{key: '{vault://env/a/b/c?prefix=p#2}'}]}]\n"))
	env := func(name string) (string, bool) {
		switch name {
		case "DECK_JSON", "A_B", "PA_B_PREVIOUS":
			return `{"c": "v", "n": 1}`, true
		}
		return "1", len(name)%2 == 0
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, errs := DecodeWith(data, DecodeOptions{LookupEnv: env})
		if cfg == nil && len(errs) == 0 {
			t.Fatal("no model and no error")
		}
		for _, fe := range errs {
			if fe.Message == "" {
				t.Fatalf("error without a message at %q", fe.Path)
			}
			if goWords.MatchString(fe.Message) {
				t.Fatalf("error %q speaks Go", fe)
			}
		}
	})
}
