package policy

import (
	"crypto/rand"
	"slices"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
)

// Identifier names what a limit counts by (Kong's identifier and limit_by
// values).
type Identifier string

// Identifiers. Each one falls back to the client IP when the request lacks
// its value.
const (
	ByIP            Identifier = "ip"
	ByCredential    Identifier = "credential"
	ByConsumer      Identifier = "consumer"
	ByService       Identifier = "service"
	ByHeader        Identifier = "header"
	ByPath          Identifier = "path"
	ByConsumerGroup Identifier = "consumer-group"
	ByRoute         Identifier = "route"
	// ByDimension is a sluice extension: the composite key computed by a
	// business layer and passed in Request.Dimension.
	ByDimension Identifier = "dimension"
)

var identifierNames = []string{"ip", "credential", "consumer", "service", "header", "path", "consumer-group", "route", "dimension"}

// Counter keys of the consumer identifier (config.counter_key).
const (
	CounterKeyID       = "consumer.id"
	CounterKeyUsername = "consumer.username"
	CounterKeyCustomID = "consumer.custom_id"
)

// Strategies (config.strategy and, for rate-limiting, config.policy).
const (
	StrategyLocal   = "local"
	StrategyRedis   = "redis"
	StrategyCluster = "cluster"
)

// Values of Extensions.RedisLayout.
const (
	RedisLayoutSluice = "sluice"
	RedisLayoutKong   = "kong"
)

// Window types (config.window_type).
const (
	WindowSliding = "sliding"
	WindowFixed   = "fixed"
	// WindowTokenBucket is the WindowType of a token bucket's state.
	WindowTokenBucket = "token_bucket"
)

// Kong's default rejection.
const (
	DefaultErrorCode    = 429
	DefaultErrorMessage = "API rate limit exceeded"
)

// AdvancedConfig is the config object of a rate-limiting-advanced plugin,
// field for field, after Kong's defaults and normalisation. The JSON tags
// are Kong's names; nullable fields are pointers or nil slices. A config
// from ParseAdvanced is valid; one built by hand is checked by NewAdvanced.
type AdvancedConfig struct {
	// Limit and WindowSize pair up: Limit[i] requests per WindowSize[i]
	// seconds. After normalisation they are sorted by ascending limit,
	// which is also the order of evaluation and of the headers.
	Limit      []int64 `json:"limit"`
	WindowSize []int64 `json:"window_size"`
	// WindowType is "sliding" (default) or "fixed".
	WindowType         string       `json:"window_type"`
	Identifier         Identifier   `json:"identifier"`
	CompoundIdentifier []Identifier `json:"compound_identifier"`
	// CounterKey is nil (consumer.id) or one of the CounterKey constants.
	CounterKey *string `json:"counter_key"`
	HeaderName *string `json:"header_name"`
	Path       *string `json:"path"`
	// Namespace identifies the counters. When the config leaves it out it
	// is the Kong plugin id (__plugin_id) if present, else a random 32
	// character string as in Kong (counters then reset on every load).
	Namespace          string   `json:"namespace"`
	Strategy           string   `json:"strategy"`
	SyncRate           *float64 `json:"sync_rate"`
	DictionaryName     string   `json:"dictionary_name"`
	LockDictionaryName string   `json:"lock_dictionary_name"`
	HideClientHeaders  bool     `json:"hide_client_headers"`
	// RetryAfterJitterMax is in seconds.
	RetryAfterJitterMax   float64     `json:"retry_after_jitter_max"`
	ErrorCode             int64       `json:"error_code"`
	ErrorMessage          string      `json:"error_message"`
	DisablePenalty        bool        `json:"disable_penalty"`
	EnforceConsumerGroups bool        `json:"enforce_consumer_groups"`
	ConsumerGroups        []string    `json:"consumer_groups"`
	Throttling            Throttling  `json:"throttling"`
	Redis                 RedisConfig `json:"redis"`
	// Sluice holds the extensions beyond Kong, all off by default.
	Sluice Extensions `json:"sluice"`

	// Kong carries the keys Kong adds to a config it sends to a plugin
	// server; they are not part of the normalised policy.
	Kong KongKeys `json:"-"`
	// Overrides are the legacy consumer-group overrides, keyed
	// by group name or id as listed in ConsumerGroups. Adapters fill it
	// from their consumer-group entities; ParseOverride reads one.
	Overrides map[string]*OverrideConfig `json:"-"`
}

// Throttling is config.throttling (Kong 3.12+): a waiting room for
// requests that would be rejected.
type Throttling struct {
	Enabled bool `json:"enabled"`
	// Interval is the time in seconds between retries of one request.
	Interval float64 `json:"interval"`
	// RetryTimes is the number of retries of one request.
	RetryTimes int64 `json:"retry_times"`
	// QueueLimit is the number of requests that may wait at once.
	QueueLimit int64 `json:"queue_limit"`
}

// Extensions are sluice features beyond Kong, read from the optional
// config key "sluice". All are off by default.
type Extensions struct {
	// IETFHeaders adds the IETF RateLimit-Policy and RateLimit header pair
	// (draft-ietf-httpapi-ratelimit-headers) next to Kong's headers.
	IETFHeaders bool `json:"ietf_headers"`
	// Shadow decides and reports every request but never rejects or delays
	// one, and sends no rate-limit headers: for trying a policy on live
	// traffic.
	Shadow bool `json:"shadow"`
	// RedisLayout chooses how the redis strategy lays counters out in Redis:
	// "sluice" (the default) spreads identifiers across Cluster slots and
	// keeps one integer per window, counted with INCRBY, exact per window
	// (docs/redis.md); "kong" uses
	// Kong's hashes ("<window_start>:<W>:<namespace>", field = identifier)
	// so that sluice and Kong nodes configured with the same namespace share
	// counters (see docs/redis.md for what that layout gives up).
	RedisLayout string `json:"redis_layout"`
}

// KongKeys are the keys Kong adds to a plugin's config.
type KongKeys struct {
	RouteID            string
	ServiceID          string
	ConsumerID         string
	PluginInstanceName string
	PluginID           string
	WorkspaceID        string
}

// ignoredKongKeys are Kong-added keys sluice has no use for.
var ignoredKongKeys = []string{"__key__", "__seq__"}

// readKongKeys accepts the keys Kong adds and keeps the useful ones.
func readKongKeys(f *fields) KongKeys {
	var k KongKeys
	for _, e := range []struct {
		name string
		dst  *string
	}{
		{"route_id", &k.RouteID}, {"service_id", &k.ServiceID}, {"consumer_id", &k.ConsumerID},
		{"plugin_instance_name", &k.PluginInstanceName}, {"__plugin_id", &k.PluginID}, {"__ws_id", &k.WorkspaceID},
	} {
		// Kong sends ids as strings, absent scopes as null or as
		// {"id": ...} records in some versions: accept any form.
		raw, kind := f.take(e.name)
		if kind != kindValue {
			continue
		}
		if s, ok := asString(raw); ok {
			*e.dst = s
		} else if r := (&decoder{}).record("", raw); r != nil {
			if id, ok := asString(r.m["id"]); ok {
				*e.dst = id
			}
		}
	}
	f.ignore(ignoredKongKeys...)
	return k
}

// OverrideConfig is the config of a legacy consumer-group override of
// rate-limiting-advanced.
type OverrideConfig struct {
	Limit               []int64 `json:"limit"`
	WindowSize          []int64 `json:"window_size"`
	WindowType          string  `json:"window_type"`
	RetryAfterJitterMax float64 `json:"retry_after_jitter_max"`
}

// Messages of the rate-limiting-advanced entity checks.
const (
	msgSameCount   = "You must provide the same number of windows and limits"
	msgCluster     = "[rate-limiting-advanced] strategy 'cluster' is not supported with Hybrid deployments or DB-less mode. If you did not specify the strategy, please use 'redis' strategy, 'local' strategy or set 'sync_rate' to -1."
	msgNoRedis     = "No redis config provided"
	msgProxyType1  = "'redis_proxy_type' makes sense only when 'strategy' is 'redis'."
	msgProxyType2  = "'redis_proxy_type' makes sense only when 'connection_is_proxied' is 'true'."
	msgSyncLocal   = "sync_rate cannot be configured when using a local strategy"
	msgSyncNeeded  = "sync_rate is required if not using a local strategy"
	msgNoHeader    = "No header name provided"
	msgDuplicated  = "Duplicated items found in 'compound_identifier': '"
	msgNoPath      = "No path provided"
	msgJitter      = "Non-negative retry_after_jitter_max value is expected"
	msgSyncDecimal = "Config option 'sync_rate' must not be a decimal between 0 and 0.02"
	msgNoGroups    = "No consumer groups provided"
	msgPositive    = "window_size and limit values must be greater than 0"
	msgWhole       = "window_size and limit values must be whole numbers"
	msgGreaterZero = "value must be greater than 0"
	msgNoPipe      = "must not contain '|'"
)

func defaultAdvanced() AdvancedConfig {
	return AdvancedConfig{
		WindowType:         WindowSliding,
		Identifier:         ByConsumer,
		Strategy:           StrategyLocal,
		DictionaryName:     "kong_rate_limiting_counters",
		LockDictionaryName: "kong_locks",
		ErrorCode:          DefaultErrorCode,
		ErrorMessage:       DefaultErrorMessage,
		Throttling:         Throttling{Interval: 5, RetryTimes: 3, QueueLimit: 5},
		Redis:              defaultRedis(),
		Sluice:             Extensions{RedisLayout: RedisLayoutSluice},
	}
}

// ParseAdvanced reads the config object of a rate-limiting-advanced
// plugin from JSON. Decoding is strict: any key that is neither a Kong
// field nor one of the keys Kong adds for plugin servers (route_id,
// service_id, consumer_id, plugin_instance_name, __plugin_id, __ws_id,
// __key__, __seq__) is an error naming it. Absent fields get Kong's
// defaults, limits are sorted ascending with their windows, sync_rate is
// forced to -1 for the local strategy and deprecated Redis fields are
// mapped to their replacements.
//
// On failure it returns a *ValidationError listing every problem. It never
// panics, whatever raw holds.
func ParseAdvanced(raw []byte) (*AdvancedConfig, error) {
	d := &decoder{}
	cfg := defaultAdvanced()
	f := parseRoot(d, raw)
	if f == nil {
		return nil, &ValidationError{Errors: d.errs}
	}
	cfg.Kong = readKongKeys(f)
	lw := readLimitWindows(f)
	f.enumString("window_type", &cfg.WindowType, WindowSliding, WindowFixed)
	f.identifier("identifier", &cfg.Identifier)
	f.identifiers("compound_identifier", &cfg.CompoundIdentifier)
	f.enum("counter_key", &cfg.CounterKey, true, CounterKeyID, CounterKeyUsername, CounterKeyCustomID)
	f.optChecked("header_name", &cfg.HeaderName, checkHeaderName)
	f.optChecked("path", &cfg.Path, checkURLPath)
	var ns *string
	f.optString("namespace", &ns)
	f.enumString("strategy", &cfg.Strategy, StrategyLocal, StrategyRedis, StrategyCluster)
	f.optNumber("sync_rate", &cfg.SyncRate)
	f.reqString("dictionary_name", &cfg.DictionaryName, true)
	f.reqString("lock_dictionary_name", &cfg.LockDictionaryName, true)
	f.reqBool("hide_client_headers", &cfg.HideClientHeaders)
	f.reqNumber("retry_after_jitter_max", &cfg.RetryAfterJitterMax)
	f.errorCode(&cfg.ErrorCode)
	f.reqString("error_message", &cfg.ErrorMessage, false)
	f.reqBool("disable_penalty", &cfg.DisablePenalty)
	f.reqBool("enforce_consumer_groups", &cfg.EnforceConsumerGroups)
	f.strings("consumer_groups", &cfg.ConsumerGroups)
	if t, k := f.sub("throttling"); t != nil {
		parseThrottling(t, &cfg.Throttling)
	} else if k == kindNull {
		d.fail(f.at("throttling"), msgRequired)
	}
	if r, k := f.sub("redis"); r != nil {
		parseRedis(r, &cfg.Redis)
	} else if k == kindNull {
		d.fail(f.at("redis"), msgRequired)
	}
	if s, _ := f.sub("sluice"); s != nil {
		parseExtensions(s, &cfg.Sluice)
	}
	f.done()

	switch {
	case ns != nil:
		if containsPipe(*ns) {
			d.fail(f.at("namespace"), msgNoPipe)
		}
		cfg.Namespace = *ns
	case cfg.Kong.PluginID != "":
		cfg.Namespace = cfg.Kong.PluginID
	default:
		cfg.Namespace = randomNamespace()
	}

	// Entity checks, in Kong's order.
	cfg.Limit, cfg.WindowSize = lw.pairs(d, f)
	validateAdvanced(d, &cfg)
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	return &cfg, nil
}

// limitWindows are the limit and window_size arrays of a config or of a
// consumer-group override, as read.
type limitWindows struct {
	limits, windows []float64
	ok              bool // both are arrays of numbers
}

// readLimitWindows reads limit and window_size, both required.
func readLimitWindows(f *fields) limitWindows {
	limits, hasLimit, okLimit := f.numbers("limit")
	windows, hasWindow, okWindow := f.numbers("window_size")
	if !hasLimit {
		f.d.fail(f.at("limit"), msgRequired)
	}
	if !hasWindow {
		f.d.fail(f.at("window_size"), msgRequired)
	}
	return limitWindows{limits, windows, okLimit && okWindow}
}

// pairs runs Kong's entity check of the limit/window pairs (as many
// windows as limits, then pairs): the limits and windows, sorted, or nil
// when they fail or were not read.
func (lw limitWindows) pairs(d *decoder, f *fields) ([]int64, []int64) {
	if !lw.ok {
		return nil, nil
	}
	if len(lw.limits) != len(lw.windows) {
		d.fail(f.at("window_size"), msgSameCount)
		return nil, nil
	}
	return pairs(d, f.path, lw.limits, lw.windows)
}

// pairs checks the limit/window pairs and sorts them by ascending limit.
// The sort is stable (Kong's is not; equal limits keep their order here).
func pairs(d *decoder, path string, limits, windows []float64) ([]int64, []int64) {
	n := len(d.errs)
	for i := range limits {
		if limits[i] <= 0 || windows[i] <= 0 {
			d.fail(path+".limit", msgPositive)
			break
		}
	}
	for i := range limits {
		if !isWhole(limits[i]) || !isWhole(windows[i]) {
			d.fail(path+".limit", msgWhole)
			break
		}
	}
	if len(d.errs) > n {
		return nil, nil
	}
	idx := make([]int, len(limits))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case limits[a] < limits[b]:
			return -1
		case limits[a] > limits[b]:
			return 1
		}
		return 0
	})
	ls, ws := make([]int64, len(idx)), make([]int64, len(idx))
	for i, j := range idx {
		ls[i], ws[i] = int64(limits[j]), int64(windows[j])
	}
	return ls, ws
}

// validateAdvanced runs the entity checks after the pairs (Kong's entity checks,
// in Kong's order). It is also how NewAdvanced checks a hand-built config.
func validateAdvanced(d *decoder, c *AdvancedConfig) {
	const p = pathConfig + "."
	if c.Strategy == StrategyCluster && (c.SyncRate == nil || *c.SyncRate != -1) {
		// sluice has no Kong database: it is DB-less.
		d.fail(p+"strategy", msgCluster)
	}
	if c.Strategy == StrategyRedis && c.Redis.Host == nil && c.Redis.SentinelNodes == nil && c.Redis.ClusterNodes == nil {
		d.fail(p+"redis", msgNoRedis)
	}
	if c.Redis.RedisProxyType != nil {
		if c.Strategy != StrategyRedis {
			d.fail(p+"redis.redis_proxy_type", msgProxyType1)
		}
		if !c.Redis.ConnectionIsProxied {
			d.fail(p+"redis.redis_proxy_type", msgProxyType2)
		}
	}
	if c.Strategy == StrategyLocal {
		if c.SyncRate != nil && *c.SyncRate > -1 {
			d.fail(p+"sync_rate", msgSyncLocal)
		} else {
			c.SyncRate = ptr(-1.0)
		}
	} else if c.SyncRate == nil {
		d.fail(p+"sync_rate", msgSyncNeeded)
	}
	if c.Identifier == ByHeader && c.HeaderName == nil {
		d.fail(p+"header_name", msgNoHeader)
	}
	for i, id := range c.CompoundIdentifier {
		// Report each duplicated value once, at its second occurrence.
		if first := slices.Index(c.CompoundIdentifier, id); first < i && slices.Index(c.CompoundIdentifier[first+1:], id)+first+1 == i {
			d.fail(p+"compound_identifier", msgDuplicated+string(id)+"'")
		}
	}
	if c.Identifier == ByPath && c.Path == nil {
		d.fail(p+"path", msgNoPath)
	}
	if c.RetryAfterJitterMax < 0 {
		d.fail(p+"retry_after_jitter_max", msgJitter)
	}
	if c.SyncRate != nil && *c.SyncRate > 0 && *c.SyncRate < 0.02 {
		d.fail(p+"sync_rate", msgSyncDecimal)
	}
	if c.EnforceConsumerGroups && c.ConsumerGroups == nil {
		d.fail(p+"consumer_groups", msgNoGroups)
	}
}

func parseThrottling(f *fields, t *Throttling) {
	f.reqBool("enabled", &t.Enabled)
	raw, k := f.take("interval")
	switch k {
	case kindNull:
		f.d.fail(f.at("interval"), msgRequired)
	case kindValue:
		v, ok := asNumber(raw)
		switch {
		case !ok:
			f.d.mistyped(f.at("interval"), field.Number, raw)
		case v < 1 || v > 1_000_000:
			f.d.fail(f.at("interval"), "value should be between 1 and 1000000")
		default:
			t.Interval = v
		}
	}
	f.reqInt("retry_times", &t.RetryTimes, 1, 1_000_000)
	f.reqInt("queue_limit", &t.QueueLimit, 1, 1_000_000)
	f.done()
}

func parseExtensions(f *fields, e *Extensions) {
	f.reqBool("ietf_headers", &e.IETFHeaders)
	f.reqBool("shadow", &e.Shadow)
	f.enumString("redis_layout", &e.RedisLayout, RedisLayoutSluice, RedisLayoutKong)
	f.done()
}

// enumString reads a non-nullable enum into a plain string.
func (f *fields) enumString(name string, dst *string, allowed ...string) {
	v := dst
	f.enum(name, &v, false, allowed...)
	*dst = *v
}

func (f *fields) identifier(name string, dst *Identifier) {
	s := string(*dst)
	f.enumString(name, &s, identifierNames...)
	*dst = Identifier(s)
}

func (f *fields) identifiers(name string, dst *[]Identifier) {
	var ss []string
	raw, k := f.take(name)
	if k == kindAbsent {
		return
	}
	if k == kindValue {
		f.m[name] = raw
		f.strings(name, &ss, identifierNames...)
	}
	if len(ss) == 0 {
		*dst = nil
		return
	}
	out := make([]Identifier, len(ss))
	for i, s := range ss {
		out[i] = Identifier(s)
	}
	*dst = out
}

// errorCode reads error_code: a number > 0 that must be a whole HTTP
// status (sluice writes it as a status code).
func (f *fields) errorCode(dst *int64) {
	raw, k := f.take("error_code")
	switch k {
	case kindNull:
		f.d.fail(f.at("error_code"), msgRequired)
	case kindValue:
		v, ok := asNumber(raw)
		switch {
		case !ok:
			f.d.mistyped(f.at("error_code"), field.Number, raw)
		case v <= 0:
			f.d.fail(f.at("error_code"), msgGreaterZero)
		case !isWhole(v) || v < 100 || v > 999:
			f.d.fail(f.at("error_code"), "error_code must be a whole HTTP status between 100 and 999")
		default:
			*dst = int64(v)
		}
	}
}

func containsPipe(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == '|' {
			return true
		}
	}
	return false
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// randomNamespace returns a random 32-character alphanumeric string, the
// form of Kong's auto-generated namespace.
func randomNamespace() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+).
	for i := range b {
		b[i] = alnum[int(b[i])%len(alnum)]
	}
	return string(b)
}

// ParseOverride reads the config of a legacy consumer-group override:
// limit, window_size, window_type (default sliding) and
// retry_after_jitter_max (default 0), checked and sorted like the plugin's.
func ParseOverride(raw []byte) (*OverrideConfig, error) {
	d := &decoder{}
	o := &OverrideConfig{WindowType: WindowSliding}
	f := parseRoot(d, raw)
	if f == nil {
		return nil, &ValidationError{Errors: d.errs}
	}
	lw := readLimitWindows(f)
	f.enumString("window_type", &o.WindowType, WindowSliding, WindowFixed)
	f.reqNumber("retry_after_jitter_max", &o.RetryAfterJitterMax)
	f.done()
	o.Limit, o.WindowSize = lw.pairs(d, f)
	if o.RetryAfterJitterMax < 0 {
		d.fail(f.at("retry_after_jitter_max"), msgJitter)
	}
	if len(d.errs) > 0 {
		return nil, &ValidationError{Errors: d.errs}
	}
	return o, nil
}

// windowDurations converts whole seconds to durations.
func windowDurations(ws []int64) []time.Duration {
	out := make([]time.Duration, len(ws))
	for i, w := range ws {
		out[i] = time.Duration(w) * time.Second
	}
	return out
}
