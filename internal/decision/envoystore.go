package decision

import (
	"strings"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
)

// With key_layout envoy, counters live in envoyproxy/ratelimit's Redis
// layout (redisstore.Options.EnvoyLayout), so that sluice and
// envoyproxy/ratelimit nodes on one Redis continue each other's counters:
// the key is <prefix><domain>_<key>_<value>_..._<window start in Unix
// seconds>, a plain integer incremented with INCRBY and expired with
// EXPIRE after one window. As there, every call is counted, a denied one
// too.

// envoyKey is the key of d without its window start, in
// envoyproxy/ratelimit's layout: <prefix><domain>_<key>_<value>_...;
// a share_threshold entry counts under its pattern.
func envoyKey(prefix, domain string, d *rlpb.RateLimitDescriptor, n *node) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range d.GetEntries() {
		v := n.countedValue(i, e.GetKey(), e.GetValue())
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(v)
		b.WriteByte('_')
	}
	return b.String()
}
