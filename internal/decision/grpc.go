package decision

import (
	"context"
	"errors"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// DefaultStreamWorkers is how many goroutines NewGRPCServer keeps to serve
// calls (grpc.NumStreamWorkers): a call then runs on a goroutine whose stack
// has already grown instead of on a new one. A call that finds every worker
// busy gets a goroutine of its own, as without workers. See
// docs/benchmarks.md ("Decision service: cost per decision") for what it
// saves.
const DefaultStreamWorkers = 64

// NewGRPCServer returns a gRPC server serving s as
// envoy.service.ratelimit.v3.RateLimitService and the standard health
// service (grpc.health.v1.Health, reporting Healthy as SERVING or
// NOT_SERVING for "", for the rate limit service's full name and for
// "ratelimit", the name probes written for envoyproxy/ratelimit ask). opts
// are passed to grpc.NewServer after grpc.NumStreamWorkers(
// DefaultStreamWorkers), so grpc.NumStreamWorkers among them wins (0: a new
// goroutine per call, grpc-go's default).
//
// With Options.PeerStats, every unary call of another method (the health
// check's Check) is counted and timed as envoyproxy/ratelimit's gRPC
// interceptor does it, under ratelimit_server.<method>.
func NewGRPCServer(s *Service, opts ...grpc.ServerOption) *grpc.Server {
	if s.peer != nil {
		opts = append([]grpc.ServerOption{grpc.ChainUnaryInterceptor(s.peerInterceptor)}, opts...)
	}
	gs := grpc.NewServer(append([]grpc.ServerOption{grpc.NumStreamWorkers(DefaultStreamWorkers)}, opts...)...)
	rlspb.RegisterRateLimitServiceServer(gs, s)
	hs := health.NewServer()
	s.onHealth(func(ok bool) {
		st := healthpb.HealthCheckResponse_SERVING
		if !ok {
			st = healthpb.HealthCheckResponse_NOT_SERVING
		}
		for _, name := range []string{"", rlspb.RateLimitService_ServiceDesc.ServiceName, "ratelimit"} {
			hs.SetServingStatus(name, st)
		}
	})
	healthpb.RegisterHealthServer(gs, hs)
	return gs
}

// peerInterceptor counts and times the unary calls of every method but
// ShouldRateLimit (which Service.ShouldRateLimit counts itself, so that it
// is counted on any server), named by the method's last path element, as
// the peer's interceptor names them.
func (s *Service) peerInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if info.FullMethod == rlspb.RateLimitService_ShouldRateLimit_FullMethodName {
		return handler(ctx, req)
	}
	start := time.Now()
	m := s.peer.method(info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:])
	m.requests.Add(1)
	resp, err := handler(ctx, req)
	m.responseTime.add(time.Since(start))
	return resp, err
}

// grpcError maps a Decide error to a gRPC status: InvalidArgument for an
// undecidable request, Canceled or DeadlineExceeded when the caller gave
// up, Unavailable for a store failure.
func grpcError(err error) error {
	switch {
	case errors.Is(err, ErrNoConfig):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
