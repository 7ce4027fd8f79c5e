package decision

import (
	"strings"

	"github.com/seed-008287da/sluice/ratelimit"
)

// A rule is a compiled RateLimit: what a matched request descriptor is
// checked against.
type rule struct {
	name      string
	replaces  []string
	unlimited bool
	shadow    bool
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
// "foo*bar*baz" match what they read as.
type wildcard struct {
	key  string
	glob []string // the pattern split at each "*"
	next *node
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
}

func compileTree(descs []Descriptor) *node {
	n := &node{values: map[entryKey]*node{}, defaults: map[string]*node{}}
	for i := range descs {
		d := &descs[i]
		child := compileTree(d.Descriptors)
		if d.RateLimit != nil {
			child.rule = compileRule(d.RateLimit, d.ShadowMode)
		}
		switch {
		case d.Value == "":
			n.defaults[d.Key] = child
		case strings.Contains(d.Value, "*"):
			n.wildcards = append(n.wildcards, wildcard{key: d.Key, glob: strings.Split(d.Value, "*"), next: child})
		default:
			n.values[entryKey{d.Key, d.Value}] = child
		}
	}
	return n
}

// lookup finds the rule of a request descriptor given as its entries'
// keys and values, or nil. An entry is matched by key and value first,
// then by a wildcard value (in file order), then by key alone. The rule
// applies only when the request descriptor ends where it is configured: a
// longer or shorter request descriptor matches nothing, as in
// envoyproxy/ratelimit.
func (n *node) lookup(entries int, entry func(int) (string, string)) *rule {
	cur := n
	for i := 0; i < entries; i++ {
		k, v := entry(i)
		next := cur.values[entryKey{k, v}]
		if next == nil {
			for i := range cur.wildcards {
				if w := &cur.wildcards[i]; w.key == k && w.match(v) {
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
			return next.rule
		}
		cur = next
	}
	return nil
}
