package gateway

// Kong plugin priorities (PRIORITY in each handler) for the plugins sluice
// implements. Higher runs first.
const (
	PriorityKeyAuth            = 1250
	PriorityDimensions         = 915 // before the rate limiters it feeds
	PriorityRateLimitingAdv    = 910
	PriorityRateLimiting       = 910
	PriorityConcurrency        = 905
	PriorityRequestTermination = 2
)

// DefaultPlugins returns every plugin sluice ships.
func DefaultPlugins() []PluginFactory {
	return []PluginFactory{
		{Name: "key-auth", Priority: PriorityKeyAuth, New: newKeyAuth},
		{Name: "sluice-dimensions", Priority: PriorityDimensions, New: newSluiceDimensions},
		{Name: "rate-limiting-advanced", Priority: PriorityRateLimitingAdv, New: newRateLimitingAdvanced},
		{Name: "rate-limiting", Priority: PriorityRateLimiting, New: newRateLimitingBasic},
		{Name: "sluice-concurrency", Priority: PriorityConcurrency, New: newConcurrency},
		{Name: "request-termination", Priority: PriorityRequestTermination, New: newRequestTermination},
	}
}
