package field

import (
	"strings"
	"testing"
)

func TestHostProblem(t *testing.T) {
	const (
		ok      = ""
		port    = "must not have a port"
		invalid = "invalid value: expected an IP address or a host name"
		user    = "invalid value: a host must not carry a user name or password (user:password@); set them in their own fields"
	)
	for s, want := range map[string]string{
		"127.0.0.1": ok, "001.002.003.004": ok, "::1": ok, "[::1]": ok, "2001:db8::1": ok,
		"redis": ok, "redis.example": ok, "redis.example.": ok, "my_redis-1.local": ok, "-a.b": ok,
		"127.0.0.1:6379": port, "1.2.3.4:99999": port, "redis.example:6379": port, "[::1]:6379": port,
		"":                      "length must be at least 1",
		"user:pw@redis.example": user, "pw@redis.example:6379": user, "redis://u:p@h": user,
		"1.2.3": invalid, "1.2.3.256": invalid, "1234": invalid, "1.2.3.4:": invalid,
		"redis.example:secret": invalid, "redis.example:": invalid, "a..b": invalid, ".a": invalid,
		"a-.b": invalid, "redis example": invalid, "redis/0": invalid, "::ffff:1.2.3.4": invalid,
		"fe80::1%eth0": invalid, "[::1": invalid, "[::1]x": invalid, "[::1]:": invalid, "1:2:3": invalid,
		"[redis]": invalid,
	} {
		got := HostProblem(s)
		if got != want {
			t.Errorf("HostProblem(%q) = %q, want %q", s, got, want)
		}
		if s != "" && got != "" && strings.Contains(got, s) {
			t.Errorf("HostProblem(%q) quotes the value: %q", s, got)
		}
	}
}
