package decision

import (
	"strings"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed-008287da/sluice/ratelimit"
)

// A rule is a compiled RateLimit: what a matched request descriptor is
// checked against.
type rule struct {
	name      string
	replaces  []string
	unlimited bool
	shadow    bool
	quota     bool
	metadata  *structpb.Struct
	specs     []LimitSpec
	// limits are the specs with RequestsPerUnit > 0, as passed to the store;
	// index[i] is the spec of limits[i].
	limits []ratelimit.Limit
	index  []int
	// denyAll is set when some spec allows zero requests: every request is
	// over that limit and nothing is counted.
	denyAll int
}

func compileRule(rl *RateLimit, shadow bool) *rule {
	r := &rule{name: rl.Name, replaces: rl.Replaces, unlimited: rl.Unlimited, shadow: shadow, specs: rl.Limits, denyAll: -1}
	for i, s := range rl.Limits {
		if s.RequestsPerUnit == 0 {
			if r.denyAll < 0 {
				r.denyAll = i
			}
			continue
		}
		r.limits = append(r.limits, s.Limit())
		r.index = append(r.index, i)
	}
	return r
}

type entryKey struct{ key, value string }

// A wildcard value matches values by a pattern in which each "*" stands for
// any run of characters, possibly empty: "foo*" is a prefix, "bar*b" and
// "foo*bar*baz" match what they read as. A configured key with a "*" in it
// makes a joined wildcard: as in envoyproxy/ratelimit, the pattern is the
// configured key_value (or the key alone) and it is matched against the
// request entry's key and value joined with "_" ("hdr*" matches the entry
// (hdrX, v), read as "hdrX_v").
type wildcard struct {
	key    string
	glob   []string // the pattern split at each "*"
	joined bool     // glob is matched against key + "_" + value
	next   *node
}

// match reports whether v matches the pattern.
func (w *wildcard) match(v string) bool {
	first, last := w.glob[0], w.glob[len(w.glob)-1]
	if len(v) < len(first)+len(last) || !strings.HasPrefix(v, first) || !strings.HasSuffix(v, last) {
		return false
	}
	v = v[len(first) : len(v)-len(last)]
	for _, part := range w.glob[1 : len(w.glob)-1] {
		i := strings.Index(v, part)
		if i < 0 {
			return false
		}
		v = v[i+len(part):]
	}
	return true
}

// A node is one level of a domain's descriptor tree. Keys and values are
// compared as whole strings: envoyproxy/ratelimit looks up key+"_"+value,
// so there the entry (a_b, c) matches a descriptor configured as (a, b_c).
type node struct {
	values    map[entryKey]*node
	wildcards []wildcard
	defaults  map[string]*node
	rule      *rule

	// path is the configured descriptor of each level from the domain's
	// top down to this node, one per request entry.
	path []level
	// statKey names the statistics of this node's rule by the configured
	// path (domain.key_value.key), as envoyproxy/ratelimit does;
	// dynamicStats says the name depends on the request's values instead
	// (detailed_metric, value_to_metric).
	statKey      string
	dynamicStats bool
	detailed     bool
	// shared says some level's value is a share_threshold wildcard: that
	// entry counts under the pattern, not the request's value.
	shared bool
}

// A level is one configured descriptor on the path to a node.
type level struct {
	key, value    string // value is "" for a default, the pattern for a wildcard
	wildcard      bool
	valueToMetric bool
	share         bool
	// joined is the key_value pattern of a joined (key) wildcard, "" for
	// others.
	joined string
}

// patternValue is the value a wildcard level stands for in the counter
// key and statistics of an entry with key k, as envoyproxy/ratelimit
// writes it: the value's pattern, or the key_value pattern less "k_".
func (l *level) patternValue(k string) string {
	if l.joined == "" {
		return l.value
	}
	return strings.TrimPrefix(l.joined, k+"_")
}

func compileTree(domain string, descs []Descriptor) *node {
	return compileLevel(domain, descs, nil)
}

func compileLevel(domain string, descs []Descriptor, parent []level) *node {
	n := &node{values: map[entryKey]*node{}, defaults: map[string]*node{}}
	for i := range descs {
		d := &descs[i]
		keyWild := strings.Contains(d.Key, "*")
		joined := d.Key
		if d.Value != "" {
			joined += "_" + d.Value
		}
		lv := level{key: d.Key, value: d.Value, wildcard: keyWild || strings.Contains(d.Value, "*"), valueToMetric: d.ValueToMetric,
			share: d.ShareThreshold}
		if keyWild {
			lv.joined = joined
		}
		path := append(append([]level(nil), parent...), lv)
		child := compileLevel(domain, d.Descriptors, path)
		child.path = path
		child.detailed = d.DetailedMetric
		var sk strings.Builder
		sk.WriteString(domain)
		for _, l := range path {
			sk.WriteByte('.')
			sk.WriteString(l.key)
			if l.value != "" {
				sk.WriteByte('_')
				sk.WriteString(l.value)
			}
			child.shared = child.shared || l.share
			child.dynamicStats = child.dynamicStats || l.valueToMetric
		}
		child.statKey = sanitizeStatName(sk.String())
		child.dynamicStats = child.dynamicStats || d.DetailedMetric
		if d.RateLimit != nil {
			child.rule = compileRule(d.RateLimit, d.ShadowMode)
			child.rule.quota = d.QuotaMode
			child.rule.metadata = d.Metadata
		}
		switch {
		case keyWild:
			n.wildcards = append(n.wildcards, wildcard{glob: strings.Split(joined, "*"), joined: true, next: child})
		case d.Value == "":
			n.defaults[d.Key] = child
		case lv.wildcard:
			n.wildcards = append(n.wildcards, wildcard{key: d.Key, glob: strings.Split(d.Value, "*"), next: child})
		default:
			n.values[entryKey{d.Key, d.Value}] = child
		}
	}
	return n
}

// countedValue is the value the i-th entry (k, v) of a request
// descriptor matched at n counts under: v, or the pattern of a
// share_threshold wildcard. n may be nil (a limit override).
func (n *node) countedValue(i int, k, v string) string {
	if n != nil && n.shared && i < len(n.path) && n.path[i].share {
		return n.path[i].patternValue(k)
	}
	return v
}

// statName names the statistics of a request descriptor matched at n, as
// envoyproxy/ratelimit names them: the configured path, or with
// detailed_metric every entry's key_value from the request, or with
// value_to_metric the request's value where the configuration has none
// or a wildcard. A share_threshold entry is named by its pattern. Names
// are sanitized (sanitizeStatName).
func (n *node) statName(domain string, entries int, entry func(int) (string, string)) string {
	if !n.dynamicStats {
		return n.statKey
	}
	var b strings.Builder
	b.WriteString(domain)
	for i := 0; i < entries && i < len(n.path); i++ {
		k, v := entry(i)
		l := n.path[i]
		b.WriteByte('.')
		b.WriteString(k)
		use := ""
		switch {
		case l.share:
			use = l.patternValue(k)
		case n.detailed:
			use = v
		case l.wildcard && l.valueToMetric:
			use = v
		case l.wildcard:
			use = l.patternValue(k)
		case l.value != "":
			use = l.value
		case l.valueToMetric:
			use = v
		}
		if use != "" {
			b.WriteByte('_')
			b.WriteString(use)
		}
	}
	return sanitizeStatName(b.String())
}

// lookup finds the node of a request descriptor given as its entries'
// keys and values, or nil. An entry is matched by key and value first,
// then by a wildcard (in file order), then by key alone. The node's
// rule applies only when the request descriptor ends where it is
// configured: a longer or shorter request descriptor matches nothing, as
// in envoyproxy/ratelimit.
func (n *node) lookup(entries int, entry func(int) (string, string)) *node {
	cur := n
	for i := 0; i < entries; i++ {
		k, v := entry(i)
		next := cur.values[entryKey{k, v}]
		if next == nil {
			joined := ""
			for i := range cur.wildcards {
				w := &cur.wildcards[i]
				if w.joined {
					if joined == "" {
						joined = k + "_" + v
					}
					if w.match(joined) {
						next = w.next
						break
					}
				} else if w.key == k && w.match(v) {
					next = w.next
					break
				}
			}
		}
		if next == nil {
			next = cur.defaults[k]
		}
		if next == nil {
			return nil
		}
		if i == entries-1 {
			if next.rule == nil {
				return nil
			}
			return next
		}
		cur = next
	}
	return nil
}
