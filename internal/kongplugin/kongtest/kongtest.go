// Package kongtest is an in-process fake Kong for go-pdk plugins.
//
// A Kong holds one scripted client request (IPs, headers, consumer,
// credential, route, service, kong.ctx.shared) and runs plugin phase
// handlers against it through the real go-pdk bridge: Run connects the
// handler's *pdk.PDK to a goroutine over net.Pipe, and that goroutine
// answers each PDK method frame the way Kong's plugin server RPC does, while
// recording the call. After a phase, the captured response headers, the
// exit (status, body, headers), kong.ctx.shared and the list of PDK calls
// (one IPC round trip each) can be inspected.
//
// Unlike go-pdk's own test package, every identity attribute is scripted, a
// missing consumer or credential is answered as Kong answers it (an empty
// frame), and the shared context survives from one phase to the next, so
// access and log handlers of several plugins can cooperate on one request.
package kongtest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/bridge"
	"github.com/Kong/go-pdk/client"
	"github.com/Kong/go-pdk/entities"
	pb "github.com/Kong/go-pdk/server/kong_plugin_protocol"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Request is the scripted client request. The zero value is a GET of "/"
// from 127.0.0.1 with no consumer, no credential, no route and no service.
type Request struct {
	// Method is the HTTP method; empty means GET.
	Method string
	// Path is the request path without the query string; empty means "/".
	Path string
	// RawQuery is the query string without "?".
	RawQuery string
	// Host is the Host header value; empty means "localhost".
	Host string
	// Headers are the request headers. Lookups are case-insensitive and,
	// as in Kong, "_" matches "-".
	Headers http.Header
	// IP is the TCP peer (kong.client.get_ip); empty means 127.0.0.1.
	IP string
	// ForwardedIP is the client address after Kong's realip processing
	// (kong.client.get_forwarded_ip); empty means IP.
	ForwardedIP string
	// Consumer is the authenticated consumer; nil means none.
	Consumer *entities.Consumer
	// Credential is the authenticated credential; nil means none.
	Credential *client.AuthenticatedCredential
	// Consumers are the consumers kong.client.load_consumer finds, by id or
	// by username.
	Consumers []entities.Consumer
	// Route and Service are the matched route and service; nil means none.
	Route   *entities.Route
	Service *entities.Service
	// Shared is the initial content of kong.ctx.shared, as set by plugins
	// that ran earlier (Lua or Go). Values must be JSON-like. It is copied.
	Shared map[string]any
	// TrustedIPs are the addresses kong.ip.is_trusted reports as trusted.
	TrustedIPs []string
}

// Exit is a captured kong.response.exit.
type Exit struct {
	Status  int
	Body    []byte
	Headers http.Header
}

// Kong is the state of one request going through Kong's phases. It is safe
// to inspect between Run calls; Run calls must not overlap.
type Kong struct {
	tb  testing.TB
	req Request

	mu      sync.Mutex
	shared  map[string]any
	headers http.Header
	exit    *Exit
	calls   []string
	logs    []string
}

// New returns a fake Kong answering for req. Protocol errors and calls to
// methods the fake does not know fail tb.
func New(tb testing.TB, req Request) *Kong {
	if req.Method == "" {
		req.Method = http.MethodGet
	}
	if req.Path == "" {
		req.Path = "/"
	}
	if req.Host == "" {
		req.Host = "localhost"
	}
	if req.IP == "" {
		req.IP = "127.0.0.1"
	}
	if req.ForwardedIP == "" {
		req.ForwardedIP = req.IP
	}
	k := &Kong{tb: tb, req: req, shared: map[string]any{}, headers: http.Header{}}
	for key, v := range req.Shared {
		k.shared[key] = v
	}
	return k
}

// StartInstance asks the plugin server on conn (its Unix socket, as Kong
// connects) to start an instance of plugin name with config (JSON) and
// returns the instance id.
func StartInstance(conn net.Conn, seq int64, name string, config []byte) (int32, error) {
	call := &pb.RpcCall{Sequence: seq, Call: &pb.RpcCall_CmdStartInstance{
		CmdStartInstance: &pb.CmdStartInstance{Name: name, Config: config}}}
	ret, err := rpc(conn, call)
	if err != nil {
		return 0, err
	}
	st := ret.GetInstanceStatus()
	if st == nil {
		return 0, fmt.Errorf("kongtest: start instance: no instance status in %v", ret)
	}
	return st.InstanceId, nil
}

// HandleEvent runs one event (phase) of an instance on a plugin server,
// as Kong does over the server's socket, answering its PDK calls from this
// request's state, and returns the calls. After kong.response.exit the
// server closes the connection; that ends the event normally and conn must
// not be used again.
func (k *Kong) HandleEvent(conn net.Conn, seq int64, instance int32, event string) ([]string, error) {
	call := &pb.RpcCall{Sequence: seq, Call: &pb.RpcCall_CmdHandleEvent{
		CmdHandleEvent: &pb.CmdHandleEvent{InstanceId: instance, EventName: event}}}
	b, err := proto.Marshal(call)
	if err != nil {
		return nil, err
	}
	if err := writeFrame(conn, b); err != nil {
		return nil, err
	}
	calls := k.serve(conn)
	if k.Exit() != nil {
		return calls, nil
	}
	b, err = readFrame(conn)
	if err != nil {
		return calls, fmt.Errorf("kongtest: reading the event's return: %w", err)
	}
	var ret pb.RpcReturn
	if err := proto.Unmarshal(b, &ret); err != nil {
		return calls, err
	}
	if ret.Sequence != seq {
		return calls, fmt.Errorf("kongtest: return sequence %d, want %d", ret.Sequence, seq)
	}
	return calls, nil
}

// rpc sends one RpcCall and reads its RpcReturn.
func rpc(conn net.Conn, call *pb.RpcCall) (*pb.RpcReturn, error) {
	b, err := proto.Marshal(call)
	if err != nil {
		return nil, err
	}
	if err := writeFrame(conn, b); err != nil {
		return nil, err
	}
	if b, err = readFrame(conn); err != nil {
		return nil, fmt.Errorf("kongtest: reading the return of call %d: %w", call.Sequence, err)
	}
	var ret pb.RpcReturn
	if err := proto.Unmarshal(b, &ret); err != nil {
		return nil, err
	}
	return &ret, nil
}

// Run runs one phase handler, such as cfg.Access, with a PDK bridged to
// this fake, and returns the PDK methods it called in order: one entry per
// IPC round trip. If an earlier phase exited, Kong still runs later phases
// (log), so Run does too.
func (k *Kong) Run(handler func(*pdk.PDK)) []string {
	plugin, kong := net.Pipe()
	done := make(chan []string)
	go func() {
		defer kong.Close()
		done <- k.serve(kong)
	}()
	handler(pdk.Init(plugin))
	plugin.Close()
	return <-done
}

// serve answers PDK calls until the plugin side ends the event (an empty
// frame) or closes the connection.
func (k *Kong) serve(conn net.Conn) []string {
	var calls []string
	for {
		method, err := readFrame(conn)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
				k.tb.Errorf("kongtest: reading method frame: %v", err)
			}
			return calls
		}
		if len(method) == 0 {
			// A plugin server ends an event's PDK calls with an empty frame.
			return calls
		}
		args, err := readFrame(conn)
		if err != nil {
			k.tb.Errorf("kongtest: reading arguments of %s: %v", method, err)
			return calls
		}
		calls = append(calls, string(method))
		out, err := k.handle(string(method), args)
		if err != nil {
			k.tb.Errorf("kongtest: %s: %v", method, err)
		}
		var reply []byte
		if out != nil {
			if reply, err = proto.Marshal(out); err != nil {
				k.tb.Errorf("kongtest: encoding reply of %s: %v", method, err)
			}
		}
		if err := writeFrame(conn, reply); err != nil {
			// go-pdk closes its side right after the exit reply.
			if !errors.Is(err, io.ErrClosedPipe) {
				k.tb.Errorf("kongtest: writing reply of %s: %v", method, err)
			}
			return calls
		}
		k.mu.Lock()
		k.calls = append(k.calls, string(method))
		k.mu.Unlock()
	}
}

// handle answers one PDK method. A nil message is sent as an empty frame,
// which is how Kong answers nil (no consumer, absent shared key).
func (k *Kong) handle(method string, args []byte) (proto.Message, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	r := &k.req
	str := func() (string, error) {
		var s pb.String
		err := proto.Unmarshal(args, &s)
		return s.V, err
	}
	switch method {
	case "kong.client.get_ip":
		return bridge.WrapString(r.IP), nil
	case "kong.client.get_forwarded_ip":
		return bridge.WrapString(r.ForwardedIP), nil
	case "kong.client.get_port", "kong.client.get_forwarded_port":
		return &pb.Int{V: 40000}, nil
	case "kong.client.get_protocol":
		return bridge.WrapString("http"), nil
	case "kong.client.get_consumer":
		if r.Consumer == nil {
			return nil, nil
		}
		return consumerPB(*r.Consumer), nil
	case "kong.client.load_consumer":
		var spec pb.ConsumerSpec
		if err := proto.Unmarshal(args, &spec); err != nil {
			return nil, err
		}
		for _, c := range r.Consumers {
			if (!spec.ByUsername && c.Id == spec.Id) || (spec.ByUsername && c.Username == spec.Id) {
				return consumerPB(c), nil
			}
		}
		return nil, nil
	case "kong.client.get_credential":
		if r.Credential == nil {
			return nil, nil
		}
		return &pb.AuthenticatedCredential{Id: r.Credential.Id, ConsumerId: r.Credential.ConsumerId}, nil
	case "kong.router.get_route":
		if r.Route == nil {
			return nil, nil
		}
		return &pb.Route{Id: r.Route.Id, Name: r.Route.Name, Paths: r.Route.Paths, Tags: r.Route.Tags,
			Service: &pb.ServiceKey{Id: r.Route.Service.Id}}, nil
	case "kong.router.get_service":
		if r.Service == nil {
			return nil, nil
		}
		return &pb.Service{Id: r.Service.Id, Name: r.Service.Name, Host: r.Service.Host, Tags: r.Service.Tags}, nil
	case "kong.ip.is_trusted":
		ip, err := str()
		return &pb.Bool{V: slices.Contains(r.TrustedIPs, ip)}, err
	case "kong.request.get_method":
		return bridge.WrapString(r.Method), nil
	case "kong.request.get_path":
		return bridge.WrapString(r.Path), nil
	case "kong.request.get_raw_query":
		return bridge.WrapString(r.RawQuery), nil
	case "kong.request.get_path_with_query":
		if r.RawQuery == "" {
			return bridge.WrapString(r.Path), nil
		}
		return bridge.WrapString(r.Path + "?" + r.RawQuery), nil
	case "kong.request.get_scheme", "kong.request.get_forwarded_scheme":
		return bridge.WrapString("http"), nil
	case "kong.request.get_host", "kong.request.get_forwarded_host":
		return bridge.WrapString(r.Host), nil
	case "kong.request.get_query_arg":
		name, err := str()
		if err != nil {
			return nil, err
		}
		q, _ := url.ParseQuery(r.RawQuery)
		return bridge.WrapString(q.Get(name)), nil
	case "kong.request.get_header":
		name, err := str()
		if err != nil {
			return nil, err
		}
		return bridge.WrapString(headerValue(r.Headers, name)), nil
	case "kong.request.get_headers":
		h := http.Header{}
		for name, v := range r.Headers {
			h[strings.ToLower(name)] = v
		}
		return bridge.WrapHeaders(h)
	case "kong.ctx.shared.get":
		name, err := str()
		if err != nil {
			return nil, err
		}
		v, ok := k.shared[name]
		if !ok || v == nil {
			return nil, nil
		}
		return structpb.NewValue(v)
	case "kong.ctx.shared.set":
		var kv pb.KV
		if err := proto.Unmarshal(args, &kv); err != nil {
			return nil, err
		}
		k.shared[kv.K] = kv.V.AsInterface()
		return nil, nil
	case "kong.response.set_header", "kong.response.add_header":
		var kv pb.KV
		if err := proto.Unmarshal(args, &kv); err != nil {
			return nil, err
		}
		if method == "kong.response.set_header" {
			k.headers.Set(kv.K, kv.V.GetStringValue())
		} else {
			k.headers.Add(kv.K, kv.V.GetStringValue())
		}
		return nil, nil
	case "kong.response.clear_header":
		name, err := str()
		k.headers.Del(name)
		return nil, err
	case "kong.response.set_headers":
		var st structpb.Struct
		if err := proto.Unmarshal(args, &st); err != nil {
			return nil, err
		}
		for name, v := range bridge.UnwrapHeaders(&st) {
			k.headers[http.CanonicalHeaderKey(name)] = v
		}
		return nil, nil
	case "kong.response.exit":
		var ea pb.ExitArgs
		if err := proto.Unmarshal(args, &ea); err != nil {
			return nil, err
		}
		if k.exit != nil {
			return nil, fmt.Errorf("second exit in one request (first status %d)", k.exit.Status)
		}
		e := &Exit{Status: int(ea.Status), Body: ea.Body, Headers: http.Header{}}
		if ea.Headers != nil {
			for name, v := range bridge.UnwrapHeaders(ea.Headers) {
				e.Headers[http.CanonicalHeaderKey(name)] = v
			}
		}
		k.exit = e
		return nil, nil
	case "kong.log.alert", "kong.log.crit", "kong.log.err", "kong.log.warn",
		"kong.log.notice", "kong.log.info", "kong.log.debug":
		var l structpb.ListValue
		if err := proto.Unmarshal(args, &l); err != nil {
			return nil, err
		}
		k.logs = append(k.logs, method[strings.LastIndexByte(method, '.')+1:]+": "+fmt.Sprint(l.AsSlice()...))
		return nil, nil
	}
	return nil, fmt.Errorf("unknown PDK method")
}

// headerValue looks a header up the way kong.request.get_header does:
// case-insensitively, "_" standing for "-", first value.
func headerValue(h http.Header, name string) string {
	want := strings.ReplaceAll(strings.ToLower(name), "_", "-")
	for k, v := range h {
		if strings.ToLower(k) == want && len(v) > 0 {
			return v[0]
		}
	}
	return ""
}

func consumerPB(c entities.Consumer) *pb.Consumer {
	return &pb.Consumer{Id: c.Id, CreatedAt: int64(c.CreatedAt), Username: c.Username, CustomId: c.CustomId, Tags: c.Tags}
}

// ResponseHeaders returns a copy of the headers set for the client response
// with kong.response.set_header(s) / add_header, excluding those passed to
// exit.
func (k *Kong) ResponseHeaders() http.Header {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.headers.Clone()
}

// Exit returns the captured kong.response.exit, or nil when no plugin
// exited: the request would be proxied.
func (k *Kong) Exit() *Exit {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.exit == nil {
		return nil
	}
	e := *k.exit
	e.Headers = e.Headers.Clone()
	return &e
}

// Shared returns a copy of kong.ctx.shared.
func (k *Kong) Shared() map[string]any {
	k.mu.Lock()
	defer k.mu.Unlock()
	m := make(map[string]any, len(k.shared))
	for key, v := range k.shared {
		m[key] = v
	}
	return m
}

// Logs returns the kong.log.* lines, each "level: message".
func (k *Kong) Logs() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.logs)
}

// Calls returns every PDK method called on this request so far, over all
// phases.
func (k *Kong) Calls() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.calls)
}

// readFrame reads one frame of the plugin socket framing: a little-endian
// uint32 length, then that many bytes.
func readFrame(r io.Reader) ([]byte, error) {
	var n uint32
	if err := binary.Read(r, binary.LittleEndian, &n); err != nil {
		return nil, err
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// writeFrame writes one frame; an empty payload is a length of zero alone.
func writeFrame(w io.Writer, b []byte) error {
	if err := binary.Write(w, binary.LittleEndian, uint32(len(b))); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	_, err := w.Write(b)
	return err
}
