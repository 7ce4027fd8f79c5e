package clientip

import (
	"net/netip"
	"strings"
	"testing"
)

func mustNew(t *testing.T, o Options) *Resolver {
	t.Helper()
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestResolve(t *testing.T) {
	lb := netip.MustParseAddr("10.0.0.5")
	stranger := netip.MustParseAddr("203.0.113.9")
	cases := []struct {
		name   string
		opts   Options
		peer   netip.Addr
		values []string
		want   string
	}{
		{"default trusts nobody", Options{}, stranger, []string{"1.1.1.1"}, "203.0.113.9"},
		{"untrusted peer cannot choose", Options{TrustedIPs: []string{"10.0.0.0/8"}}, stranger, []string{"1.1.1.1"}, "203.0.113.9"},
		{"x-real-ip from trusted", Options{TrustedIPs: []string{"10.0.0.0/8"}}, lb, []string{"1.1.1.1"}, "1.1.1.1"},
		{"invalid header gives peer", Options{TrustedIPs: []string{"10.0.0.0/8"}}, lb, []string{"not-an-ip"}, "10.0.0.5"},
		{"missing header gives peer", Options{TrustedIPs: []string{"10.0.0.0/8"}}, lb, nil, "10.0.0.5"},
		{"xff last, not recursive", Options{TrustedIPs: []string{"10.0.0.0/8"}, RealIPHeader: XForwardedFor},
			lb, []string{"6.6.6.6, 1.1.1.1", "10.0.0.7"}, "10.0.0.7"},
		{"xff recursive skips trusted", Options{TrustedIPs: []string{"10.0.0.0/8"}, RealIPHeader: XForwardedFor, Recursive: true},
			lb, []string{"6.6.6.6, 1.1.1.1", "10.0.0.7"}, "1.1.1.1"},
		{"xff recursive all trusted gives left-most", Options{TrustedIPs: []string{"10.0.0.0/8"}, RealIPHeader: XForwardedFor, Recursive: true},
			lb, []string{"10.1.1.1, 10.0.0.7"}, "10.1.1.1"},
		{"xff recursive stops at garbage", Options{TrustedIPs: []string{"10.0.0.0/8"}, RealIPHeader: XForwardedFor, Recursive: true},
			lb, []string{"1.1.1.1, junk, 10.0.0.7"}, "10.0.0.7"},
		{"single address trust, v6 and port", Options{TrustedIPs: []string{"10.0.0.5", "::/0"}, RealIPHeader: XForwardedFor},
			lb, []string{"[2001:db8::1]:443"}, "2001:db8::1"},
		{"mapped peer", Options{TrustedIPs: []string{"10.0.0.0/8"}}, netip.MustParseAddr("::ffff:10.0.0.5"), []string{"1.1.1.1"}, "1.1.1.1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := mustNew(t, c.opts).Resolve(c.peer, c.values, netip.Addr{})
			if got.String() != c.want {
				t.Errorf("got %s, want %s", got, c.want)
			}
		})
	}
}

func TestProxyProtocol(t *testing.T) {
	r := mustNew(t, Options{TrustedIPs: []string{"127.0.0.1"}, RealIPHeader: ProxyProtocol})
	peer := netip.MustParseAddr("127.0.0.1")
	if got := r.Resolve(peer, []string{"9.9.9.9"}, netip.MustParseAddr("8.8.8.8")); got.String() != "8.8.8.8" {
		t.Errorf("got %s", got)
	}
	if got := r.Resolve(peer, nil, netip.Addr{}); got != peer {
		t.Errorf("no PROXY header: got %s", got)
	}
}

func TestNewErrors(t *testing.T) {
	_, err := New(Options{TrustedIPs: []string{"10.0.0.0/33", "x", "10.0.0.0/8"}})
	if err == nil || !strings.Contains(err.Error(), `"10.0.0.0/33"`) || !strings.Contains(err.Error(), `"x"`) {
		t.Errorf("got %v, want both bad entries named", err)
	}
}

// FuzzResolve: whatever the header says, an untrusted peer gets its own
// address, and a trusted peer gets either its own address or one that
// appears in the header.
func FuzzResolve(f *testing.F) {
	f.Add("1.1.1.1, 10.0.0.7", true, true)
	f.Add("[::1]:80,,", false, true)
	f.Add("", true, false)
	f.Add("999.1.1.1, ::ffff:1.2.3.4%eth0", true, true)
	f.Fuzz(func(t *testing.T, header string, trusted, recursive bool) {
		r := mustNew(t, Options{TrustedIPs: []string{"10.0.0.0/8"}, RealIPHeader: XForwardedFor, Recursive: recursive})
		peer := netip.MustParseAddr("192.0.2.1")
		if trusted {
			peer = netip.MustParseAddr("10.9.9.9")
		}
		got := r.Resolve(peer, []string{header}, netip.Addr{})
		if !got.IsValid() {
			t.Fatalf("invalid address for %q", header)
		}
		if !trusted && got != peer {
			t.Fatalf("untrusted peer chose %s with %q", got, header)
		}
		if got == peer {
			return
		}
		for _, part := range splitList([]string{header}) {
			if a, ok := parseAddr(part); ok && a == got {
				return
			}
		}
		t.Fatalf("%s is neither the peer nor in %q", got, header)
	})
}
