package decision

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
)

// ErrInvalidConfig is wrapped by every configuration error; the concrete
// error is a *ConfigError listing each problem.
var ErrInvalidConfig = errors.New("decision: invalid config")

// A ConfigError lists every problem found in a configuration file, in file
// order, each with its path (as in
// "domains[0].descriptors[2].rate_limit.unit") and line. It wraps
// ErrInvalidConfig.
type ConfigError struct {
	Errors []field.Error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString("decision: invalid config:")
	for _, fe := range e.Errors {
		b.WriteString("\n\t")
		b.WriteString(fe.String())
	}
	return b.String()
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// FieldErrors returns e.Errors.
func (e *ConfigError) FieldErrors() []field.Error { return e.Errors }

// Config is a parsed and validated decision service configuration.
//
// The file format is envoyproxy/ratelimit's (domain, descriptors with key,
// value, rate_limit, nested descriptors, shadow_mode), either one domain at
// the top level exactly as envoyproxy/ratelimit reads it, or several under
// "domains", plus the sluice settings documented in
// docs/decision-service.md.
type Config struct {
	// Store selects the counter store. Changing it requires a restart.
	Store StoreConfig
	// Algorithm is used by every limit that does not name one. It is
	// FixedWindow when the file does not set it: that is what
	// envoyproxy/ratelimit does, so an existing file means the same thing.
	Algorithm ratelimit.Algorithm
	// ResponseHeaders adds rate-limit headers to every response that
	// checked a limit, in ResponseHeaderFormat.
	ResponseHeaders bool
	// ResponseHeaderFormat is HeadersRateLimit (the default:
	// envoyproxy/ratelimit's LIMIT_RESPONSE_HEADERS_ENABLED headers,
	// RateLimit-Limit: 10) or HeadersDraft03
	// (draft-ietf-httpapi-ratelimit-headers-03, x-ratelimit-limit: 10,
	// 10;w=60, as Envoy's own filter writes them).
	ResponseHeaderFormat string
	// ResponseHeaderNames name the three headers of HeadersRateLimit
	// (envoyproxy/ratelimit's LIMIT_LIMIT_HEADER, LIMIT_REMAINING_HEADER
	// and LIMIT_RESET_HEADER); empty names keep RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset.
	ResponseHeaderNames HeaderNames
	// ShadowMode answers OK to every request; descriptor statuses still
	// tell what would have happened.
	ShadowMode bool
	// Domains are the rate limit domains, each with its descriptor tree.
	Domains []Domain
	// Check configures GET /check (nginx auth_request, Traefik
	// forwardAuth); nil leaves it off.
	Check *CheckConfig

	storeSet bool // the file has a store section
}

// The formats of Config.ResponseHeaderFormat.
const (
	HeadersRateLimit = "ratelimit"
	HeadersDraft03   = "draft_03"
)

// HeaderNames name the rate-limit response headers.
type HeaderNames struct {
	Limit, Remaining, Reset string
}

// A Domain is one named descriptor tree; Envoy names it in every request.
type Domain struct {
	Name        string
	Descriptors []Descriptor
}

// A Descriptor matches one entry of a request descriptor: Key, and Value
// when it is not empty. An empty Value matches any value of Key (each value
// still has its own counter). A Value with "*" in it is a pattern: each "*"
// matches any run of characters ("bot-*", "bar*b", "foo*bar*baz"). A Key
// with "*" in it is a pattern too, matched as envoyproxy/ratelimit matches
// it: against the request entry's key and value joined with "_", the
// pattern being Key, or Key_Value when Value is set.
type Descriptor struct {
	Key   string
	Value string
	// RateLimit applies when a request descriptor ends at this entry; nil
	// means none (the descriptor is answered OK, unlimited).
	RateLimit *RateLimit
	// ShadowMode answers OK for this descriptor even when it is over limit.
	ShadowMode bool
	// QuotaMode makes this descriptor a quota: over its limit it is
	// reported OVER_LIMIT in its status, but the request as a whole is over
	// limit only when every quota descriptor of it is (and no other
	// descriptor is), as in envoyproxy/ratelimit.
	QuotaMode bool
	// DetailedMetric names this limit's statistics by the request's
	// values (domain.key_value.key_value) instead of the configured path.
	DetailedMetric bool
	// ValueToMetric puts the request's value of this entry in the
	// statistics' name when the configuration does not give one (or gives a
	// wildcard).
	ValueToMetric bool
	// ShareThreshold makes every value matching this wildcard share one
	// counter, instead of one counter per value. Only with a wildcard Value.
	ShareThreshold bool
	// Metadata is returned in the response's dynamic metadata when this
	// descriptor is within its limit (with Options.DynamicMetadata); nil
	// when none is given.
	Metadata *structpb.Struct
	// Descriptors match the next entry of the request descriptor.
	Descriptors []Descriptor
}

// A RateLimit is what applies to a matched descriptor.
type RateLimit struct {
	// Name identifies the limit for Replaces and in x-ratelimit-limit.
	Name string
	// Replaces names limits that are not checked when this one applies to
	// another descriptor of the same request.
	Replaces []string
	// Unlimited answers OK without counting.
	Unlimited bool
	// Limits are checked together, in order; empty iff Unlimited.
	Limits []LimitSpec
}

// A LimitSpec is one limit of a RateLimit as the file states it.
type LimitSpec struct {
	// RequestsPerUnit is the allowed count per window. Zero denies every
	// request, as in envoyproxy/ratelimit.
	RequestsPerUnit uint32
	// Unit and Multiplier give the window: Multiplier units.
	Unit       rlspb.RateLimitResponse_RateLimit_Unit
	Multiplier uint32
	// Algorithm counts the hits; Burst is the token bucket's size (zero
	// means RequestsPerUnit).
	Algorithm ratelimit.Algorithm
	Burst     int64
}

// Window returns the window length: Multiplier units, a month being 30
// days and a year 365 days (envoyproxy/ratelimit's lengths).
func (s LimitSpec) Window() time.Duration {
	return unitLength(s.Unit) * time.Duration(s.Multiplier)
}

// Limit returns s as a ratelimit.Limit. It is only meaningful when
// RequestsPerUnit > 0.
func (s LimitSpec) Limit() ratelimit.Limit {
	return ratelimit.Limit{Algorithm: s.Algorithm, Count: int64(s.RequestsPerUnit), Window: s.Window(), Burst: s.Burst}
}

func unitLength(u rlspb.RateLimitResponse_RateLimit_Unit) time.Duration {
	switch u {
	case rlspb.RateLimitResponse_RateLimit_SECOND:
		return time.Second
	case rlspb.RateLimitResponse_RateLimit_MINUTE:
		return time.Minute
	case rlspb.RateLimitResponse_RateLimit_HOUR:
		return time.Hour
	case rlspb.RateLimitResponse_RateLimit_DAY:
		return 24 * time.Hour
	case rlspb.RateLimitResponse_RateLimit_WEEK:
		return 7 * 24 * time.Hour
	case rlspb.RateLimitResponse_RateLimit_MONTH:
		return 30 * 24 * time.Hour
	case rlspb.RateLimitResponse_RateLimit_YEAR:
		return 365 * 24 * time.Hour
	}
	return 0
}

func parseUnit(s string) (rlspb.RateLimitResponse_RateLimit_Unit, bool) {
	v, ok := rlspb.RateLimitResponse_RateLimit_Unit_value[strings.ToUpper(s)]
	if !ok || v == int32(rlspb.RateLimitResponse_RateLimit_UNKNOWN) {
		return 0, false
	}
	return rlspb.RateLimitResponse_RateLimit_Unit(v), true
}

// StoreConfig selects and configures the counter store.
type StoreConfig struct {
	// Type is "memory" (the default) or "redis".
	Type string
	// Memory configures the in-process store.
	Memory MemoryConfig
	// Redis configures the Redis store; required when Type is "redis".
	Redis RedisConfig
}

// MemoryConfig configures the in-process store.
type MemoryConfig struct {
	// MaxKeys bounds the number of counted keys; zero means the store's
	// default.
	MaxKeys int64
}

// RedisConfig configures the Redis store (package ratelimit/redisstore).
// One topology is used: Cluster when ClusterNodes is set, else Sentinel
// when SentinelMaster is set, else the standalone server at Host:Port.
type RedisConfig struct {
	// Config is the connection (host, port, database, credentials, TLS,
	// Sentinel or Cluster nodes); the service reads host, port, database,
	// username, password, ssl, ssl_verify, sentinel_master, sentinel_nodes
	// and cluster_nodes into it.
	redisstore.Config
	// Namespace separates these counters from other users of the same
	// Redis; empty means "decision".
	Namespace string
	// SyncRate is how often counters are shared: zero (the default) asks
	// Redis on every decision; a positive duration counts locally and
	// pushes and pulls every SyncRate (Kong's sync_rate).
	SyncRate time.Duration
	// Timeout bounds every Redis call; past it the decision is made with
	// local counters. Zero means the store's default, 200 ms.
	Timeout time.Duration
	// EnvoyLayout keeps counters in envoyproxy/ratelimit's Redis keys
	// (<KeyPrefix><domain>_<key>_<value>_..._<window start>), so a fleet
	// can move from envoyproxy/ratelimit to sluice, or run both, without
	// counters restarting. It holds fixed windows of one unit only, counts
	// denied hits as envoyproxy/ratelimit does, and ignores Namespace
	// and SyncRate (see docs/decision-service.md).
	EnvoyLayout bool
	// KeyPrefix starts every key of EnvoyLayout (envoyproxy/ratelimit's
	// CACHE_KEY_PREFIX).
	KeyPrefix string
	// ServiceClock decides token buckets and leases with the service's
	// clock instead of Redis' TIME; Redis' clock (the default) gives every
	// node of the service one clock for them. Windows follow the service's
	// clock either way.
	ServiceClock bool
	// SettingNames names Config's fields as the user set them (for
	// example "password": "REDIS_AUTH") in the error logged when Redis
	// refuses the configuration; a field not in it is named
	// config.redis.FIELD, as in the file.
	SettingNames map[string]string
}

func (rc RedisConfig) settingName(f string) string {
	if n, ok := rc.SettingNames[f]; ok {
		return n
	}
	return "config.redis." + f
}

// Parse decodes and validates a configuration file. Unknown fields are
// errors. It returns every problem at once in a *ConfigError that wraps
// ErrInvalidConfig.
func Parse(data []byte) (*Config, error) {
	cfg, _, errs := parse(data)
	if len(errs) > 0 {
		return nil, &ConfigError{Errors: errs}
	}
	return cfg, nil
}

// globalSettings are the top-level fields that configure the whole service
// rather than the domains of their file.
var globalSettings = []string{"store", "response_headers", "response_header_format", "response_header_names", "shadow_mode", "check"}

// parse decodes one file and lists the global settings it sets.
func parse(data []byte) (*Config, []string, []field.Error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, nil, []field.Error{{Message: "parsing YAML: " + err.Error()}}
	}
	d := &decoder{}
	cfg := &Config{Algorithm: ratelimit.FixedWindow}
	if r := resolve(&root); r == nil || r.Kind == 0 {
		d.add(nil, "", "the file is empty")
		return nil, nil, d.errs
	}
	top := d.mapping("", &root)
	if top == nil {
		return nil, nil, d.errs
	}
	var settings []string
	for _, name := range globalSettings {
		if _, ok := top.fields[name]; ok {
			settings = append(settings, name)
		}
	}
	if top.has("algorithm") {
		a, err := ratelimit.ParseAlgorithm(top.str("algorithm"))
		if err != nil {
			d.add(top.field("algorithm"), "algorithm", "unknown algorithm %q (want fixed, sliding or token_bucket)", top.str("algorithm"))
		} else {
			cfg.Algorithm = a
		}
	}
	cfg.ResponseHeaders = top.boolean("response_headers")
	cfg.ResponseHeaderFormat = HeadersRateLimit
	switch f := top.str("response_header_format"); f {
	case "", HeadersRateLimit, HeadersDraft03:
		if f != "" {
			cfg.ResponseHeaderFormat = f
		}
	default:
		d.add(top.field("response_header_format"), "response_header_format", "unknown format %q (want %s or %s)", f, HeadersRateLimit, HeadersDraft03)
	}
	cfg.ResponseHeaderNames = HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"}
	if n := top.field("response_header_names"); n != nil {
		if m := d.mapping("response_header_names", n); m != nil {
			for _, f := range []struct {
				name string
				p    *string
			}{{"limit", &cfg.ResponseHeaderNames.Limit}, {"remaining", &cfg.ResponseHeaderNames.Remaining}, {"reset", &cfg.ResponseHeaderNames.Reset}} {
				if v := m.str(f.name); v != "" {
					*f.p = v
				}
			}
			m.done()
		}
		if cfg.ResponseHeaderFormat != HeadersRateLimit {
			d.add(n, "response_header_names", "only for response_header_format %s", HeadersRateLimit)
		}
	}
	cfg.ShadowMode = top.boolean("shadow_mode")
	if cfg.ShadowMode && top.has("domain") {
		// envoyproxy/ratelimit reads a file's domain and descriptors and
		// ignores a shadow_mode beside them; sluice's would shadow every
		// domain. Neither reading is safe to guess.
		d.add(top.field("shadow_mode"), "shadow_mode", "beside domain, envoyproxy/ratelimit ignores it and sluice would answer OK for every domain: set it per descriptor, or for the whole service with SHADOW_MODE or beside domains")
	}
	if n := top.field("store"); n != nil {
		cfg.storeSet = true
		cfg.Store = d.store("store", n)
	}
	if cfg.Store.Type == "" {
		cfg.Store.Type = "memory"
	}
	switch {
	case top.has("domain") && top.has("domains"):
		d.add(top.field("domains"), "domains", "must not be given together with domain")
		top.field("descriptors")
	case top.has("domain") || top.has("descriptors"):
		// One domain at the top level, as envoyproxy/ratelimit reads a file.
		cfg.Domains = append(cfg.Domains, d.domain("", top, cfg.Algorithm))
	default:
		for i, n := range top.seq("domains") {
			p := indexPath("domains", i)
			m := d.mapping(p, n)
			if m == nil {
				continue
			}
			cfg.Domains = append(cfg.Domains, d.domain(p, m, cfg.Algorithm))
			m.done()
		}
		if len(cfg.Domains) == 0 && !top.has("domains") {
			d.add(top.node, "", "no domains: give domain and descriptors, or domains")
		}
	}
	if n := top.field("check"); n != nil {
		cfg.Check = d.check("check", n, cfg.Domains)
	}
	if cfg.Store.Redis.EnvoyLayout {
		for i, dom := range cfg.Domains {
			d.envoyLimits(joinPath(indexPath("domains", i), "descriptors"), dom.Descriptors)
		}
	}
	top.done()
	seen := map[string]bool{}
	for i, dom := range cfg.Domains {
		if dom.Name != "" && seen[dom.Name] {
			d.add(nil, joinPath(indexPath("domains", i), "domain"), "duplicate domain %q", dom.Name)
		}
		seen[dom.Name] = true
	}
	if len(d.errs) > 0 {
		// File order; errors without a line (cross-checks) last.
		sort.SliceStable(d.errs, func(i, j int) bool {
			li, lj := d.errs[i].Line, d.errs[j].Line
			return li != 0 && (lj == 0 || li < lj)
		})
		return nil, nil, d.errs
	}
	return cfg, settings, nil
}

// A File is one configuration file of a directory, named by its path
// relative to the directory.
type File struct {
	Name string
	Data []byte
}

// ParseOptions configure ParseFiles.
type ParseOptions struct {
	// MergeDomains merges the descriptors of a domain given in several
	// files (envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG); without it a
	// domain in two files is an error.
	MergeDomains bool
}

// ParseFiles decodes a directory of configuration files as one
// configuration, as envoyproxy/ratelimit loads its runtime directory: each
// file gives one domain (domain and descriptors) or several (domains).
// The global settings (store, response_headers, response_header_format,
// response_header_names, shadow_mode, check) may be set in one file only;
// algorithm applies to the limits of its own file. Every problem of every
// file is returned at once, each error's path starting with its file's
// name. No files is a configuration without domains, as envoyproxy/ratelimit
// reads an empty directory: every request is answered OK.
func ParseFiles(files []File, opts ParseOptions) (*Config, error) {
	var errs []field.Error
	var base *Config
	baseFile := ""
	var domains []Domain
	where := map[string]int{} // domain name -> index in domains
	from := map[string]string{}
	for _, f := range files {
		cfg, settings, ferrs := parse(f.Data)
		for _, e := range ferrs {
			errs = append(errs, inFile(f.Name, e))
		}
		if cfg == nil {
			continue
		}
		if len(settings) > 0 {
			if base != nil {
				errs = append(errs, field.Error{Path: f.Name + ": " + settings[0], Message: "also set in " + baseFile + "; the global settings (" + strings.Join(globalSettings, ", ") + ") go in one file"})
			} else {
				base, baseFile = cfg, f.Name
			}
		}
		for _, dom := range cfg.Domains {
			i, dup := where[dom.Name]
			switch {
			case !dup:
				where[dom.Name] = len(domains)
				from[dom.Name] = f.Name
				domains = append(domains, dom)
			case !opts.MergeDomains:
				errs = append(errs, field.Error{Path: f.Name + ": domain", Message: fmt.Sprintf("duplicate domain %q, also in %s (set MERGE_DOMAIN_CONFIG to merge them)", dom.Name, from[dom.Name])})
			default:
				seen := map[[2]string]bool{}
				for _, d := range domains[i].Descriptors {
					seen[[2]string{d.Key, d.Value}] = true
				}
				for j, d := range dom.Descriptors {
					if seen[[2]string{d.Key, d.Value}] {
						errs = append(errs, field.Error{Path: f.Name + ": " + indexPath("descriptors", j), Message: fmt.Sprintf("duplicate descriptor key %q value %q in merged domain %q, also in %s", d.Key, d.Value, dom.Name, from[dom.Name])})
					}
				}
				domains[i].Descriptors = append(domains[i].Descriptors, dom.Descriptors...)
			}
		}
	}
	if len(errs) > 0 {
		return nil, &ConfigError{Errors: errs}
	}
	if base == nil {
		base = &Config{Algorithm: ratelimit.FixedWindow, ResponseHeaderFormat: HeadersRateLimit,
			ResponseHeaderNames: HeaderNames{Limit: "RateLimit-Limit", Remaining: "RateLimit-Remaining", Reset: "RateLimit-Reset"},
			Store:               StoreConfig{Type: "memory"}}
	}
	out := *base
	out.Domains = domains
	return &out, nil
}

// inFile puts a file's name in front of an error's path.
func inFile(name string, e field.Error) field.Error {
	if e.Path == "" {
		e.Path = name
	} else {
		e.Path = name + ": " + e.Path
	}
	return e
}

// envoyLimits checks that every limit fits envoyproxy/ratelimit's key
// layout: one fixed-window limit of one unit.
func (d *decoder) envoyLimits(path string, ds []Descriptor) {
	for i, desc := range ds {
		p := indexPath(path, i)
		if rl := desc.RateLimit; rl != nil && !rl.Unlimited {
			if len(rl.Limits) > 1 {
				d.add(nil, joinPath(p, "rate_limit.limits"), "key_layout envoy holds one limit per descriptor")
			}
			for _, l := range rl.Limits {
				if l.Algorithm != ratelimit.FixedWindow || l.Multiplier > 1 {
					d.add(nil, joinPath(p, "rate_limit"), "key_layout envoy holds fixed windows of one unit only, got %s", l)
				}
			}
		}
		d.envoyLimits(joinPath(p, "descriptors"), desc.Descriptors)
	}
}

func (d *decoder) domain(path string, m *mapping, alg ratelimit.Algorithm) Domain {
	dom := Domain{Name: m.str("domain")}
	if dom.Name == "" {
		d.add(m.node, joinPath(path, "domain"), "must not be empty")
	}
	dom.Descriptors = d.descriptors(joinPath(path, "descriptors"), m.seq("descriptors"), alg)
	return dom
}

func (d *decoder) descriptors(path string, nodes []*yaml.Node, alg ratelimit.Algorithm) []Descriptor {
	var out []Descriptor
	type kv struct{ k, v string }
	seen := map[kv]bool{}
	for i, n := range nodes {
		p := indexPath(path, i)
		m := d.mapping(p, n)
		if m == nil {
			continue
		}
		desc := Descriptor{
			Key:            m.scalar("key"),
			Value:          m.scalar("value"),
			ShadowMode:     m.boolean("shadow_mode"),
			QuotaMode:      m.boolean("quota_mode"),
			DetailedMetric: m.boolean("detailed_metric"),
			ValueToMetric:  m.boolean("value_to_metric"),
			ShareThreshold: m.boolean("share_threshold"),
		}
		if desc.ShareThreshold && !strings.Contains(desc.Value, "*") && !strings.Contains(desc.Key, "*") {
			d.add(m.field("share_threshold"), joinPath(p, "share_threshold"), "only for a wildcard value (one with \"*\"), got %q", desc.Value)
		}
		if mn := m.field("metadata"); mn != nil {
			if mn.Kind != yaml.MappingNode {
				d.mistype(mn, joinPath(p, "metadata"), field.Object)
			} else if v := d.value(joinPath(p, "metadata"), mn); v != nil {
				desc.Metadata = v.GetStructValue()
			}
		}
		if desc.Key == "" {
			d.add(m.node, joinPath(p, "key"), "must not be empty")
		} else if seen[kv{desc.Key, desc.Value}] {
			d.add(m.node, p, "duplicate descriptor key %q value %q", desc.Key, desc.Value)
		}
		seen[kv{desc.Key, desc.Value}] = true
		if rn := m.field("rate_limit"); rn != nil {
			desc.RateLimit = d.rateLimit(joinPath(p, "rate_limit"), rn, alg)
		}
		desc.Descriptors = d.descriptors(joinPath(p, "descriptors"), m.seq("descriptors"), alg)
		m.done()
		out = append(out, desc)
	}
	return out
}

func (d *decoder) rateLimit(path string, n *yaml.Node, alg ratelimit.Algorithm) *RateLimit {
	m := d.mapping(path, n)
	if m == nil {
		return nil
	}
	rl := &RateLimit{Name: m.str("name"), Unlimited: m.boolean("unlimited")}
	for i, rn := range m.seq("replaces") {
		p := indexPath(joinPath(path, "replaces"), i)
		rm := d.mapping(p, rn)
		if rm == nil {
			continue
		}
		name := rm.str("name")
		rm.done()
		switch {
		case name == "":
			d.add(rm.node, joinPath(p, "name"), "must not be empty")
		case name == rl.Name:
			d.add(rm.node, joinPath(p, "name"), "a limit must not replace itself")
		default:
			rl.Replaces = append(rl.Replaces, name)
		}
	}
	single := false
	for _, f := range []string{"unit", "requests_per_unit", "unit_multiplier", "algorithm", "burst"} {
		if m.has(f) {
			single = true
		}
	}
	list := m.seq("limits")
	switch {
	case rl.Unlimited:
		// As envoyproxy/ratelimit: an unlimited rate_limit may keep its
		// requests_per_unit (unused) but not a valid unit.
		_, _ = m.uint32("requests_per_unit")
		if _, ok := parseUnit(m.str("unit")); ok && m.has("unit") {
			d.add(m.field("unit"), joinPath(path, "unit"), "an unlimited rate_limit must not set unit (envoyproxy/ratelimit refuses it too)")
		}
		for _, f := range []string{"unit_multiplier", "algorithm", "burst", "limits"} {
			if m.has(f) {
				d.add(m.field(f), joinPath(path, f), "an unlimited rate_limit must not set %s", f)
			}
		}
	case single && m.has("limits"):
		d.add(m.field("limits"), joinPath(path, "limits"), "must not be given together with unit and requests_per_unit")
	case m.has("limits"):
		if len(list) == 0 {
			d.add(m.field("limits"), joinPath(path, "limits"), "must not be empty")
		}
		for i, ln := range list {
			p := indexPath(joinPath(path, "limits"), i)
			lm := d.mapping(p, ln)
			if lm == nil {
				continue
			}
			rl.Limits = append(rl.Limits, d.limit(p, lm, alg))
			lm.done()
		}
	default:
		rl.Limits = append(rl.Limits, d.limit(path, m, alg))
	}
	m.done()
	return rl
}

// limit decodes unit, requests_per_unit, unit_multiplier, algorithm and
// burst from m.
func (d *decoder) limit(path string, m *mapping, alg ratelimit.Algorithm) LimitSpec {
	s := LimitSpec{Algorithm: alg, Multiplier: 1}
	if !m.has("unit") {
		d.add(m.node, joinPath(path, "unit"), "required (second, minute, hour, day, week, month or year)")
	} else if u, ok := parseUnit(m.str("unit")); ok {
		s.Unit = u
	} else {
		d.add(m.field("unit"), joinPath(path, "unit"), "invalid unit %q (want second, minute, hour, day, week, month or year)", m.str("unit"))
	}
	// A missing requests_per_unit is 0, which denies every request, as
	// envoyproxy/ratelimit reads it.
	s.RequestsPerUnit, _ = m.uint32("requests_per_unit")
	if m.has("unit_multiplier") {
		if v, ok := m.uint32("unit_multiplier"); ok {
			if v == 0 {
				d.add(m.field("unit_multiplier"), joinPath(path, "unit_multiplier"), "must be greater than 0")
			} else {
				s.Multiplier = v
			}
		}
	}
	if m.has("algorithm") {
		a, err := ratelimit.ParseAlgorithm(m.str("algorithm"))
		if err != nil {
			d.add(m.field("algorithm"), joinPath(path, "algorithm"), "unknown algorithm %q (want fixed, sliding or token_bucket)", m.str("algorithm"))
		} else {
			s.Algorithm = a
		}
	}
	if m.has("burst") {
		b, _ := m.uint32("burst")
		s.Burst = int64(b)
		if s.Algorithm != ratelimit.TokenBucket {
			d.add(m.field("burst"), joinPath(path, "burst"), "only a token_bucket limit has a burst")
		}
	}
	if s.RequestsPerUnit > 0 && s.Unit != 0 {
		if err := s.Limit().Validate(); err != nil {
			d.add(m.node, path, "%v", err)
		}
	}
	return s
}

func (d *decoder) store(path string, n *yaml.Node) StoreConfig {
	var sc StoreConfig
	m := d.mapping(path, n)
	if m == nil {
		return sc
	}
	sc.Type = m.str("type")
	switch sc.Type {
	case "", "memory", "redis":
	default:
		d.add(m.field("type"), joinPath(path, "type"), "unknown store %q (want memory or redis)", sc.Type)
	}
	if mn := m.field("memory"); mn != nil {
		if sc.Type == "redis" {
			d.add(mn, joinPath(path, "memory"), "set, but type is redis")
		}
		mp := joinPath(path, "memory")
		if mm := d.mapping(mp, mn); mm != nil {
			if v, ok := mm.uint32("max_keys"); ok {
				sc.Memory.MaxKeys = int64(v)
			}
			mm.done()
		}
	}
	if rn := m.field("redis"); rn != nil {
		sc.Redis = d.redis(joinPath(path, "redis"), rn)
		if sc.Type != "redis" {
			d.add(rn, joinPath(path, "redis"), "set, but type is not redis")
		}
	} else if sc.Type == "redis" {
		d.add(m.node, joinPath(path, "redis"), "required when type is redis")
	}
	m.done()
	return sc
}

func (d *decoder) redis(path string, n *yaml.Node) RedisConfig {
	var rc RedisConfig
	m := d.mapping(path, n)
	if m == nil {
		return rc
	}
	rc.Host = m.str("host")
	if rc.Host != "" {
		if msg := field.HostProblem(rc.Host); msg != "" {
			d.add(m.field("host"), joinPath(path, "host"), "%s", msg)
		}
	}
	if p, ok := m.uint32("port"); ok {
		if p == 0 || p > 65535 {
			d.add(m.field("port"), joinPath(path, "port"), "must be from 1 to 65535, got %d", p)
		}
		rc.Port = int(p)
	}
	if v, ok := m.uint32("database"); ok {
		rc.Database = int(v)
	}
	rc.Username = m.str("username")
	rc.Password = m.str("password")
	rc.SSL = m.boolean("ssl")
	rc.SSLVerify = m.boolean("ssl_verify")
	rc.SentinelMaster = m.str("sentinel_master")
	rc.SentinelNodes = d.addrs(m, path, "sentinel_nodes")
	rc.ClusterNodes = d.addrs(m, path, "cluster_nodes")
	if rc.SentinelMaster != "" && len(rc.SentinelNodes) == 0 {
		d.add(m.node, joinPath(path, "sentinel_nodes"), "required with sentinel_master")
	}
	if rc.SentinelMaster == "" && len(rc.SentinelNodes) > 0 {
		d.add(m.field("sentinel_nodes"), joinPath(path, "sentinel_master"), "required with sentinel_nodes")
	}
	rc.Namespace = m.str("namespace")
	if rc.Namespace == "" {
		rc.Namespace = "decision"
	}
	rc.SyncRate = d.duration(m, path, "sync_rate")
	rc.Timeout = d.duration(m, path, "timeout")
	switch l := m.str("key_layout"); l {
	case "", "sluice":
	case "envoy":
		rc.EnvoyLayout = true
	default:
		d.add(m.field("key_layout"), joinPath(path, "key_layout"), "unknown key layout %q (want sluice or envoy)", l)
	}
	rc.KeyPrefix = m.str("key_prefix")
	if rc.KeyPrefix != "" && !rc.EnvoyLayout {
		d.add(m.field("key_prefix"), joinPath(path, "key_prefix"), "only with key_layout envoy")
	}
	if rc.EnvoyLayout && rc.SyncRate > 0 {
		d.add(m.field("sync_rate"), joinPath(path, "sync_rate"), "must be 0 with key_layout envoy (every decision asks Redis)")
	}
	switch c := m.str("clock"); c {
	case "", "redis":
	case "service":
		rc.ServiceClock = true
	default:
		d.add(m.field("clock"), joinPath(path, "clock"), "unknown clock %q (want redis or service)", c)
	}
	m.done()
	return rc
}

// value decodes any YAML value as a protobuf Value (the form of Envoy's
// dynamic metadata): mappings with string keys, lists, strings, numbers,
// booleans and null.
func (d *decoder) value(path string, n *yaml.Node) *structpb.Value {
	n = resolve(n)
	switch {
	case n == nil || isNull(n):
		return structpb.NewNullValue()
	case n.Kind == yaml.MappingNode:
		st := &structpb.Struct{Fields: map[string]*structpb.Value{}}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := resolve(n.Content[i])
			if k == nil || k.Kind != yaml.ScalarNode {
				d.add(n.Content[i], path, "mapping keys must be strings")
				continue
			}
			if v := d.value(joinPath(path, k.Value), n.Content[i+1]); v != nil {
				st.Fields[k.Value] = v
			}
		}
		return structpb.NewStructValue(st)
	case n.Kind == yaml.SequenceNode:
		l := &structpb.ListValue{}
		for i, c := range n.Content {
			if v := d.value(indexPath(path, i), c); v != nil {
				l.Values = append(l.Values, v)
			}
		}
		return structpb.NewListValue(l)
	case n.Tag == "!!bool":
		return structpb.NewBoolValue(strings.EqualFold(n.Value, "true"))
	case n.Tag == "!!int" || n.Tag == "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			d.add(n, path, "invalid number %q", n.Value)
			return nil
		}
		return structpb.NewNumberValue(f)
	}
	return structpb.NewStringValue(n.Value)
}

// addrs decodes a list of "host:port" strings.
func (d *decoder) addrs(m *mapping, path, name string) []redisstore.Addr {
	var out []redisstore.Addr
	for i, n := range m.seq(name) {
		p := indexPath(joinPath(path, name), i)
		if n.Kind != yaml.ScalarNode || n.Tag != "!!str" {
			d.mistype(n, p, `a "host:port" string`)
			continue
		}
		host, port, err := net.SplitHostPort(n.Value)
		pn, perr := strconv.Atoi(port)
		if err != nil || perr != nil || pn <= 0 || pn > 65535 {
			d.add(n, p, "expected \"host:port\", got %q", field.RedactURL(n.Value))
			continue
		}
		if msg := field.HostProblem(host); msg != "" {
			d.add(n, p, "host: %s", msg)
			continue
		}
		out = append(out, redisstore.Addr{Host: host, Port: pn})
	}
	return out
}

// duration decodes a Go duration string ("250ms", "1s"); it must not be
// negative.
func (d *decoder) duration(m *mapping, path, name string) time.Duration {
	s := m.str(name)
	if s == "" {
		return 0
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		d.add(m.field(name), joinPath(path, name), "expected a non-negative duration such as \"250ms\", got %q", s)
		return 0
	}
	return v
}

// String formats s like a configuration line: "10/minute fixed".
func (s LimitSpec) String() string {
	u := strings.ToLower(s.Unit.String())
	if s.Multiplier > 1 {
		u = strconv.FormatUint(uint64(s.Multiplier), 10) + " " + u + "s"
	}
	return fmt.Sprintf("%d/%s %s", s.RequestsPerUnit, u, s.Algorithm)
}
