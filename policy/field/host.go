package field

import (
	"net/netip"
	"strings"
)

// HostProblem returns why s is not a host as Kong's typedefs.host accepts
// it, or "" when it is one. A host is an IPv4 address, an IPv6 address
// (bare or in brackets) or a host name of letters, digits, '-', '_' and
// '.', and has no port. Kong says "must not have a port" for a value with
// a port; for anything else it quotes the value, which sluice never does:
// the reason says what is wrong instead, as a value such as
// "user:password@redis.example" carries a password.
func HostProblem(s string) string {
	if s == "" {
		return "length must be at least 1"
	}
	if strings.Contains(s, "@") {
		return "invalid value: a host must not carry a user name or password (user:password@); set them in their own fields"
	}
	const invalid = "invalid value: expected an IP address or a host name"
	const port = "must not have a port"
	switch colons := strings.Count(s, ":"); {
	case colons > 1:
		// An IPv6 address, bare or "[addr]" with an optional ":port".
		addr := s
		if strings.HasPrefix(s, "[") {
			end := strings.IndexByte(s, ']')
			if end < 0 {
				return invalid
			}
			addr = s[1:end]
			switch rest := s[end+1:]; {
			case rest == "":
			case len(rest) > 1 && rest[0] == ':' && allDigits(rest[1:]):
				if !isIPv6(addr) {
					return invalid
				}
				return port
			default:
				return invalid
			}
		}
		if !isIPv6(addr) {
			return invalid
		}
		return ""
	case strings.Trim(strings.ReplaceAll(s, ":", ""), "0123456789.") == "":
		// Digits and dots: an IPv4 address, with an optional ":port".
		addr, p, hasPort := strings.Cut(s, ":")
		if !isIPv4(addr) || hasPort && !allDigits(p) {
			return invalid
		}
		if hasPort {
			return port
		}
		return ""
	}
	name, p, hasPort := strings.Cut(s, ":")
	if hasPort && !allDigits(p) {
		return invalid
	}
	if !isHostName(name) {
		return invalid
	}
	if hasPort {
		return port
	}
	return ""
}

// isIPv4 reports whether s is four dot-separated numbers of one to three
// digits, each at most 255 (leading zeros allowed, as Kong does).
func isIPv4(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if len(p) < 1 || len(p) > 3 || !allDigits(p) {
			return false
		}
		n := 0
		for _, c := range p {
			n = n*10 + int(c-'0')
		}
		if n > 255 {
			return false
		}
	}
	return true
}

// isIPv6 reports whether s is an IPv6 address in hexadecimal groups (no
// zone, no dotted IPv4 tail, which Kong rejects too).
func isIPv6(s string) bool {
	if strings.ContainsAny(s, ".%") {
		return false
	}
	a, err := netip.ParseAddr(s)
	return err == nil && a.Is6()
}

// isHostName reports whether s is made of letters, digits, '-', '_' and
// '.', with no label ending in '-' and no empty label but a last one (a
// fully qualified name may end in a dot).
func isHostName(s string) bool {
	if s == "" || strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") != "" {
		return false
	}
	labels := strings.Split(s, ".")
	for i, l := range labels {
		if strings.HasSuffix(l, "-") || l == "" && i != len(labels)-1 {
			return false
		}
	}
	return true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
