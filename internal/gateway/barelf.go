package gateway

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
)

// fasthttp reads a header block only up to CRLF CRLF: a request whose
// lines end in a bare LF would wait for more bytes until the read timeout.
// nginx accepts such a request; sluice answers it 400 at once and closes
// the connection (bare LFs are a request-smuggling vector, and RFC 9112
// lets a server refuse them). lfListener's connections look at the first
// line of each request for that.

// lfListener wraps the plain-HTTP connections of a listener in lfConn.
type lfListener struct {
	net.Listener
	g *Gateway
}

func (l *lfListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if _, ok := c.(*tls.Conn); ok {
		return c, nil
	}
	return &lfConn{Conn: c, g: l.g}, nil
}

// lfConn states.
const (
	lfLineStart = iota // the next byte read starts a request
	lfInLine           // inside a request line, no LF seen yet
	lfChecked          // the request line ended in CRLF
	lfOff              // a tunnel: bytes are not HTTP any more
)

// lfConn answers 400 to a request line ending in a bare LF. The state
// goes back to lfLineStart when a response (not a 1xx one) is written, so
// each request's first line is checked.
type lfConn struct {
	net.Conn
	g      *Gateway
	state  int
	prevCR bool
}

var bareLFAnswer = []byte("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: 25\r\nConnection: close\r\n\r\n{\"message\":\"Bad request\"}")

func (c *lfConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.state >= lfChecked || n == 0 {
		return n, err
	}
	for _, b := range p[:n] {
		switch {
		case c.state == lfLineStart && (b == '\r' || b == '\n'):
			continue // empty lines before a request line are ignored
		case b == '\n':
			if !c.prevCR {
				c.g.clientError(clientBareLF)
				_, _ = c.Conn.Write(bareLFAnswer)
				_ = c.Conn.Close()
				return 0, io.EOF
			}
			c.state = lfChecked
			return n, err
		}
		c.state = lfInLine
		c.prevCR = b == '\r'
	}
	return n, err
}

var (
	strHTTP1x  = []byte("HTTP/1.1 1")
	strHTTP101 = []byte("HTTP/1.1 101")
)

func (c *lfConn) Write(p []byte) (int, error) {
	switch {
	case c.state == lfOff:
	case bytes.HasPrefix(p, strHTTP101):
		c.state = lfOff
	case !bytes.HasPrefix(p, strHTTP1x):
		c.state, c.prevCR = lfLineStart, false
	}
	return c.Conn.Write(p)
}

// ReadFrom keeps the connection's own ReadFrom (a bufio.Writer hands a
// streamed body straight to it), which Write's wrapping would hide.
func (c *lfConn) ReadFrom(r io.Reader) (int64, error) {
	if c.state != lfOff {
		c.state, c.prevCR = lfLineStart, false
	}
	if rf, ok := c.Conn.(io.ReaderFrom); ok {
		return rf.ReadFrom(r)
	}
	return io.Copy(struct{ io.Writer }{c.Conn}, r)
}
