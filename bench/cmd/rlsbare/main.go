// Command rlsbare is a bare grpc-go server answering Envoy's rate limit
// service API with a constant OK (bench.ConstantRLS: one status per
// descriptor, no work), and the standard health service: the floor that
// bench/run-decision.sh measures the decision services against.
//
// Usage:
//
//	rlsbare -grpc 127.0.0.1:8081 [-stream-workers 64]
//
// It prints "grpc listening on ADDR" once it accepts connections, and
// stops on SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/seed-008287da/sluice/bench"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func main() {
	addr := flag.String("grpc", "127.0.0.1:8081", "listen address")
	// The default is sluice-decision's (decision.DefaultStreamWorkers, its
	// -grpc-stream-workers), so that the floor is served as sluice is.
	workers := flag.Uint("stream-workers", 64, "serve calls on this many long-lived goroutines (grpc.NumStreamWorkers); 0: a new goroutine per call")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rlsbare:", err)
		os.Exit(1)
	}
	gs := grpc.NewServer(grpc.NumStreamWorkers(uint32(*workers)))
	rlspb.RegisterRateLimitServiceServer(gs, bench.NewConstantRLS())
	healthpb.RegisterHealthServer(gs, health.NewServer())
	fmt.Println("grpc listening on", ln.Addr())
	go func() {
		<-ctx.Done()
		gs.Stop()
	}()
	if err := gs.Serve(ln); err != nil {
		fmt.Fprintln(os.Stderr, "rlsbare:", err)
		os.Exit(1)
	}
}
