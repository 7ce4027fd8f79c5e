package decision

import (
	"slices"
	"testing"
)

func TestRedactArgs(t *testing.T) {
	got := redactArgs([]string{"sluice-decision", "-admin-token", "t1", "--admin-token=t2", "-c", "f.yaml",
		"-admin-token-file", "/etc/tok", "-redis-password=p", "--", "-admin-token", "x"})
	want := []string{"sluice-decision", "-admin-token", "xxxxx", "--admin-token=xxxxx", "-c", "f.yaml",
		"-admin-token-file", "/etc/tok", "-redis-password=xxxxx", "--", "-admin-token", "x"}
	if !slices.Equal(got, want) {
		t.Errorf("redactArgs = %q, want %q", got, want)
	}
}
