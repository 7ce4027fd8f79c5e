package decision

import (
	"context"
	"errors"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// NewGRPCServer returns a gRPC server serving s as
// envoy.service.ratelimit.v3.RateLimitService and the standard health
// service (grpc.health.v1.Health, reporting Healthy as SERVING or
// NOT_SERVING for "", for the rate limit service's full name and for
// "ratelimit", the name probes written for envoyproxy/ratelimit ask). opts
// are passed to grpc.NewServer.
func NewGRPCServer(s *Service, opts ...grpc.ServerOption) *grpc.Server {
	gs := grpc.NewServer(opts...)
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
