package policy

import (
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

// A Request describes one proxied request, as the adapter (gateway, Kong
// plugin, decision service) knows it. Empty strings mean "unknown" and make
// the identifiers that need them fall back to ClientIP.
//
// The engine never keeps a Request after Check returns and never modifies
// it.
type Request struct {
	// ClientIP is Kong's forwarded IP: the TCP peer, or the address taken
	// from the real-IP header when the peer is a trusted proxy.
	ClientIP string
	// Consumer is the authenticated consumer; the zero value means none.
	Consumer Consumer
	// CredentialID is the id of the authenticated credential.
	CredentialID string
	// ServiceID and RouteID are the ids of the matched service and route.
	ServiceID string
	RouteID   string
	// Path is the normalised request path without the query string.
	Path string
	// Method is the HTTP method.
	Method string
	// Header returns the first value of a request header (case-insensitive
	// name), or "" when absent. Nil means the request has no headers.
	Header func(name string) string
	// Groups are the consumer groups the consumer belongs to (Kong
	// Enterprise). Used by the consumer-group identifier and by legacy
	// overrides.
	Groups []Group
	// ScopeGroup is the consumer group the plugin instance is scoped to
	// (Kong 3.4+ group-scoped plugins); the zero value means the instance is
	// not group scoped.
	ScopeGroup Group
	// Dimension is the composite key computed by a business layer (the
	// dimension identifier, a sluice extension).
	Dimension string
	// Quota, when it has limits, replaces the limits and windows of a
	// rate-limiting-advanced plugin for this request: the quota override a
	// business layer (package policy/dimensions) found for the request's
	// dimensions. The zero value means none. The rate-limiting (OSS)
	// plugin ignores it.
	Quota Quota
	// Now is the time of the request. Zero means time.Now().
	Now time.Time
}

// A Quota is a per-request override of a rate-limiting-advanced plugin's
// limit and window_size, applied like a legacy consumer-group override:
// the counts and windows are the quota's, counted in the
// plugin's namespace under the request's usual key, with the plugin's
// strategy, penalty, jitter, error code, message and header settings; the
// response headers name the quota's windows. A legacy consumer-group
// override that applies to the consumer takes precedence over it.
//
// In a valid Quota every limit is a positive Count per a Window of a
// whole number of seconds (Kong's window_size); the headers list them in
// order (Kong sorts limits ascending). Burst is ignored.
type Quota struct {
	// Limits are the quota's limits; empty means no override.
	Limits []ratelimit.Limit
	// WindowTypeSet reports that the quota names its window type: the
	// limits' Algorithm, SlidingWindow or FixedWindow and the same for
	// every limit, replaces the plugin's window_type. Otherwise the
	// plugin's window_type applies and Algorithm is ignored.
	WindowTypeSet bool
}

// Consumer is an authenticated Kong consumer.
type Consumer struct {
	ID       string
	Username string
	CustomID string
}

// Group is a consumer group, by id and name; either may be empty when the
// adapter only knows the other.
type Group struct {
	ID   string
	Name string
}

// matches reports whether g is the group named or identified by ref.
func (g Group) matches(ref string) bool { return ref != "" && (g.ID == ref || g.Name == ref) }

// same reports whether g and o are the same group.
func (g Group) same(o Group) bool {
	return (g.ID != "" && g.ID == o.ID) || (g.Name != "" && g.Name == o.Name)
}

func (r *Request) header(name string) string {
	if r.Header == nil {
		return ""
	}
	return r.Header(name)
}

// identify returns the value of one identifier for r, or "" when r lacks
// it.
func (r *Request) identify(id Identifier, counterKey string, headerName, path string) string {
	switch id {
	case ByIP:
		return r.ClientIP
	case ByCredential:
		return r.CredentialID
	case ByConsumer:
		var v string
		switch counterKey {
		case CounterKeyUsername:
			v = r.Consumer.Username
		case CounterKeyCustomID:
			v = r.Consumer.CustomID
		default:
			v = r.Consumer.ID
		}
		if v == "" && r.Consumer.ID == "" {
			// No consumer: Kong counts by the credential.
			v = r.CredentialID
		}
		return v
	case ByService:
		return r.ServiceID
	case ByRoute:
		return r.RouteID
	case ByHeader:
		if headerName == "" {
			return ""
		}
		return r.header(headerName)
	case ByPath:
		if path != "" && r.Path == path {
			return path
		}
		return ""
	case ByConsumerGroup:
		// Only for a group-scoped instance, and only when the consumer is in
		// that group; all its consumers then share one counter.
		if r.ScopeGroup == (Group{}) || r.Consumer.ID == "" {
			return ""
		}
		for _, g := range r.Groups {
			if g.same(r.ScopeGroup) {
				if r.ScopeGroup.ID != "" {
					return r.ScopeGroup.ID
				}
				return r.ScopeGroup.Name
			}
		}
		return ""
	case ByDimension:
		return r.Dimension
	}
	return ""
}

// keySpec is a compiled identifier rule.
type keySpec struct {
	id         Identifier
	compound   []Identifier
	counterKey string
	headerName string
	path       string
}

// maxKeyLen caps counter keys, as Kong 3.11+ does; longer keys are
// replaced by their SHA-256.
const maxKeyLen = 256

// key computes the counter key of r: the compound identifier
// when every item has a value (joined with ':'), else the identifier, else
// the client IP.
func (k *keySpec) key(r *Request) string {
	if k.id == ByIP && len(k.compound) == 0 && len(r.ClientIP) <= maxKeyLen {
		return r.ClientIP // the default identifier, without the general walk
	}
	v := ""
	if len(k.compound) > 0 {
		v = k.compoundKey(r)
	}
	if v == "" {
		v = r.identify(k.id, k.counterKey, k.headerName, k.path)
	}
	if v == "" {
		v = r.ClientIP
	}
	if len(v) > maxKeyLen {
		sum := sha256.Sum256([]byte(v))
		v = hex.EncodeToString(sum[:])
	}
	return v
}

func (k *keySpec) compoundKey(r *Request) string {
	var parts [8]string
	vals := parts[:0]
	n := 0
	for _, id := range k.compound {
		v := r.identify(id, k.counterKey, k.headerName, k.path)
		if v == "" {
			return ""
		}
		vals = append(vals, v)
		n += len(v) + 1
	}
	b := make([]byte, 0, n)
	for i, v := range vals {
		if i > 0 {
			b = append(b, ':')
		}
		b = append(b, v...)
	}
	return string(b)
}
