package proxyproto

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
)

func v2(cmd, fam byte, body []byte) []byte {
	b := append([]byte{}, sigV2...)
	b = append(b, 0x20|cmd, fam, 0, 0)
	binary.BigEndian.PutUint16(b[14:], uint16(len(body)))
	return append(b, body...)
}

func TestReadHeader(t *testing.T) {
	v4body := []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x1f, 0x90, 0, 80}
	v6body := make([]byte, 36)
	v6body[0], v6body[1], v6body[15] = 0x20, 0x01, 9
	v6body[32], v6body[33] = 0, 99
	cases := []struct {
		in, want string
		rest     string
	}{
		{"PROXY TCP4 198.51.100.1 10.0.0.1 5555 80\r\nGET /", "198.51.100.1:5555", "GET /"},
		{"PROXY TCP6 2001:db8::1 ::1 5555 80\r\nx", "[2001:db8::1]:5555", "x"},
		{"PROXY UNKNOWN\r\nx", "invalid AddrPort", "x"},
		{string(v2(1, 0x11, v4body)) + "y", "203.0.113.7:8080", "y"},
		{string(v2(1, 0x21, v6body)) + "y", "[2001::9]:99", "y"},
		{string(v2(0, 0x00, nil)) + "z", "invalid AddrPort", "z"},
	}
	for _, c := range cases {
		r := bufio.NewReader(strings.NewReader(c.in))
		got, err := ReadHeader(r)
		if err != nil || got.String() != c.want {
			t.Errorf("%q: got %v %v, want %s", c.in, got, err, c.want)
			continue
		}
		rest, _ := io.ReadAll(r)
		if string(rest) != c.rest {
			t.Errorf("%q: rest %q", c.in, rest)
		}
	}
	for _, bad := range []string{"GET / HTTP/1.1\r\n\r\n", "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "PROXY TCP4 ::1 ::1 1 2\r\n",
		"PROXY TCP4 1.2.3.4 5.6.7.8 99999 2\r\n", string(v2(1, 0x11, []byte{1, 2})), "PROXY " + strings.Repeat("x", 200)} {
		if _, err := ReadHeader(bufio.NewReader(strings.NewReader(bad))); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: got %v, want ErrInvalid", bad, err)
		}
	}
}

func TestListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pl := &Listener{Listener: ln}
	defer pl.Close()
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write([]byte("PROXY TCP4 198.51.100.1 10.0.0.1 5555 80\r\nhello"))
	}()
	c, err := pl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	a, ok := c.RemoteAddr().(*Addr)
	if !ok || a.Source.String() != "198.51.100.1:5555" || !strings.HasPrefix(a.String(), "127.0.0.1:") {
		t.Fatalf("remote addr %#v", c.RemoteAddr())
	}
	b, _ := io.ReadAll(c)
	if !bytes.Equal(b, []byte("hello")) {
		t.Errorf("payload %q", b)
	}
}

func FuzzReadHeader(f *testing.F) {
	f.Add([]byte("PROXY TCP4 198.51.100.1 10.0.0.1 5555 80\r\n"))
	f.Add(v2(1, 0x11, []byte{203, 0, 113, 7, 10, 0, 0, 1, 0x1f, 0x90, 0, 80}))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, _ = ReadHeader(bufio.NewReader(bytes.NewReader(data)))
	})
}
