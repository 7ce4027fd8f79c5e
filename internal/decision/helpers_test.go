package decision

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/memorystore"
)

// t0 is 10 s into a minute, an hour and a day, so no window of a test ends
// while it runs.
var t0 = time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)

// clock is a settable clock for Options.Now.
type clock struct{ ns atomic.Int64 }

func newClock(t time.Time) *clock {
	c := &clock{}
	c.set(t)
	return c
}

func (c *clock) set(t time.Time)            { c.ns.Store(t.UnixNano()) }
func (c *clock) add(d time.Duration)        { c.ns.Add(int64(d)) }
func (c *clock) now() time.Time             { return time.Unix(0, c.ns.Load()).UTC() }
func (c *clock) opts() Options              { return Options{Now: c.now} }
func (c *clock) optsWith(o Options) Options { o.Now = c.now; return o }

func mustParse(t testing.TB, yml string) *Config {
	t.Helper()
	cfg, err := Parse([]byte(yml))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return cfg
}

// newService returns a Service over a fresh memory store, closed with t.
func newService(t testing.TB, yml string, opts Options) *Service {
	t.Helper()
	st := memorystore.New(memorystore.Options{SweepInterval: -1})
	t.Cleanup(func() { _ = st.Close() })
	return mustNew(t, yml, st, opts)
}

func mustNew(t testing.TB, yml string, st ratelimit.Store, opts Options) *Service {
	t.Helper()
	s, err := New(mustParse(t, yml), st, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

// serveGRPC serves s on 127.0.0.1:0 and returns a client connected to it
// over a real gRPC connection.
func serveGRPC(t testing.TB, s *Service) (rlspb.RateLimitServiceClient, *grpc.ClientConn) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	gs := NewGRPCServer(s)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(lis)
	}()
	conn := dial(t, lis.Addr().String())
	t.Cleanup(func() {
		_ = conn.Close()
		gs.Stop()
		<-done
	})
	return rlspb.NewRateLimitServiceClient(conn), conn
}

func dial(t testing.TB, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	return conn
}

// desc builds a request descriptor from key, value pairs.
func desc(kv ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func request(domain string, ds ...*rlpb.RateLimitDescriptor) *rlspb.RateLimitRequest {
	return &rlspb.RateLimitRequest{Domain: domain, Descriptors: ds}
}

func call(t testing.TB, c rlspb.RateLimitServiceClient, req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}
