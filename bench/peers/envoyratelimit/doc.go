// Package envoyratelimit holds nothing but this module's go.mod, which pins
// envoyproxy/ratelimit, the peer bench/run-decision.sh measures
// sluice-decision against, as a tool, with the dependency versions of the
// peer's own go.mod. It is a module of its own because those versions
// clash with sluice's (the peer does not build with the gRPC and
// OpenTelemetry versions sluice needs), and the peer is measured as its
// users build it. Inside this directory:
//
//	go build -o envoy-ratelimit github.com/envoyproxy/ratelimit/src/service_cmd
package envoyratelimit
