package decision

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// backend is one place a ported table runs: a fresh service on a store,
// called over a transport, with its own clock.
type backend struct {
	clk *clock
	s   *Service
	c   rlspb.RateLimitServiceClient
}

var namespaces atomic.Int64

// eachBackend runs f on the files on the memory store and on a real
// redis-server (synchronous, windows on the service's clock), each over
// gRPC and over envoyproxy/ratelimit's POST /json: four runs, each on
// fresh counters and a clock set to t0. opts.Now is replaced.
func eachBackend(t *testing.T, files []File, opts Options, f func(t *testing.T, b backend)) {
	t.Helper()
	r := testservers.Redis(t, testservers.RedisOptions{})
	for _, store := range []string{"memory", "redis"} {
		for _, transport := range []string{"grpc", "json"} {
			t.Run(store+"/"+transport, func(t *testing.T) {
				b := backend{clk: newClock(t0)}
				o := b.clk.optsWith(opts)
				if store == "redis" {
					o.Store = &StoreConfig{Type: "redis", Redis: RedisConfig{
						Config:    redisstore.Config{Host: r.Host(), Port: r.Port()},
						Namespace: "m" + strconv.FormatInt(namespaces.Add(1), 10),
						Timeout:   2 * time.Second, ServiceClock: true,
					}}
				}
				s, err := OpenFiles(files, o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				b.s = s
				if transport == "grpc" {
					b.c, _ = serveGRPC(t, s)
				} else {
					srv := httptest.NewServer(s.Handler())
					t.Cleanup(srv.Close)
					b.c = jsonClient{url: srv.URL + "/json", hc: srv.Client()}
				}
				f(t, b)
			})
		}
	}
}

// eachBackendYAML is eachBackend for one file.
func eachBackendYAML(t *testing.T, yml string, opts Options, f func(t *testing.T, b backend)) {
	t.Helper()
	eachBackend(t, []File{{Name: "config.yaml", Data: []byte(yml)}}, opts, f)
}

// jsonClient calls envoyproxy/ratelimit's POST /json with the request in
// protobuf's JSON form. It checks that the HTTP status agrees with the
// answer (200 OK, 429 OVER_LIMIT) and turns 400 and 503 into the gRPC
// codes the service gives for them.
type jsonClient struct {
	url string
	hc  *http.Client
}

func (j jsonClient) ShouldRateLimit(ctx context.Context, in *rlspb.RateLimitRequest, _ ...grpc.CallOption) (*rlspb.RateLimitResponse, error) {
	body, err := protojson.Marshal(in)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, j.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	res, err := j.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return nil, err
	}
	switch res.StatusCode {
	case http.StatusOK, http.StatusTooManyRequests:
	case http.StatusBadRequest:
		return nil, status.Error(codes.InvalidArgument, string(b))
	case http.StatusServiceUnavailable:
		return nil, status.Error(codes.Unavailable, string(b))
	default:
		return nil, fmt.Errorf("POST /json: %d %s", res.StatusCode, b)
	}
	var out rlspb.RateLimitResponse
	if err := protojson.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("POST /json: decoding %s: %w", b, err)
	}
	if over := out.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT; over != (res.StatusCode == http.StatusTooManyRequests) {
		return nil, fmt.Errorf("POST /json: status %d with overall code %s", res.StatusCode, out.OverallCode)
	}
	return &out, nil
}
