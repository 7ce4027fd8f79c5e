// Command sluice-decision is sluice's decision service: Envoy's rate limit
// service (gRPC envoy.service.ratelimit.v3.RateLimitService) and the same
// decisions over HTTP/JSON, configured with envoyproxy/ratelimit's YAML.
//
//	sluice-decision -c config.yaml [-grpc :8081] [-http :8080]
//	sluice-decision -c config.yaml -check    print every config error and exit
//
// The configuration file is watched and reloaded when it changes (also on
// SIGHUP); a file with errors is rejected and the old one stays in use.
// SIGINT and SIGTERM stop the service gracefully.
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
	code := run(ctx, os.Args, hup, os.Stdout, os.Stderr)
	signal.Stop(hup)
	stop()
	os.Exit(code)
}
