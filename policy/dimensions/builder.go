package dimensions

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
)

// Options tune Compile. The zero value is ready to use.
type Options struct {
	// Overrides is the holder of the quota table delivered by the config
	// centre; it may be shared by the Builders of successive config
	// generations so a reload keeps the live table. While it holds no
	// table, the config's inline overrides apply. Nil means none.
	Overrides *Overrides
	// Now is the clock used to check a token's exp and nbf when
	// Input.Now is zero. Nil means time.Now.
	Now func() time.Time
}

// A Builder turns a request's attributes into a composite key and finds
// its quota override. It is compiled once per config and is safe for
// concurrent use.
type Builder struct {
	dims      []dim
	prefix    string
	prefixLen int // length of the encoded prefix part in every key
	jwt       *verifier
	inline    *Table
	live      *Overrides
	now       func() time.Time
	needs     Needs
}

type dim struct {
	name        string
	typ         Type
	arg         string // header name (lower case) or query argument
	index       int
	re          *regexp.Regexp
	group       int
	field       string
	claim       []string
	skip        bool
	placeholder string
}

// Compile checks cfg and builds its Builder. The error, when not nil, is a
// *ConfigError naming every problem.
func Compile(cfg *Config, opts Options) (*Builder, error) {
	d := &decoder{}
	b := compile(cfg, d)
	if len(d.errs) > 0 {
		return nil, &ConfigError{Errors: d.errs}
	}
	b.live = opts.Overrides
	b.now = opts.Now
	if b.now == nil {
		b.now = time.Now
	}
	return b, nil
}

// New parses and compiles a JSON business plugin config.
func New(data []byte, opts Options) (*Builder, error) {
	cfg, err := Parse(data)
	if err != nil {
		return nil, err
	}
	return Compile(cfg, opts)
}

func compile(cfg *Config, d *decoder) *Builder {
	b := &Builder{}
	if cfg == nil {
		d.add("", "no config")
		return b
	}
	switch {
	case len(cfg.Dimensions) == 0:
		d.add("dimensions", "at least one dimension is required")
	case len(cfg.Dimensions) > MaxDimensions:
		d.add("dimensions", "at most "+strconv.Itoa(MaxDimensions)+" dimensions are allowed")
	}
	defSkip := cfg.OnMissing != MissingPlaceholder
	if cfg.OnMissing > MissingPlaceholder {
		d.add("on_missing", "expected one of: skip, placeholder")
	}
	defPlaceholder := cfg.Placeholder
	if defPlaceholder == "" {
		defPlaceholder = DefaultPlaceholder
	}
	if cfg.KeyPrefix != "" {
		b.prefix = cfg.KeyPrefix
		b.prefixLen = len(ratelimit.Key(cfg.KeyPrefix))
	}
	usesJWT := false
	names := map[string]int{}
	for i, cd := range cfg.Dimensions {
		p := index("dimensions", i)
		dm := dim{name: DimensionName(cd), typ: cd.Type, skip: defSkip, placeholder: defPlaceholder}
		if j, dup := names[dm.name]; dup {
			d.add(join(p, "name"), "duplicated dimension name '"+dm.name+"' (also dimensions["+strconv.Itoa(j)+"])")
		}
		names[dm.name] = i
		switch cd.OnMissing {
		case MissingDefault:
		case MissingSkip:
			dm.skip = true
		case MissingPlaceholder:
			dm.skip = false
		default:
			d.add(join(p, "on_missing"), "expected one of: skip, placeholder")
		}
		if cd.Placeholder != "" {
			dm.placeholder = cd.Placeholder
		}
		allowed := map[string]bool{}
		switch cd.Type {
		case Header:
			allowed["header"] = true
			if cd.Header == "" {
				d.add(join(p, "header"), "required field missing")
			} else if !validHeaderName(cd.Header) {
				d.add(join(p, "header"), "invalid header name '"+cd.Header+"'")
			}
			dm.arg = strings.ToLower(cd.Header)
			b.needs.addHeader(dm.arg)
		case Query:
			allowed["query"] = true
			if cd.Query == "" {
				d.add(join(p, "query"), "required field missing")
			}
			dm.arg = cd.Query
			b.needs.addQuery(dm.arg)
		case PathSegment:
			allowed["index"] = true
			dm.index = cd.Index
			b.needs.Path = true
		case PathRegex:
			allowed["pattern"], allowed["group"] = true, true
			pat := strings.TrimPrefix(cd.Pattern, "~")
			if cd.Pattern == "" {
				d.add(join(p, "pattern"), "required field missing")
				break
			}
			re, err := regexp.Compile(pat)
			if err != nil {
				d.add(join(p, "pattern"), "invalid regex: "+err.Error())
				break
			}
			dm.re = re
			dm.group = 1
			if cd.Group != "" {
				if n, err := strconv.Atoi(cd.Group); err == nil {
					dm.group = n
				} else {
					dm.group = re.SubexpIndex(cd.Group)
				}
			}
			if dm.group < 1 || dm.group > re.NumSubexp() {
				g := cd.Group
				if g == "" {
					g = "1"
				}
				d.add(join(p, "group"), "pattern has no capture group '"+g+"'")
			}
			b.needs.Path = true
		case Method:
			b.needs.Method = true
		case IP:
			b.needs.ClientIP = true
		case Consumer:
			allowed["field"] = true
			dm.field = fieldOr(cd.Field)
			if dm.field != "id" && dm.field != "username" && dm.field != "custom_id" {
				d.add(join(p, "field"), "expected one of: id, username, custom_id")
			}
			b.needs.Consumer = true
		case Route, Service:
			allowed["field"] = true
			dm.field = fieldOr(cd.Field)
			if dm.field != "id" && dm.field != "name" {
				d.add(join(p, "field"), "expected one of: id, name")
			}
			if cd.Type == Route {
				b.needs.Route = true
			} else {
				b.needs.Service = true
			}
		case JWTClaim:
			allowed["claim"] = true
			usesJWT = true
			if cd.Claim == "" {
				d.add(join(p, "claim"), "required field missing")
			}
			dm.claim = strings.Split(cd.Claim, ".")
		case "":
			d.add(join(p, "type"), "required field missing")
		default:
			d.add(join(p, "type"), "expected one of: header, query, path_segment, path_regex, method, ip, consumer, route, service, jwt_claim")
		}
		if cd.Type != "" {
			for _, f := range []struct {
				name string
				set  bool
			}{
				{"header", cd.Header != ""}, {"query", cd.Query != ""}, {"index", cd.Index != 0},
				{"pattern", cd.Pattern != ""}, {"group", cd.Group != ""}, {"field", cd.Field != ""},
				{"claim", cd.Claim != ""},
			} {
				if f.set && !allowed[f.name] {
					d.add(join(p, f.name), "not used by type '"+string(cd.Type)+"'")
				}
			}
		}
		b.dims = append(b.dims, dm)
	}
	switch {
	case cfg.JWT != nil:
		b.jwt = d.verifier("jwt", cfg.JWT)
		if !usesJWT {
			d.add("jwt", "set but no dimension is of type jwt_claim")
		}
		if b.jwt.header != "" {
			b.needs.addHeader(b.jwt.header)
		} else {
			b.needs.addQuery(b.jwt.query)
		}
	case usesJWT:
		d.add("jwt", "required when a dimension is of type jwt_claim")
	}
	var paths []string
	if len(d.ovPaths) == len(cfg.Overrides) {
		paths = d.ovPaths
	}
	b.inline = d.table("overrides", cfg.Overrides, paths)
	if len(d.errs) == 0 {
		if err := b.check(b.inline, "overrides"); err != nil {
			d.errs = append(d.errs, err.Errors...)
		}
	}
	return b
}

func fieldOr(f string) string {
	if f == "" {
		return "id"
	}
	return f
}

func validHeaderName(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return s != ""
}

// Check reports the overrides of t that can never match this Builder's
// keys: per-value overrides of a dimension the config does not have, and
// composite overrides with the wrong number of values. The config centre's
// consumer calls it before storing a new table. The error, when not nil,
// is a *ConfigError.
func (b *Builder) Check(t *Table) error {
	if err := b.check(t, "overrides"); err != nil {
		return err
	}
	return nil
}

func (b *Builder) check(t *Table, path string) *ConfigError {
	if t == nil {
		return nil
	}
	var errs []field.Error
	for _, n := range t.Dimensions() {
		if b.dimIndex(n) < 0 {
			names := make([]string, len(b.dims))
			for i := range b.dims {
				names[i] = b.dims[i].name
			}
			errs = append(errs, field.Error{Path: path, Message: "dimension '" + n + "' is not in the config (have: " + strings.Join(names, ", ") + ")"})
		}
	}
	for _, n := range t.arities {
		if n != len(b.dims) {
			errs = append(errs, field.Error{Path: path, Message: fmt.Sprintf("composite override with %d values; the config has %d dimensions", n, len(b.dims))})
		}
	}
	if errs == nil {
		return nil
	}
	return &ConfigError{Errors: errs}
}

func (b *Builder) dimIndex(name string) int {
	for i := range b.dims {
		if b.dims[i].name == name {
			return i
		}
	}
	return -1
}

// Names returns the dimension names in key order.
func (b *Builder) Names() []string {
	names := make([]string, len(b.dims))
	for i := range b.dims {
		names[i] = b.dims[i].name
	}
	return names
}

// Needs returns the request attributes the Builder reads, so an adapter
// fetches only those (each Kong PDK call is a round trip).
func (b *Builder) Needs() Needs { return b.needs.clone() }

// A Result is a composite key and its quota.
type Result struct {
	// Key is the composite key; empty when OK is false.
	Key string
	// OK is false when a dimension with MissingSkip had no value: the
	// caller then uses its own identifier and limits.
	OK bool
	// Quota is the override for Key; its Limits are nil when none applies.
	Quota Quota
	// Overridden reports whether Quota came from an override.
	Overridden bool
	// By is the name of the dimension whose value matched the override, or
	// "" when the whole composite key matched.
	By string
}

// Key returns the composite key of in: ratelimit.Key of the optional key
// prefix and each dimension's value, in config order. ok is false when a
// dimension set to skip has no value. Distinct value lists always give
// distinct keys.
func (b *Builder) Key(in *Input) (key string, ok bool) {
	var vals [MaxDimensions]string
	return b.key(in, &vals)
}

func (b *Builder) key(in *Input, vals *[MaxDimensions]string) (string, bool) {
	if len(b.dims) == 0 {
		return "", false // a zero Builder has nothing to key on
	}
	var parts [MaxDimensions + 1]string
	n := 0
	if b.prefix != "" {
		parts[0] = b.prefix
		n = 1
	}
	var claims jwtClaims
	for i := range b.dims {
		dm := &b.dims[i]
		v := b.value(dm, in, &claims)
		if v == "" {
			if dm.skip {
				return "", false
			}
			v = dm.placeholder
		}
		vals[i] = v
		parts[n] = v
		n++
	}
	return ratelimit.Key(parts[:n]...), true
}

// Resolve returns in's composite key and the quota override that applies
// to it: first an override of the whole composite key, then the first
// dimension, in config order, whose value has an override. The table is
// the live one of Options.Overrides when it holds one, else the config's
// inline overrides. The lookup does not allocate.
func (b *Builder) Resolve(in *Input) Result {
	var vals [MaxDimensions]string
	key, ok := b.key(in, &vals)
	if !ok {
		return Result{}
	}
	r := Result{Key: key, OK: true}
	t := b.inline
	if b.live != nil {
		if lt := b.live.Load(); lt != nil {
			t = lt
		}
	}
	if t == nil || t.n == 0 {
		return r
	}
	if t.composite != nil {
		if q, hit := t.composite[key[b.prefixLen:]]; hit {
			r.Quota, r.Overridden = q, true
			return r
		}
	}
	for i := range b.dims {
		if m := t.byDim[b.dims[i].name]; m != nil {
			if q, hit := m[vals[i]]; hit {
				r.Quota, r.Overridden, r.By = q, true, b.dims[i].name
				return r
			}
		}
	}
	return r
}

type jwtClaims struct {
	done   bool
	claims map[string]any
}

func (b *Builder) value(dm *dim, in *Input, c *jwtClaims) string {
	switch dm.typ {
	case Header:
		return in.header(dm.arg)
	case Query:
		return in.query(dm.arg)
	case PathSegment:
		return segment(in.Path, dm.index)
	case PathRegex:
		m := dm.re.FindStringSubmatchIndex(in.Path)
		if m == nil || m[2*dm.group] < 0 {
			return ""
		}
		return in.Path[m[2*dm.group]:m[2*dm.group+1]]
	case Method:
		return strings.ToUpper(in.Method)
	case IP:
		return in.ClientIP
	case Consumer:
		switch dm.field {
		case "username":
			return in.Consumer.Username
		case "custom_id":
			return in.Consumer.CustomID
		}
		return in.Consumer.ID
	case Route:
		if dm.field == "name" {
			return in.Route.Name
		}
		return in.Route.ID
	case Service:
		if dm.field == "name" {
			return in.Service.Name
		}
		return in.Service.ID
	case JWTClaim:
		if !c.done {
			c.done = true
			now := in.Now
			if now.IsZero() {
				now = b.now()
			}
			if claims, ok := b.jwt.verify(in, now); ok {
				c.claims = claims
			}
		}
		if c.claims == nil {
			return ""
		}
		return claimValue(c.claims, dm.claim)
	}
	return ""
}

// segment returns the i-th "/"-separated segment of path after its leading
// slash, counting from the end when i < 0, or "" when there is none.
func segment(path string, i int) string {
	path = strings.TrimPrefix(path, "/")
	if i < 0 {
		for {
			j := strings.LastIndexByte(path, '/')
			if i == -1 {
				return path[j+1:]
			}
			if j < 0 {
				return ""
			}
			path = path[:j]
			i++
		}
	}
	for {
		j := strings.IndexByte(path, '/')
		if i == 0 {
			if j < 0 {
				return path
			}
			return path[:j]
		}
		if j < 0 {
			return ""
		}
		path = path[j+1:]
		i--
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
