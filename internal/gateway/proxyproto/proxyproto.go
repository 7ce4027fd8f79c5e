// Package proxyproto reads the PROXY protocol header (HAProxy's, versions 1
// and 2) that a load balancer sends at the start of each connection, as an
// nginx listener with "proxy_protocol" does.
package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrInvalid is returned by a connection whose PROXY header is missing or
// malformed; the connection is unusable.
var ErrInvalid = errors.New("proxyproto: invalid PROXY protocol header")

// DefaultHeaderTimeout bounds the wait for the header.
const DefaultHeaderTimeout = 10 * time.Second

var sigV2 = []byte("\r\n\r\n\x00\r\nQUIT\n")

// A Listener requires a PROXY header on every accepted connection. The
// header is read on the connection's first Read (or RemoteAddr), not in
// Accept, so one slow peer cannot stall the accept loop.
type Listener struct {
	net.Listener
	// HeaderTimeout bounds the wait for the header; zero means
	// DefaultHeaderTimeout.
	HeaderTimeout time.Duration
}

// Accept wraps the next connection.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	t := l.HeaderTimeout
	if t <= 0 {
		t = DefaultHeaderTimeout
	}
	return &Conn{Conn: c, timeout: t}, nil
}

// Addr is the RemoteAddr of a Conn: the TCP peer (the load balancer) and
// the client address its header announced. String returns the peer's.
type Addr struct {
	Peer net.Addr
	// Source is the announced client address, the zero AddrPort for a
	// LOCAL or UNKNOWN header.
	Source netip.AddrPort
}

// Network returns the peer's network.
func (a *Addr) Network() string { return a.Peer.Network() }

func (a *Addr) String() string { return a.Peer.String() }

// A Conn is a connection whose PROXY header has been (or will be) read.
type Conn struct {
	net.Conn
	timeout time.Duration
	once    sync.Once
	r       *bufio.Reader
	src     netip.AddrPort
	err     error
}

func (c *Conn) init() {
	c.once.Do(func() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(c.timeout))
		c.r = bufio.NewReaderSize(c.Conn, 256)
		c.src, c.err = ReadHeader(c.r)
		_ = c.Conn.SetReadDeadline(time.Time{})
		if c.err != nil {
			_ = c.Conn.Close()
		}
	})
}

// Read reads after the header.
func (c *Conn) Read(p []byte) (int, error) {
	c.init()
	if c.err != nil {
		return 0, c.err
	}
	return c.r.Read(p)
}

// RemoteAddr returns an *Addr carrying the peer and the announced source.
func (c *Conn) RemoteAddr() net.Addr {
	c.init()
	return &Addr{Peer: c.Conn.RemoteAddr(), Source: c.src}
}

// ReadHeader reads one PROXY header, version 1 or 2, and returns the
// source address it announces (zero for LOCAL / UNKNOWN).
func ReadHeader(r *bufio.Reader) (netip.AddrPort, error) {
	head, err := r.Peek(len(sigV2))
	if err != nil && !(errors.Is(err, io.EOF) && len(head) >= 6) {
		return netip.AddrPort{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if bytes.Equal(head, sigV2) {
		return readV2(r)
	}
	if bytes.HasPrefix(head, []byte("PROXY ")) {
		return readV1(r)
	}
	return netip.AddrPort{}, fmt.Errorf("%w: no PROXY signature", ErrInvalid)
}

func readV1(r *bufio.Reader) (netip.AddrPort, error) {
	var line []byte
	for len(line) < 107 {
		b, err := r.ReadByte()
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		line = append(line, b)
		if b == '\n' {
			break
		}
	}
	s, ok := strings.CutSuffix(string(line), "\r\n")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("%w: v1 line not terminated by CRLF within 107 bytes", ErrInvalid)
	}
	f := strings.Split(s, " ")
	if len(f) >= 2 && f[1] == "UNKNOWN" {
		return netip.AddrPort{}, nil
	}
	if len(f) != 6 || (f[1] != "TCP4" && f[1] != "TCP6") {
		return netip.AddrPort{}, fmt.Errorf("%w: v1 line %q", ErrInvalid, s)
	}
	src, err := netip.ParseAddr(f[2])
	if err != nil || (f[1] == "TCP4") != src.Is4() {
		return netip.AddrPort{}, fmt.Errorf("%w: v1 source %q", ErrInvalid, f[2])
	}
	if _, err := netip.ParseAddr(f[3]); err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: v1 destination %q", ErrInvalid, f[3])
	}
	port, err := strconv.ParseUint(f[4], 10, 16)
	if err != nil || (len(f[4]) > 1 && f[4][0] == '0') {
		return netip.AddrPort{}, fmt.Errorf("%w: v1 source port %q", ErrInvalid, f[4])
	}
	if _, err := strconv.ParseUint(f[5], 10, 16); err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: v1 destination port %q", ErrInvalid, f[5])
	}
	return netip.AddrPortFrom(src, uint16(port)), nil
}

func readV2(r *bufio.Reader) (netip.AddrPort, error) {
	var hdr [16]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	verCmd, fam := hdr[12], hdr[13]
	n := int(binary.BigEndian.Uint16(hdr[14:16]))
	if verCmd>>4 != 2 {
		return netip.AddrPort{}, fmt.Errorf("%w: v2 version %d", ErrInvalid, verCmd>>4)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return netip.AddrPort{}, fmt.Errorf("%w: v2 body: %v", ErrInvalid, err)
	}
	switch verCmd & 0xf {
	case 0: // LOCAL: the balancer's own connection (health check)
		return netip.AddrPort{}, nil
	case 1: // PROXY
	default:
		return netip.AddrPort{}, fmt.Errorf("%w: v2 command %d", ErrInvalid, verCmd&0xf)
	}
	switch fam >> 4 {
	case 1: // AF_INET
		if n < 12 {
			return netip.AddrPort{}, fmt.Errorf("%w: v2 IPv4 body of %d bytes", ErrInvalid, n)
		}
		a := netip.AddrFrom4([4]byte(body[0:4]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(body[8:10])), nil
	case 2: // AF_INET6
		if n < 36 {
			return netip.AddrPort{}, fmt.Errorf("%w: v2 IPv6 body of %d bytes", ErrInvalid, n)
		}
		a := netip.AddrFrom16([16]byte(body[0:16]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(body[32:34])), nil
	}
	return netip.AddrPort{}, nil // AF_UNSPEC or AF_UNIX: no address
}
