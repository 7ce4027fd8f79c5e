package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestSplit(t *testing.T) {
	for _, c := range []struct {
		name        string
		by          int
		group, cont string
	}{
		{"BenchmarkHotKey/xtime-one-2", -1, "BenchmarkHotKey-2", "xtime-one"},
		{"BenchmarkHotKey/xtime-one", -1, "BenchmarkHotKey", "xtime-one"},
		{"BenchmarkRedis/redis_rate/callers=64-2", 1, "BenchmarkRedis/callers=64-2", "redis_rate"},
		{"BenchmarkKeys/keys=1000k/sluice-sync0.1-2", -1, "BenchmarkKeys/keys=1000k-2", "sluice-sync0.1"},
		{"BenchmarkX-2", 5, "BenchmarkX-2", ""},
	} {
		g, k := split(c.name, c.by)
		if g != c.group || k != c.cont {
			t.Errorf("split(%q, %d) = %q, %q; want %q, %q", c.name, c.by, g, k, c.group, c.cont)
		}
	}
}

func TestMedianTable(t *testing.T) {
	in := strings.Join([]string{
		"BenchmarkHotKey/a-2 100 10.0 ns/op 0 B/op",
		"BenchmarkHotKey/a-2 100 30.0 ns/op 0 B/op",
		"BenchmarkHotKey/a-2 100 20.0 ns/op 0 B/op",
		"BenchmarkHotKey/b-2 100 5.0 ns/op 0 B/op",
		"--- FAIL: BenchmarkHotKey/c-2",
		"PASS",
	}, "\n")
	var out, errs bytes.Buffer
	if code := run([]string{"-ref", "a", "-metrics", "ns/op"}, strings.NewReader(in), &out, &errs); code != 0 {
		t.Fatalf("exit %d: %s", code, errs.String())
	}
	for _, want := range []string{"| a | 3 | 20.0 | 1.00x |", "| b | 1 | 5.00 | 0.25x |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
