package gateway

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityCorrelationID is Kong's correlation-id PRIORITY: it runs before
// every other plugin.
const PriorityCorrelationID = 100001

// correlationID is Kong's correlation-id plugin: a request without the
// header gets one, sent upstream and, with echo_downstream, back to the
// client. Generators: "uuid" (a random UUID), "uuid#counter" (a UUID made
// when the plugin is built, then "#" and a counter: Kong makes one per
// worker), "tracker" (server address, port, process id, connection
// number, request number on it and the time in seconds with milliseconds).
type correlationID struct {
	header string
	gen    string
	echo   bool
	base   string // uuid#counter's UUID
	count  atomic.Uint64
}

type correlationIDConfig struct {
	HeaderName     *string `json:"header_name"`
	Generator      *string `json:"generator"`
	EchoDownstream bool    `json:"echo_downstream"`
}

func newCorrelationID(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c correlationIDConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	p := &correlationID{header: "Kong-Request-ID", gen: "uuid#counter", echo: c.EchoDownstream, base: newUUID()}
	if c.HeaderName != nil {
		p.header = *c.HeaderName
		if !validHeaderName(p.header) {
			errs = append(errs, field.Error{Path: "config.header_name", Message: fmt.Sprintf("bad header name '%s', allowed characters are A-Z, a-z, 0-9, '_', and '-'", p.header)})
		}
	}
	if c.Generator != nil {
		p.gen = *c.Generator
		switch p.gen {
		case "uuid", "uuid#counter", "tracker":
		default:
			errs = append(errs, field.Error{Path: "config.generator", Message: "expected one of: uuid, uuid#counter, tracker"})
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// validHeaderName is Kong's validate_header_name: letters, digits, '_'
// and '-'.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// newUUID returns a random (version 4) UUID.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], b[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], b[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], b[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], b[8:10])
	s[23] = '-'
	hex.Encode(s[24:], b[10:])
	return string(s[:])
}

func (p *correlationID) generate(x *Exchange) string {
	switch p.gen {
	case "uuid":
		return newUUID()
	case "tracker":
		addr, port, _ := net.SplitHostPort(x.ctx.LocalAddr().String())
		return fmt.Sprintf("%s-%s-%d-%d-%d-%.3f", addr, port, os.Getpid(), x.ctx.ConnID(), x.ctx.ConnRequestNum(),
			float64(x.Now.UnixMilli())/1000)
	}
	return p.base + "#" + strconv.FormatUint(p.count.Add(1), 10)
}

func (p *correlationID) Access(x *Exchange) error {
	id := x.Header(p.header)
	if id == "" {
		id = p.generate(x)
		x.SetUpstreamHeader(p.header, id)
	}
	x.correlationID = id
	if p.echo {
		x.SetResponseHeader(p.header, id)
	}
	return nil
}
