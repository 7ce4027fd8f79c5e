package testservers

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Conn is a minimal RESP2 connection used to probe and set up servers. It
// is not a Redis client: it sends one command at a time and has no pooling.
// It is not safe for concurrent use.
type Conn struct {
	c net.Conn
	r *bufio.Reader
}

// dialRESP connects to addr (through TLS when tc is non-nil) with an
// overall deadline of timeout for the connection's life.
func dialRESP(addr string, tc *tls.Config, timeout time.Duration) (*Conn, error) {
	d := net.Dialer{Timeout: timeout}
	var c net.Conn
	var err error
	if tc != nil {
		c, err = tls.DialWithDialer(&d, "tcp", addr, tc)
	} else {
		c, err = d.Dial("tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
		c.Close()
		return nil, err
	}
	return &Conn{c: c, r: bufio.NewReader(c)}, nil
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// errReply is a Redis error reply ("-ERR ...").
type errReply string

func (e errReply) Error() string { return string(e) }

// Do sends one command and returns its reply: string for simple and bulk
// strings, int64 for integers, nil for a null, []any for arrays. An error
// reply is returned as an error.
func (c *Conn) Do(args ...string) (any, error) {
	var b strings.Builder
	b.WriteString("*" + strconv.Itoa(len(args)) + "\r\n")
	for _, a := range args {
		b.WriteString("$" + strconv.Itoa(len(a)) + "\r\n" + a + "\r\n")
	}
	if _, err := io.WriteString(c.c, b.String()); err != nil {
		return nil, err
	}
	return c.read()
}

func (c *Conn) read() (any, error) {
	line, err := c.r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("testservers: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, errReply(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = c.read(); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("testservers: unexpected reply %q", line)
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		l = strings.TrimSpace(l)
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return v
		}
	}
	return ""
}
