package gateway

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/seed-008287da/sluice/internal/gateway/proxyproto"
)

// A ListenSpec is one entry of Kong's proxy_listen:
// "0.0.0.0:8443 ssl http2 reuseport backlog=16384".
type ListenSpec struct {
	// Addr is host:port.
	Addr string
	// SSL serves TLS, certificates chosen by SNI (see Gateway.ServeTLS).
	SSL bool
	// HTTP2 offers HTTP/2 by ALPN; it needs SSL.
	HTTP2 bool
	// ProxyProtocol requires a PROXY protocol header on every connection.
	ProxyProtocol bool
	// ReusePort sets SO_REUSEPORT; Deferred sets TCP_DEFER_ACCEPT.
	ReusePort, Deferred bool
	// Backlog is the accept queue length; 0 leaves the system's.
	Backlog int
	// IPv6Only is "on" or "off" for IPV6_V6ONLY; "" leaves the default.
	IPv6Only string
	// KeepAlive is so_keepalive: "" (the Go default), "on", "off" or
	// "idle:interval:count" (each part optional, idle and interval in
	// seconds unless suffixed with s or m).
	KeepAlive string
}

// ParseListen reads a Kong listen value: comma-separated entries, each an
// address followed by flags (ssl, http2, proxy_protocol, reuseport,
// deferred, bind, backlog=N, ipv6only=on|off, so_keepalive=...), or "off"
// for none (a nil slice).
func ParseListen(s string) ([]ListenSpec, error) {
	s = strings.TrimSpace(s)
	if s == "off" {
		return nil, nil
	}
	if s == "" {
		return nil, fmt.Errorf("empty listen value (want e.g. 0.0.0.0:8000, or off)")
	}
	var out []ListenSpec
	for entry := range strings.SplitSeq(s, ",") {
		words := strings.Fields(entry)
		if len(words) == 0 {
			return nil, fmt.Errorf("empty entry in %q", s)
		}
		sp := ListenSpec{Addr: words[0]}
		host, port, err := net.SplitHostPort(sp.Addr)
		if err != nil {
			return nil, fmt.Errorf("%q: want host:port (e.g. 0.0.0.0:8000)", sp.Addr)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return nil, fmt.Errorf("%q: invalid port %q", sp.Addr, port)
		}
		if host == "*" {
			sp.Addr = net.JoinHostPort("0.0.0.0", port)
		}
		for _, w := range words[1:] {
			name, val, hasVal := strings.Cut(w, "=")
			switch {
			case w == "ssl":
				sp.SSL = true
			case w == "http2":
				sp.HTTP2 = true
			case w == "proxy_protocol":
				sp.ProxyProtocol = true
			case w == "reuseport":
				sp.ReusePort = true
			case w == "deferred":
				sp.Deferred = true
			case w == "bind":
				// every listener has its own socket already
			case name == "backlog" && hasVal:
				n, err := strconv.Atoi(val)
				if err != nil || n < 1 {
					return nil, fmt.Errorf("%s: backlog must be a positive integer, got %q", sp.Addr, val)
				}
				sp.Backlog = n
			case name == "ipv6only" && hasVal:
				if val != "on" && val != "off" {
					return nil, fmt.Errorf("%s: ipv6only must be on or off, got %q", sp.Addr, val)
				}
				sp.IPv6Only = val
			case name == "so_keepalive" && hasVal:
				if _, err := keepAliveConfig(val); err != nil {
					return nil, fmt.Errorf("%s: so_keepalive: %w", sp.Addr, err)
				}
				sp.KeepAlive = val
			default:
				return nil, fmt.Errorf("%s: unknown listen flag %q (sluice knows ssl, http2, proxy_protocol, reuseport, deferred, bind, backlog=N, ipv6only=on|off, so_keepalive=...)", sp.Addr, w)
			}
		}
		if sp.HTTP2 && !sp.SSL {
			return nil, fmt.Errorf("%s: http2 without ssl (cleartext HTTP/2) is not supported; add ssl", sp.Addr)
		}
		out = append(out, sp)
	}
	return out, nil
}

// keepAliveConfig reads so_keepalive's value.
func keepAliveConfig(v string) (net.KeepAliveConfig, error) {
	switch v {
	case "on":
		return net.KeepAliveConfig{Enable: true}, nil
	case "off":
		return net.KeepAliveConfig{Enable: false, Idle: -1, Interval: -1, Count: -1}, nil
	}
	parts := strings.Split(v, ":")
	if len(parts) != 3 {
		return net.KeepAliveConfig{}, fmt.Errorf("want on, off or idle:interval:count, got %q", v)
	}
	kc := net.KeepAliveConfig{Enable: true}
	dur := func(s string) (time.Duration, error) {
		if s == "" {
			return 0, nil
		}
		mult := time.Second
		if rest, ok := strings.CutSuffix(s, "m"); ok {
			s, mult = rest, time.Minute
		} else if rest, ok := strings.CutSuffix(s, "s"); ok {
			s = rest
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("invalid time %q", s)
		}
		return time.Duration(n) * mult, nil
	}
	var err error
	if kc.Idle, err = dur(parts[0]); err != nil {
		return kc, err
	}
	if kc.Interval, err = dur(parts[1]); err != nil {
		return kc, err
	}
	if parts[2] != "" {
		if kc.Count, err = strconv.Atoi(parts[2]); err != nil || kc.Count < 0 {
			return kc, fmt.Errorf("invalid count %q", parts[2])
		}
	}
	return kc, nil
}

// Listen opens the socket sp describes (wrapped in a PROXY protocol reader
// when sp.ProxyProtocol). Serve it with Serve, or ServeTLS when sp.SSL.
func Listen(ctx context.Context, sp ListenSpec) (net.Listener, error) {
	lc := net.ListenConfig{}
	if sp.KeepAlive != "" {
		kc, err := keepAliveConfig(sp.KeepAlive)
		if err != nil {
			return nil, err
		}
		lc.KeepAliveConfig = kc
		if !kc.Enable {
			lc.KeepAlive = -1
		}
	}
	lc.Control = func(network, address string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if sp.ReusePort {
				if serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); serr != nil {
					return
				}
			}
			if sp.IPv6Only != "" && strings.HasSuffix(network, "6") {
				on := 0
				if sp.IPv6Only == "on" {
					on = 1
				}
				if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, on); serr != nil {
					return
				}
			}
		})
		if err != nil {
			return err
		}
		return serr
	}
	ln, err := lc.Listen(ctx, "tcp", sp.Addr)
	if err != nil {
		return nil, err
	}
	if sp.Backlog > 0 || sp.Deferred {
		if err := setListenOptions(ln, sp); err != nil {
			_ = ln.Close()
			return nil, fmt.Errorf("%s: %w", sp.Addr, err)
		}
	}
	if sp.ProxyProtocol {
		ln = &proxyproto.Listener{Listener: ln}
	}
	return ln, nil
}

// setListenOptions applies the accept queue length (Linux takes a second
// listen(2) as a new backlog) and TCP_DEFER_ACCEPT on a listening socket.
func setListenOptions(ln net.Listener, sp ListenSpec) error {
	tl, ok := ln.(*net.TCPListener)
	if !ok {
		return nil
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if sp.Deferred {
			if serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_DEFER_ACCEPT, 1); serr != nil {
				serr = fmt.Errorf("deferred: %w", serr)
				return
			}
		}
		if sp.Backlog > 0 {
			if serr = unix.Listen(int(fd), sp.Backlog); serr != nil {
				serr = fmt.Errorf("backlog: %w", serr)
			}
		}
	})
	if err != nil {
		return err
	}
	return serr
}
