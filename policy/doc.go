// Package policy is sluice's engine for Kong's rate-limiting-advanced and
// rate-limiting plugins, on plain data.
//
// The life of a policy has three steps:
//
//  1. Parse: ParseAdvanced and ParseBasic read a plugin's config object as
//     JSON with Kong's field names, strictly (an unknown field is an error
//     that names it), apply Kong's defaults and normalisation and validate
//     the result. Every problem is reported at once, with Kong's message and
//     the field's path, in a *ValidationError.
//  2. Compile: NewAdvanced and NewBasic turn a config into a limiter bound
//     to a Registry. The Registry (one per process) owns the counter stores
//     and Redis clients, keyed by namespace and store settings, so a new
//     compiled instance of the same namespace keeps its counters: a config
//     reload changes numbers, not counters.
//  3. Check: each request is described by a Request that the adapter
//     (sluice gateway, Kong plugin, decision service) fills, and answered
//     with a Result holding the verdict, the status and body of a
//     rejection and the response headers in order. Adapters write the Result
//     as it is; they never re-decide.
//
// Behaviour follows the Kong behaviour specification in
// docs/kong-compatibility.md, including its recommended deviations from
// Kong quirks, which that document lists. Being over a limit is a Result,
// never an error; errors mean a store failed or the context ended.
package policy
