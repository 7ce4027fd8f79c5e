package adminauth

import (
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHasToken(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	if HasToken(r, "") {
		t.Error("an empty token is carried by a request without the header")
	}
	if HasToken(r, "t") {
		t.Error("a request without the header carries t")
	}
	r.Header.Set(TokenHeader, "t")
	if !HasToken(r, "t") || HasToken(r, "tt") {
		t.Error("token compare is wrong")
	}
}

func TestSameOrigin(t *testing.T) {
	for _, c := range []struct {
		origin, fetchSite string
		want              bool
	}{
		{"", "", true},
		{"http://example.com", "", true},
		{"http://evil.example", "", false},
		{"null", "", false},
		{"", "cross-site", false},
		{"", "same-site", false},
		{"", "same-origin", true},
	} {
		r := httptest.NewRequest("DELETE", "http://example.com/x", nil)
		if c.origin != "" {
			r.Header.Set("Origin", c.origin)
		}
		if c.fetchSite != "" {
			r.Header.Set("Sec-Fetch-Site", c.fetchSite)
		}
		if got := SameOrigin(r); got != c.want {
			t.Errorf("Origin %q, Sec-Fetch-Site %q: %v, want %v", c.origin, c.fetchSite, got, c.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true, "unix:/run/sluice.sock": true,
		"0.0.0.0:8080": false, ":8080": false, "10.0.0.1:8080": false, "example.com:80": false, "garbage": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestReadTokenFile(t *testing.T) {
	dir := t.TempDir()
	good, empty := filepath.Join(dir, "good"), filepath.Join(dir, "empty")
	if err := os.WriteFile(good, []byte("  tok-s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, []byte("\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := ReadTokenFile(good); err != nil || tok != "tok-s3cret" {
		t.Errorf("ReadTokenFile(good) = %q, %v", tok, err)
	}
	if _, err := ReadTokenFile(empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("ReadTokenFile(empty): %v", err)
	}
	if _, err := ReadTokenFile(filepath.Join(dir, "none")); err == nil {
		t.Error("ReadTokenFile of a missing file: no error")
	}
}
