package main

import (
	"io"
	"strings"
	"testing"
)

// TestHeaderBufferFlags: Kong's header buffer settings are read in
// nginx's syntax, and a malformed one names its flag.
func TestHeaderBufferFlags(t *testing.T) {
	if _, err := parseServe([]string{"-c", "kong.yml", "--large-client-header-buffers", "8 24k", "--client-header-buffer-size", "2k"}, io.Discard); err != nil {
		t.Fatalf("valid flags: %v", err)
	}
	for _, c := range []struct{ flag, value, want string }{
		{"--large-client-header-buffers", "8", "--large-client-header-buffers: "},
		{"--large-client-header-buffers", "4 8q", "--large-client-header-buffers: "},
		{"--client-header-buffer-size", "lots", "--client-header-buffer-size \"lots\": "},
	} {
		_, err := parseServe([]string{"-c", "kong.yml", c.flag, c.value}, io.Discard)
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%s %q: %v, want an error starting %q", c.flag, c.value, err, c.want)
		}
	}
}
