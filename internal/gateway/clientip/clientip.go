// Package clientip computes the client address the way Kong (nginx's realip
// module) does: forwarding headers are believed only when the TCP peer is
// a trusted proxy.
package clientip

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Header names accepted as RealIPHeader, besides any other header name.
const (
	XRealIP       = "X-Real-IP"
	XForwardedFor = "X-Forwarded-For"
	// ProxyProtocol takes the address from the PROXY protocol header of the
	// connection; the listener must be set up to read it.
	ProxyProtocol = "proxy_protocol"
)

// ErrInvalid is wrapped by New's errors.
var ErrInvalid = errors.New("clientip: invalid setting")

// A Resolver turns a TCP peer and its forwarding headers into the client
// address. The zero value trusts nobody and always returns the peer. A
// Resolver is immutable and safe for concurrent use.
type Resolver struct {
	trusted   []netip.Prefix
	header    string // canonical name, or ProxyProtocol
	recursive bool
}

// Options mirror Kong's kong.conf settings.
type Options struct {
	// TrustedIPs are CIDRs or single addresses whose forwarding headers are
	// believed (Kong's trusted_ips). Empty trusts nobody; "0.0.0.0/0" and
	// "::/0" trust everybody.
	TrustedIPs []string
	// RealIPHeader is where a trusted peer's client address is read
	// (real_ip_header): X-Real-IP (the default when empty),
	// X-Forwarded-For, any other header holding one address or a list, or
	// proxy_protocol.
	RealIPHeader string
	// Recursive walks an address list right to left, skipping trusted
	// addresses (real_ip_recursive). Off takes the last address.
	Recursive bool
}

// New validates opts and returns a Resolver. Every invalid CIDR is named.
func New(opts Options) (*Resolver, error) {
	r := &Resolver{recursive: opts.Recursive, header: opts.RealIPHeader}
	if r.header == "" {
		r.header = XRealIP
	}
	var errs []error
	for _, s := range opts.TrustedIPs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if s == "unix:" {
			continue // unix sockets are not served by this gateway
		}
		if p, err := netip.ParsePrefix(s); err == nil {
			r.trusted = append(r.trusted, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: trusted_ips: %q is neither an address nor a CIDR", ErrInvalid, s))
			continue
		}
		a = a.Unmap()
		r.trusted = append(r.trusted, netip.PrefixFrom(a, a.BitLen()))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return r, nil
}

// Header returns the header the resolver reads, or ProxyProtocol.
func (r *Resolver) Header() string { return r.header }

// Trusted reports whether a is a trusted proxy.
func (r *Resolver) Trusted(a netip.Addr) bool {
	a = a.Unmap()
	for _, p := range r.trusted {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Resolve returns the client address for a connection from peer that sent
// the given values of the real-IP header (all occurrences, in order;
// values may be comma-separated lists). proxied is the address the PROXY
// protocol announced, or the zero Addr. A missing or invalid header value
// gives the peer.
func (r *Resolver) Resolve(peer netip.Addr, values []string, proxied netip.Addr) netip.Addr {
	peer = peer.Unmap()
	if r == nil || len(r.trusted) == 0 || !r.Trusted(peer) {
		return peer
	}
	if r.header == ProxyProtocol {
		if proxied.IsValid() {
			return proxied.Unmap()
		}
		return peer
	}
	list := splitList(values)
	if len(list) == 0 {
		return peer
	}
	if !r.recursive {
		a, ok := parseAddr(list[len(list)-1])
		if !ok {
			return peer
		}
		return a
	}
	// nginx realip with recursion: walk right to left while the address
	// is trusted; the first untrusted one is the client. If all are
	// trusted, the left-most one is.
	var last netip.Addr
	for i := len(list) - 1; i >= 0; i-- {
		a, ok := parseAddr(list[i])
		if !ok {
			if last.IsValid() {
				return last
			}
			return peer
		}
		if !r.Trusted(a) {
			return a
		}
		last = a
	}
	return last
}

func splitList(values []string) []string {
	var out []string
	for _, v := range values {
		for part := range strings.SplitSeq(v, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

// parseAddr accepts an address, optionally bracketed or with a port as
// some proxies write it ("1.2.3.4:5678", "[::1]:80").
func parseAddr(s string) (netip.Addr, bool) {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().WithZone(""), true
	}
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().Unmap().WithZone(""), true
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		if a, err := netip.ParseAddr(s[1 : len(s)-1]); err == nil {
			return a.Unmap().WithZone(""), true
		}
	}
	return netip.Addr{}, false
}
