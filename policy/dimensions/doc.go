// Package dimensions is the business layer of sluice: it builds a composite
// rate-limit key from request dimensions (headers, query arguments, path
// segments and regex captures, method, client IP, consumer, route, service,
// and claims of a verified JWT) and finds the quota override of that key.
//
// The package works on plain data. An adapter (the gateway, the Kong
// plugin) compiles a Config into a Builder, asks it which request
// attributes it Needs, fills an Input with those only, and calls Resolve.
// The Result's Key goes to the rate-limiting plugin as an identifier
// extension; its Quota, when an override applies, replaces the plugin's
// limits for that request. When a dimension configured to skip is missing,
// Result.OK is false and the plugin falls back to its own identifier.
//
// Keys are ratelimit.Key of the dimension values in config order, so
// distinct value lists never collide. Quota overrides live in a Table,
// looked up without allocating; the config centre delivers new tables and
// the consumer swaps them in through Overrides, without a restart.
package dimensions
