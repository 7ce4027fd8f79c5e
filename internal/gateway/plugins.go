package gateway

import "github.com/seed-008287da/sluice/policy"

// Kong plugin priorities (PRIORITY in each handler) for the plugins sluice
// implements. Higher runs first.
const (
	PriorityJWT                = 1450
	PriorityKeyAuth            = 1250
	PriorityBasicAuth          = 1100
	PriorityACL                = 950
	PriorityDimensions         = policy.PriorityDimensions
	PriorityRateLimitingAdv    = policy.PriorityRateLimiting
	PriorityRateLimiting       = policy.PriorityRateLimiting
	PriorityConcurrency        = policy.PriorityConcurrency
	PriorityRequestTermination = 2
)

// DefaultPlugins returns every plugin sluice ships.
func DefaultPlugins() []PluginFactory {
	return []PluginFactory{
		{Name: "jwt", Priority: PriorityJWT, New: newJWT},
		{Name: "key-auth", Priority: PriorityKeyAuth, New: newKeyAuth},
		{Name: "basic-auth", Priority: PriorityBasicAuth, New: newBasicAuth},
		{Name: "acl", Priority: PriorityACL, New: newACL},
		{Name: "sluice-dimensions", Priority: PriorityDimensions, New: newSluiceDimensions},
		{Name: "rate-limiting-advanced", Priority: PriorityRateLimitingAdv, New: newRateLimitingAdvanced},
		{Name: "rate-limiting", Priority: PriorityRateLimiting, New: newRateLimitingBasic},
		{Name: "sluice-concurrency", Priority: PriorityConcurrency, New: newConcurrency},
		{Name: "request-termination", Priority: PriorityRequestTermination, New: newRequestTermination},
		{Name: "ip-restriction", Priority: PriorityIPRestriction, New: newIPRestriction},
		{Name: "cors", Priority: PriorityCORS, New: newCORS},
		{Name: "correlation-id", Priority: PriorityCorrelationID, New: newCorrelationID},
		{Name: "request-size-limiting", Priority: PriorityRequestSizeLimiting, New: newRequestSizeLimiting},
		{Name: "request-transformer", Priority: PriorityRequestTransformer, New: newRequestTransformer},
		{Name: "response-transformer", Priority: PriorityResponseTransformer, New: newResponseTransformer},
		{Name: "prometheus", Priority: PriorityPrometheus, New: newPrometheus},
		{Name: "bot-detection", Priority: PriorityBotDetection, New: newBotDetection},
	}
}
