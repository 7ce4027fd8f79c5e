// Package decision is sluice's decision service for other gateways: Envoy's
// rate limit service API (envoy.service.ratelimit.v3.RateLimitService,
// ShouldRateLimit) over gRPC, and the same decisions as JSON over HTTP, so
// Envoy, Envoy Gateway, Istio, Contour or any gateway without gRPC can ask
// sluice instead of envoyproxy/ratelimit.
//
// Configuration is envoyproxy/ratelimit's YAML (domains of nested
// descriptors with rate_limit, unlimited, shadow_mode, name and replaces),
// decoded strictly with every error reported at once, plus sluice's
// extensions: the store (memory or Redis), the algorithm (fixed by
// default, as envoyproxy/ratelimit counts; sliding or token_bucket per
// file or per limit) and several limits per descriptor. See Parse and
// docs/decision-service.md.
//
// A Service holds one compiled configuration at a time and swaps in a new
// one atomically on Reload; counters live in the ratelimit.Store, outside
// configurations, so they survive every reload. Each request descriptor is
// counted under ratelimit.Key("rls", domain, key1, value1, ...): distinct
// descriptors never share a counter, unlike envoyproxy/ratelimit's "_"
// joined keys.
//
// Time is passed in: Decide takes the decision time, and Options.Now is the
// clock of the gRPC and HTTP faces.
package decision
