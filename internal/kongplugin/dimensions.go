package kongplugin

import (
	"encoding/json"

	"github.com/Kong/go-pdk"

	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/policy/field"
)

// DimensionsPriority runs sluice-dimensions after Kong's authentication
// plugins (key-auth 1250, basic-auth 1100, ...) and ACL (950), so the
// consumer is known, and before the rate limiters (910); the sluice
// gateway uses the same value.
const DimensionsPriority = policy.PriorityDimensions

// DimensionsConfig is the config of the sluice-dimensions business plugin:
// the dimensions config of package policy/dimensions (docs/business-layer.md)
// plus where to publish the result and where groups and live quota
// overrides come from.
//
// Its Access handler reads only the request attributes the dimensions need
// (one PDK round trip each), builds the composite key, looks up the quota
// override, and writes both, with the consumer's groups, to kong.ctx.shared
// in one call (see DefaultSharedKey). It writes nothing when there is
// nothing to say, so the rate-limiting plugin falls back to its own
// identifier.
type DimensionsConfig struct {
	Dimensions  []DimensionConf `json:"dimensions"`
	OnMissing   *string         `json:"on_missing"`
	Placeholder *string         `json:"placeholder"`
	KeyPrefix   *string         `json:"key_prefix"`
	JWT         *JWTConf        `json:"jwt"`
	Overrides   []OverrideConf  `json:"overrides"`

	// SharedKey names the kong.ctx.shared entry written; null means
	// DefaultSharedKey.
	SharedKey *string `json:"shared_key"`
	// GroupsFrom publishes the consumer's group names with the key:
	// "consumer_tags" (tags "group:<name>" of the authenticated consumer;
	// one more PDK call unless a consumer dimension already read it) or
	// "header" (comma-separated, header GroupsHeader, set by an auth
	// plugin). Null publishes none.
	GroupsFrom   *string `json:"groups_from"`
	GroupsHeader *string `json:"groups_header"`
	// OverridesFile and OverridesEtcd* name the config centre that holds
	// live quota overrides ({"overrides": [...]} documents). They are
	// watched once per process, whatever the number of instances; while the
	// source has delivered nothing, or when it is unset, the inline
	// Overrides apply.
	OverridesFile          *string  `json:"overrides_file"`
	OverridesEtcdEndpoints []string `json:"overrides_etcd_endpoints"`
	OverridesEtcdPrefix    *string  `json:"overrides_etcd_prefix"`

	p    *Process
	raw  []byte
	comp lazy[*dimsCompiled]
}

// DimensionConf is one dimension (see dimensions.Dimension).
type DimensionConf struct {
	Name        *string `json:"name"`
	Type        *string `json:"type"`
	Header      *string `json:"header"`
	Query       *string `json:"query"`
	Index       *int    `json:"index"`
	Pattern     *string `json:"pattern"`
	Group       *string `json:"group"`
	Field       *string `json:"field"`
	Claim       *string `json:"claim"`
	OnMissing   *string `json:"on_missing"`
	Placeholder *string `json:"placeholder"`
}

// JWTConf is where a bearer token is and which keys verify it.
type JWTConf struct {
	Header     *string      `json:"header"`
	Query      *string      `json:"query"`
	Keys       []JWTKeyConf `json:"keys"`
	Leeway     *int         `json:"leeway"`
	Issuer     *string      `json:"issuer"`
	Audience   *string      `json:"audience"`
	RequireExp *bool        `json:"require_exp"`
}

// JWTKeyConf is one verification key.
type JWTKeyConf struct {
	KID            *string `json:"kid"`
	Algorithm      *string `json:"algorithm"`
	Secret         *string `json:"secret"`
	SecretIsBase64 *bool   `json:"secret_is_base64"`
	PublicKey      *string `json:"public_key"`
}

// OverrideConf is one inline quota override.
type OverrideConf struct {
	Dimension  *string   `json:"dimension"`
	Value      *string   `json:"value"`
	Values     []string  `json:"values"`
	Limit      []float64 `json:"limit"`
	WindowSize []float64 `json:"window_size"`
	WindowType *string   `json:"window_type"`
}

// dimensionsExtensions are the DimensionsConfig fields that are not part of
// the dimensions config, and kongScopeKeys the keys Kong adds.
var (
	dimensionsExtensions = []string{"shared_key", "groups_from", "groups_header",
		"overrides_file", "overrides_etcd_endpoints", "overrides_etcd_prefix"}
	kongScopeKeys = []string{"route_id", "service_id", "consumer_id", "plugin_instance_name", "__plugin_id", "__ws_id"}
)

// NewDimensions is the go-pdk constructor of sluice-dimensions instances.
func (p *Process) NewDimensions() any { return &DimensionsConfig{p: p} }

// UnmarshalJSON decodes Kong's config JSON and keeps it for compiling.
func (c *DimensionsConfig) UnmarshalJSON(b []byte) error {
	type plain DimensionsConfig
	if err := json.Unmarshal(b, (*plain)(c)); err != nil {
		return err
	}
	c.raw = append([]byte(nil), b...)
	return nil
}

type dimsCompiled struct {
	b            *dimensions.Builder
	sharedKey    string
	groupsFrom   string
	groupsHeader string
}

func (c *DimensionsConfig) compiled() (*dimsCompiled, func(), error) {
	return c.comp.get(c.p.now, func() (*cacheEntry[*dimsCompiled], error) { return c.p.compileDimensions(c) })
}

func (p *Process) compileDimensions(c *DimensionsConfig) (*cacheEntry[*dimsCompiled], error) {
	raw, err := rawOrMarshal(c.raw, c)
	if err != nil {
		return nil, err
	}
	// The hash covers the extensions too: they change the compiled value.
	_, sum, err := canonicalJSON(raw, kongScopeKeys...)
	if err != nil {
		return nil, err
	}
	return p.dims.get(sum, func() (*dimsCompiled, error) {
		dc, body, errs, err := c.check(raw)
		if err != nil {
			return nil, err
		}
		var holder *dimensions.Overrides
		if len(errs) == 0 {
			if holder, err = p.overridesFor(c); err != nil {
				errs = appendErr(errs, "", err)
			}
		}
		b, err := dimensions.New(body, dimensions.Options{Overrides: holder, Now: p.now})
		if err != nil {
			errs = appendErr(errs, "config", err)
		}
		if len(errs) > 0 {
			return nil, &configError{"sluice-dimensions", errs}
		}
		dc.b = b
		return dc, nil
	})
}

// Validate checks the config as the plugin does on its first request,
// without watching its overrides source. The error wraps ErrInvalidConfig
// and lists every problem.
func (c *DimensionsConfig) Validate() error {
	raw, err := rawOrMarshal(c.raw, c)
	if err != nil {
		return err
	}
	_, body, errs, err := c.check(raw)
	if err != nil {
		return err
	}
	if _, err := dimensions.Parse(body); err != nil {
		errs = appendErr(errs, "config", err)
	}
	if len(errs) > 0 {
		return &configError{"sluice-dimensions", errs}
	}
	return nil
}

// check reads the extensions and returns the dimensions config body.
func (c *DimensionsConfig) check(raw []byte) (*dimsCompiled, []byte, []field.Error, error) {
	body, _, err := canonicalJSON(raw, append(dimensionsExtensions, kongScopeKeys...)...)
	if err != nil {
		return nil, nil, nil, err
	}
	dc := &dimsCompiled{sharedKey: DefaultSharedKey}
	var errs []field.Error
	if c.SharedKey != nil {
		if *c.SharedKey == "" {
			errs = append(errs, field.Error{Path: "config.shared_key", Message: "length must be at least 1"})
		}
		dc.sharedKey = *c.SharedKey
	}
	if c.GroupsFrom != nil {
		dc.groupsFrom = *c.GroupsFrom
		switch dc.groupsFrom {
		case "consumer_tags":
		case "header":
			if c.GroupsHeader == nil || *c.GroupsHeader == "" {
				errs = append(errs, field.Error{Path: "config.groups_header", Message: "required when groups_from is header"})
			} else {
				dc.groupsHeader = *c.GroupsHeader
			}
		default:
			errs = append(errs, field.Error{Path: "config.groups_from", Message: "expected one of: consumer_tags, header"})
		}
	}
	errs = append(errs, c.overridesSource().Check("config")...)
	return dc, body, errs, nil
}

// Access builds the composite key and publishes it in kong.ctx.shared.
//
// PDK round trips: one per attribute the dimensions need (Builder.Needs),
// plus one for the consumer when groups come from its tags and no consumer
// dimension fetched it, one for the groups header, and one SetShared when
// there is a key, a quota or groups to publish.
func (c *DimensionsConfig) Access(kong *pdk.PDK) {
	dc, done, err := c.compiled()
	if err != nil {
		failConfig(kong, err)
		return
	}
	defer done()
	a := &pdkAccessor{kong: kong}
	var in dimensions.Input
	if err := dc.b.Fill(&in, a); err != nil {
		// The business plugin fails open: without a key the rate limiter
		// uses its own identifier.
		_ = kong.Log.Err("sluice-dimensions: ", err.Error())
		return
	}
	in.Now = c.p.now()
	res := dc.b.Resolve(&in)
	var rec sharedRecord
	if res.OK {
		rec.Key = res.Key
		if res.Overridden {
			rec.Quota, rec.QuotaAlgorithmSet = res.Quota.Limits, res.Quota.AlgorithmSet
		}
	}
	switch dc.groupsFrom {
	case "consumer_tags":
		cons, err := a.getConsumer()
		if err != nil {
			_ = kong.Log.Err("sluice-dimensions: reading consumer: ", err.Error())
			return
		}
		rec.Groups = groupsFromTags(cons.Tags)
	case "header":
		v, err := kong.Request.GetHeader(dc.groupsHeader)
		if err != nil {
			_ = kong.Log.Err("sluice-dimensions: reading groups header: ", err.Error())
			return
		}
		rec.Groups = groupsFromList(v)
	}
	m := rec.encode()
	if len(m) == 0 {
		return
	}
	if err := kong.Ctx.SetShared(dc.sharedKey, m); err != nil {
		_ = kong.Log.Err("sluice-dimensions: writing kong.ctx.shared: ", err.Error())
	}
}
