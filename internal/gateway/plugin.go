package gateway

import (
	"encoding/json"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

// A Plugin is one configured plugin instance of a configuration
// generation. Access runs in the access phase, in descending priority
// order of the plugin names (equal priorities: names in descending order,
// as in Kong); a plugin that answers the request itself
// (x.Respond) stops the chain and the request is not proxied.
//
// Plugins must be safe for concurrent use: one instance serves every
// request of its generation.
//
// A Plugin that also implements io.Closer is closed when its generation is
// replaced or rejected.
type Plugin interface {
	Access(x *Exchange) error
}

// A PluginFactory builds plugin instances of one name from their raw JSON
// config.
type PluginFactory struct {
	// Name is the plugin name in configuration ("key-auth").
	Name string
	// Priority orders plugins as Kong's PRIORITY does: higher runs first.
	Priority int
	// New decodes and validates config strictly and returns the instance.
	// Config problems are returned as an error listing field errors
	// (field.Of finds them) with paths starting at "config".
	New func(config json.RawMessage, env *BuildEnv) (Plugin, error)
}

// BuildEnv is what a plugin factory may use besides its config: the plugin
// entity (scope), and the process-wide resources that outlive
// configuration generations.
type BuildEnv struct {
	Entity *kongconf.Plugin
	Config *kongconf.Config
	// Shared holds the gateway's long-lived resources (stores keyed by
	// namespace), so that counters survive reloads.
	Shared *Shared
	// Logger is the gateway's logger.
	Logger *slog.Logger
	// Repeats is the gateway's logger for warnings a plugin may meet on
	// every request: at most one line per interval and kind.
	Repeats *repeats.Logger
	// Metrics are the gateway's metrics.
	Metrics *Metrics
	// MaxBodySize is the gateway's request body limit in bytes.
	MaxBodySize int
	// Namespaces gives the rate-limiting-advanced instances of the
	// configuration being built one counter store per namespace, as Kong.
	Namespaces *policy.NamespaceSet
	// GroupOverrides are the legacy consumer-group overrides of
	// rate-limiting-advanced by group name and id; nil unless
	// Options.GroupPolicyOverrides.
	GroupOverrides map[string]*policy.OverrideConfig
}

// instance is a built plugin with its precedence rank.
type instance struct {
	entity   *kongconf.Plugin
	factory  *PluginFactory
	plugin   Plugin
	rank     int
	priority int
	// latency and outcomes cache the instance's metric children: the
	// first few outcomes in slots compared without hashing, the others in
	// the map.
	latency  prometheus.Observer
	first    [4]atomic.Pointer[outcomeCounter]
	outcomes sync.Map // string -> prometheus.Counter
	// limiter is set for the rate-limiting plugins; namespace is their
	// counters' namespace and denials caches their denial counters by
	// window.
	limiter   bool
	namespace string
	denials   sync.Map // time.Duration -> prometheus.Counter
}

// namespaced is a plugin whose counters live in a namespace.
type namespaced interface{ Namespace() string }

// denied returns the denial counter of the instance's window w (0 when
// the plugin has no windows).
func (in *instance) denied(m *Metrics, w time.Duration) prometheus.Counter {
	if c, ok := in.denials.Load(w); ok {
		return c.(prometheus.Counter)
	}
	window := ""
	if w > 0 {
		window = strconv.FormatInt(int64(w/time.Second), 10)
	}
	c := m.denials.WithLabelValues(in.entity.Name, in.namespace, window)
	in.denials.Store(w, c)
	return c
}

type outcomeCounter struct {
	outcome string
	c       prometheus.Counter
}

func (in *instance) decision(m *Metrics, outcome string) prometheus.Counter {
	for i := range in.first {
		oc := in.first[i].Load()
		if oc == nil {
			break
		}
		if oc.outcome == outcome {
			return oc.c
		}
	}
	if c, ok := in.outcomes.Load(outcome); ok {
		return c.(prometheus.Counter)
	}
	c := m.decisions.WithLabelValues(in.entity.Name, outcome)
	in.outcomes.Store(outcome, c)
	for i := range in.first {
		if in.first[i].CompareAndSwap(nil, &outcomeCounter{outcome, c}) || in.first[i].Load().outcome == outcome {
			break
		}
	}
	return c
}

// rank is Kong Enterprise's plugin precedence with consumer groups
// (docs/gateway.md, Plugins and precedence): 1 is the most specific. ok is false for combinations Kong does
// not accept.
func rank(p *kongconf.Plugin) (int, bool) {
	c, g, r, s := p.Consumer != nil, p.ConsumerGroup != nil, p.Route != nil, p.Service != nil
	switch {
	case c && g:
		return 0, false
	case c && r && s:
		return 1, true
	case g && r && s:
		return 2, true
	case c && r:
		return 3, true
	case c && s:
		return 4, true
	case g && r:
		return 5, true
	case g && s:
		return 6, true
	case r && s:
		return 7, true
	case c:
		return 8, true
	case g:
		return 9, true
	case r:
		return 10, true
	case s:
		return 11, true
	}
	return 12, true
}

// chain is, for one route, the candidate instances of each plugin name in
// priority order; each candidate list is sorted most specific first.
type chain struct {
	names [][]*instance
	// metrics are the route's latency and byte metrics.
	metrics *routeMetrics
	// filters, bodies and logs say whether some instance of names is a
	// ResponseFilter, a bodyFilter or a LogPlugin, so that a chain
	// without one skips those phases.
	filters, bodies, logs bool
	// codes caches the request counters of the first few status codes the
	// route answered with, so that counting a request neither hashes
	// labels nor boxes a sync.Map key.
	codes [4]atomic.Pointer[codeCounter]
}

type codeCounter struct {
	code int
	c    prometheus.Counter
}

// buildChain selects the instances that can apply to route r (those whose
// route and service scopes match) and orders them.
func buildChain(all []*instance, r *kongconf.Route) *chain {
	byName := map[string][]*instance{}
	var names []string
	for _, in := range all {
		p := in.entity
		if p.Route != nil && p.Route != r {
			continue
		}
		if p.Service != nil && (r == nil || p.Service != r.Service) {
			continue
		}
		if _, ok := byName[p.Name]; !ok {
			names = append(names, p.Name)
		}
		byName[p.Name] = append(byName[p.Name], in)
	}
	sort.SliceStable(names, func(i, j int) bool {
		pi, pj := byName[names[i]][0].priority, byName[names[j]][0].priority
		if pi != pj {
			return pi > pj
		}
		// Kong breaks ties by name, descending: rate-limiting-advanced
		// runs before rate-limiting (docs/kong-compatibility.md).
		return names[i] > names[j]
	})
	c := &chain{}
	for _, n := range names {
		list := byName[n]
		sort.SliceStable(list, func(i, j int) bool { return list[i].rank < list[j].rank })
		c.names = append(c.names, list)
		for _, in := range list {
			_, f := in.plugin.(ResponseFilter)
			_, b := in.plugin.(bodyFilter)
			_, l := in.plugin.(LogPlugin)
			c.filters, c.bodies, c.logs = c.filters || f, c.bodies || b, c.logs || l
		}
	}
	return c
}

// pick returns the most specific instance of one plugin name that applies
// to the consumer (nil when unauthenticated), or nil. Among the
// group-scoped instances of one rank, adjacent in list, the one of the
// group policy.SelectScopeGroup picks applies.
func pick(list []*instance, consumer *kongconf.Consumer) *instance {
	for i := 0; i < len(list); i++ {
		in := list[i]
		p := in.entity
		if p.ConsumerGroup != nil {
			j := i + 1
			for j < len(list) && list[j].rank == in.rank {
				j++
			}
			if g := pickGroup(list[i:j], consumer); g != nil {
				return g
			}
			i = j - 1
			continue
		}
		if p.Consumer != nil && p.Consumer != consumer {
			continue
		}
		return in
	}
	return nil
}

// pickGroup returns the instance, among group-scoped ones, of the
// consumer's group that policy.SelectScopeGroup picks, or nil.
func pickGroup(list []*instance, consumer *kongconf.Consumer) *instance {
	if consumer == nil {
		return nil
	}
	var buf [8]policy.Group
	groups := buf[:0]
	for _, in := range list {
		groups = append(groups, policy.Group{ID: in.entity.ConsumerGroup.ID, Name: in.entity.ConsumerGroup.Name})
	}
	g, ok := policy.SelectScopeGroup(groups, func(g policy.Group) bool {
		for _, in := range list {
			if cg := in.entity.ConsumerGroup; cg.ID == g.ID && cg.Name == g.Name {
				return inGroup(consumer, cg)
			}
		}
		return false
	})
	if !ok {
		return nil
	}
	for _, in := range list {
		if cg := in.entity.ConsumerGroup; cg.ID == g.ID && cg.Name == g.Name {
			return in
		}
	}
	return nil
}

func inGroup(c *kongconf.Consumer, g *kongconf.ConsumerGroup) bool {
	if c == nil {
		return false
	}
	for _, x := range c.Groups {
		if x == g {
			return true
		}
	}
	return false
}

// fieldErrors puts a plugin factory's field errors under the plugin's
// path; any other error becomes one error at "<where>.config".
func fieldErrors(where string, err error) []field.Error {
	fes, ok := field.Of(err)
	if !ok {
		return []field.Error{{Path: where + ".config", Message: err.Error()}}
	}
	out := make([]field.Error, len(fes))
	for i, fe := range fes {
		out[i] = fe.Under(where)
	}
	return out
}
