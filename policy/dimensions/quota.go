package dimensions

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/seed-008287da/sluice/internal/kongname"
	"github.com/seed-008287da/sluice/ratelimit"

	"github.com/seed-008287da/sluice/policy/field"
)

// A Quota is the set of limits an override puts in place of the
// rate-limiting plugin's own.
//
// The zero Quota (no limits) means "no override".
type Quota struct {
	// Limits are sorted by ascending Count, as Kong stores
	// rate-limiting-advanced limits; their order is the order of the
	// response headers.
	Limits []ratelimit.Limit
	// AlgorithmSet is true when the override named a window_type. When it
	// is false the override changes only counts and windows, and the
	// consumer keeps its own algorithm (see AppendLimits).
	AlgorithmSet bool
}

// AppendLimits appends q's limits to dst and returns the extended slice.
// Unless the override set its own window type, every appended limit gets
// algorithm alg, the consumer's configured one. With a reused dst it does
// not allocate.
func (q Quota) AppendLimits(dst []ratelimit.Limit, alg ratelimit.Algorithm) []ratelimit.Limit {
	for _, l := range q.Limits {
		if !q.AlgorithmSet {
			l.Algorithm = alg
		}
		dst = append(dst, l)
	}
	return dst
}

// A Table maps dimension values, and whole composite keys, to quotas. A
// Table is immutable once built and safe for concurrent use; a new set of
// overrides is a new Table swapped in through Overrides.
type Table struct {
	// composite is keyed by ratelimit.Key(values...), the composite key
	// without KeyPrefix.
	composite map[string]Quota
	byDim     map[string]map[string]Quota
	arities   []int // distinct lengths of composite overrides
	n         int
}

// Len returns the number of overrides in t. A nil Table is empty.
func (t *Table) Len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// Dimensions returns the sorted dimension names that t's per-value
// overrides refer to.
func (t *Table) Dimensions() []string {
	if t == nil {
		return nil
	}
	names := make([]string, 0, len(t.byDim))
	for n := range t.byDim {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Lookup returns the quota of requests whose dimension has value. It does
// not allocate.
func (t *Table) Lookup(dimension, value string) (Quota, bool) {
	if t == nil {
		return Quota{}, false
	}
	q, ok := t.byDim[dimension][value]
	return q, ok
}

// LookupValues returns the quota of the composite key made of values.
func (t *Table) LookupValues(values ...string) (Quota, bool) {
	if t == nil {
		return Quota{}, false
	}
	q, ok := t.composite[ratelimit.Key(values...)]
	return q, ok
}

func (d *decoder) table(path string, overrides []Override, paths []string) *Table {
	t := &Table{}
	for i, ov := range overrides {
		p := index(path, i)
		if paths != nil {
			p = paths[i]
		}
		n := len(d.errs)
		d.checkOverride(p, ov)
		if len(d.errs) > n {
			continue
		}
		if ov.Values != nil {
			k := ratelimit.Key(ov.Values...)
			if _, dup := t.composite[k]; dup {
				d.add(p, "duplicated override for values "+quoteList(ov.Values))
				continue
			}
			if t.composite == nil {
				t.composite = map[string]Quota{}
			}
			t.composite[k] = ov.Quota
			if !containsInt(t.arities, len(ov.Values)) {
				t.arities = append(t.arities, len(ov.Values))
			}
		} else {
			m := t.byDim[ov.Dimension]
			if _, dup := m[ov.Value]; dup {
				d.add(p, "duplicated override for dimension '"+ov.Dimension+"' value '"+ov.Value+"'")
				continue
			}
			if m == nil {
				if t.byDim == nil {
					t.byDim = map[string]map[string]Quota{}
				}
				m = map[string]Quota{}
				t.byDim[ov.Dimension] = m
			}
			m[ov.Value] = ov.Quota
		}
		t.n++
	}
	return t
}

func quoteList(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// checkOverride validates an override built in Go or decoded from JSON.
func (d *decoder) checkOverride(p string, ov Override) {
	switch {
	case ov.Values != nil && (ov.Dimension != "" || ov.Value != ""):
		d.add(p, "only one of 'values' or 'dimension' and 'value' may be set")
	case ov.Values != nil:
		if len(ov.Values) == 0 {
			d.add(join(p, "values"), "must not be empty")
		}
		for i, v := range ov.Values {
			if v == "" {
				d.add(index(join(p, "values"), i), "must not be empty")
			}
		}
	case ov.Dimension == "" && ov.Value == "":
		d.add(p, "one of 'values' or 'dimension' and 'value' is required")
	case ov.Dimension == "":
		d.add(join(p, "dimension"), "required field missing")
	case ov.Value == "":
		d.add(join(p, "value"), "required field missing")
	}
	if len(ov.Quota.Limits) == 0 {
		d.add(join(p, "limit"), "required field missing")
	}
	for i, l := range ov.Quota.Limits {
		if err := l.Validate(); err != nil {
			d.add(index(join(p, "limit"), i), err.Error())
		}
	}
}

// ParseOverrides decodes one or more overrides documents into one Table.
// A document is a JSON object {"overrides": [ ... ]} whose items are
// written as in a business plugin config; several documents (the values
// under an etcd prefix, say) are merged, and an override given twice is an
// error. With more than one document, field paths start with
// "documents[k]". The error, when not nil, is a *ConfigError.
func ParseOverrides(docs ...[]byte) (*Table, error) {
	d := &decoder{}
	var all []Override
	for k, data := range docs {
		root := ""
		if len(docs) > 1 {
			root = index("documents", k)
		}
		o := d.decodeObject(root, data)
		if o == nil {
			continue
		}
		path := join(root, "overrides")
		if a, ok := o.array("overrides"); ok {
			all = append(all, d.overrides(path, a)...)
		} else if !o.has("overrides") {
			d.add(path, "required field missing")
		}
		o.done()
	}
	if len(d.errs) > 0 {
		return nil, &ConfigError{Errors: d.errs}
	}
	t := d.table("overrides", all, d.ovPaths)
	if len(d.errs) > 0 {
		return nil, &ConfigError{Errors: d.errs}
	}
	return t, nil
}

// overrides decodes the items of an overrides array. Items with errors are
// reported and left out; the paths of the others are added to d.ovPaths.
func (d *decoder) overrides(path string, a []json.RawMessage) []Override {
	out := make([]Override, 0, len(a))
	for i, raw := range a {
		p := index(path, i)
		o := d.decodeObject(p, raw)
		if o == nil {
			continue
		}
		n := len(d.errs)
		var ov Override
		ov.Dimension, _ = o.str("dimension")
		ov.Value, _ = o.str("value")
		if vs, ok := o.strings("values"); ok {
			ov.Values = vs
		}
		ov.Quota = d.quota(o)
		o.done()
		if len(d.errs) == n {
			d.checkOverride(p, ov)
		}
		if len(d.errs) == n {
			out = append(out, ov)
			d.ovPaths = append(d.ovPaths, p)
		}
	}
	return out
}

// quota reads limit, window_size and window_type with Kong's messages and
// normalisation (pairs sorted by ascending limit).
func (d *decoder) quota(o *object) Quota {
	var q Quota
	alg := ratelimit.SlidingWindow
	if s, ok := o.str("window_type"); ok {
		switch s {
		case "sliding":
		case "fixed":
			alg = ratelimit.FixedWindow
		default:
			d.add(join(o.path, "window_type"), "expected one of: sliding, fixed")
		}
		q.AlgorithmSet = true
	}
	limits, lok := o.numbers("limit")
	windows, wok := o.numbers("window_size")
	if !o.has("limit") {
		d.add(join(o.path, "limit"), "required field missing")
	}
	if !o.has("window_size") {
		d.add(join(o.path, "window_size"), "required field missing")
	}
	if !lok || !wok {
		return q
	}
	if len(limits) != len(windows) {
		d.add(o.path, kongname.MismatchedWindows)
		return q
	}
	if len(limits) == 0 {
		d.add(join(o.path, "limit"), "required field missing")
		return q
	}
	bad := false
	for i := range limits {
		if limits[i] <= 0 || windows[i] <= 0 {
			if !bad {
				d.add(o.path, "window_size and limit values must be greater than 0")
			}
			bad = true
			continue
		}
		if limits[i] != math.Trunc(limits[i]) || limits[i] > 1<<53 {
			d.add(index(join(o.path, "limit"), i), field.Expected(index(join(o.path, "limit"), i), field.Integer, limits[i]))
			bad = true
		}
		ms := windows[i] * 1000
		if ms != math.Trunc(ms) || windows[i] > float64(100*365*24*3600) {
			d.add(index(join(o.path, "window_size"), i), "expected a whole number of milliseconds of at most 100 years")
			bad = true
		}
	}
	if bad {
		return q
	}
	q.Limits = make([]ratelimit.Limit, len(limits))
	for i := range limits {
		q.Limits[i] = ratelimit.Limit{
			Algorithm: alg,
			Count:     int64(limits[i]),
			Window:    time.Duration(windows[i]*1000) * time.Millisecond,
		}
	}
	sort.SliceStable(q.Limits, func(i, j int) bool { return q.Limits[i].Count < q.Limits[j].Count })
	return q
}

// Overrides holds the Table in force. The config centre's consumer builds
// a new Table, checks it, and stores it; requests load it without locking.
// The zero value holds no table and is ready to use; it is safe for
// concurrent use and must not be copied after first use.
type Overrides struct {
	p atomic.Pointer[Table]
}

// Load returns the current table, or nil when none was stored.
func (o *Overrides) Load() *Table { return o.p.Load() }

// Store makes t the current table. A nil t removes the table, so the
// config's inline overrides apply again.
func (o *Overrides) Store(t *Table) { o.p.Store(t) }

func containsInt(list []int, n int) bool {
	for _, x := range list {
		if x == n {
			return true
		}
	}
	return false
}
