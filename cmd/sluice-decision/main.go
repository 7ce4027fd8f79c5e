// Command sluice-decision is sluice's decision service: Envoy's rate limit
// service (gRPC envoy.service.ratelimit.v3.RateLimitService) and the same
// decisions over HTTP/JSON, configured with envoyproxy/ratelimit's YAML.
//
//	sluice-decision -c config.yaml [-grpc 127.0.0.1:8081] [-http 127.0.0.1:8080]
//	sluice-decision                          envoyproxy/ratelimit's RUNTIME_ROOT layout
//	sluice-decision -c config.yaml -check    print every config error and exit
//
// envoyproxy/ratelimit's environment variables are read too; flags win
// (docs/decision-service.md). The configuration is watched and reloaded
// when it changes (also on SIGHUP); a configuration with errors is
// rejected and the old one stays in use, and one with errors at start
// leaves the service running without one. SIGINT and SIGTERM stop the
// service gracefully.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	code := run(ctx, os.Args, os.LookupEnv, hup, os.Stdout, os.Stderr)
	signal.Stop(hup)
	stop()
	os.Exit(code)
}
