package policy

// Plugin priorities, Kong's PRIORITY: higher runs first. The gateway and
// the Kong plugins both order sluice's plugins by them.
const (
	// PriorityDimensions runs sluice-dimensions before the rate limiters
	// it feeds.
	PriorityDimensions = 915
	// PriorityRateLimiting is Kong's rate-limiting and
	// rate-limiting-advanced priority, and sluice-rate-limiting's.
	PriorityRateLimiting = 910
	// PriorityConcurrency runs sluice-concurrency right after the rate
	// limiters: a request that is over its rate never takes a slot.
	PriorityConcurrency = 905
)
