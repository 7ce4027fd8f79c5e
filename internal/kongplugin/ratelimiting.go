package kongplugin

import (
	"context"
	"encoding/json"
	"errors"
	"strings"

	"github.com/Kong/go-pdk"
	"github.com/Kong/go-pdk/entities"

	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

// RateLimitingPriority is Kong's priority of rate-limiting-advanced and
// rate-limiting: after authentication, before the proxied request.
const RateLimitingPriority = policy.PriorityRateLimiting

// SluiceConf is the optional "sluice" record of policy.Extensions.
type SluiceConf struct {
	IETFHeaders *bool `json:"ietf_headers"`
	Shadow      *bool `json:"shadow"`
	// RedisLayout is "sluice" (default) or "kong": Kong's Redis layout,
	// shared with Kong's own rate-limiting-advanced nodes.
	RedisLayout *string `json:"redis_layout"`
}

// rateLimitingExtensions are the RateLimitingConfig fields the policy
// parser does not know.
var rateLimitingExtensions = []string{"shared_key", "group_source", "group_shared_key", "group_header", "scope_group"}

// NewRateLimiting is the go-pdk constructor of sluice-rate-limiting
// instances.
func (p *Process) NewRateLimiting() any { return &RateLimitingConfig{p: p} }

// UnmarshalJSON decodes Kong's config JSON and keeps it for compiling: the
// keys Kong adds (__plugin_id, the default namespace) are not fields.
func (c *RateLimitingConfig) UnmarshalJSON(b []byte) error {
	type plain RateLimitingConfig
	if err := json.Unmarshal(b, (*plain)(c)); err != nil {
		return err
	}
	c.raw = append([]byte(nil), b...)
	return nil
}

// rlaCompiled is a compiled sluice-rate-limiting config with what its
// handler must read through the PDK.
type rlaCompiled struct {
	p   *Process
	cfg *policy.AdvancedConfig
	adv *policy.Advanced

	ip          bool // a compound item is the IP itself
	groups      bool
	readShared  bool
	sharedKey   string
	groupSource string
	groupKey    string
	groupHeader string
	scope       policy.Group
}

func (c *RateLimitingConfig) compiled() (*rlaCompiled, func(), error) {
	return c.comp.get(c.p.now, func() (*cacheEntry[*rlaCompiled], error) { return c.p.compileRateLimiting(c) })
}

func (p *Process) compileRateLimiting(c *RateLimitingConfig) (*cacheEntry[*rlaCompiled], error) {
	raw, err := rawOrMarshal(c.raw, c)
	if err != nil {
		return nil, err
	}
	_, sum, err := canonicalJSON(raw)
	if err != nil {
		return nil, err
	}
	return p.rla.get(sum, func() (*rlaCompiled, error) {
		rc, err := c.parse(raw)
		if err != nil {
			return nil, err
		}
		rc.p = p
		if rc.adv, err = policy.NewAdvanced(rc.cfg, p.registry); err != nil {
			return nil, &configError{"sluice-rate-limiting", appendErr(nil, "", err)}
		}
		rc.plan()
		return rc, nil
	})
}

// Validate checks the config as the plugin does on its first request,
// without building stores or connecting to Redis. The error wraps
// ErrInvalidConfig and lists every problem with its field path.
func (c *RateLimitingConfig) Validate() error {
	raw, err := rawOrMarshal(c.raw, c)
	if err != nil {
		return err
	}
	_, err = c.parse(raw)
	return err
}

// parse runs the policy parser on the Kong fields and checks the
// extensions.
func (c *RateLimitingConfig) parse(raw []byte) (*rlaCompiled, error) {
	body, _, err := canonicalJSON(raw, rateLimitingExtensions...)
	if err != nil {
		return nil, err
	}
	var errs []field.Error
	cfg, err := policy.ParseAdvanced(body)
	if err != nil {
		fes, ok := field.Of(err)
		if !ok {
			return nil, err
		}
		errs = append(errs, fes...)
	}
	rc := &rlaCompiled{cfg: cfg, sharedKey: DefaultSharedKey, groupSource: "consumer_tags",
		groupKey: DefaultSharedKey}
	errs = append(errs, rc.extensions(c)...)
	if len(errs) > 0 {
		return nil, &configError{"sluice-rate-limiting", errs}
	}
	return rc, nil
}

// extensions reads the sluice-only fields; a shared key becomes a leading
// compound identifier "dimension", so the key from kong.ctx.shared counts
// when present and the configured identifier otherwise.
func (rc *rlaCompiled) extensions(c *RateLimitingConfig) []field.Error {
	var errs []field.Error
	if c.SharedKey != nil {
		if *c.SharedKey == "" {
			errs = append(errs, field.Error{Path: "config.shared_key", Message: "length must be at least 1"})
		}
		rc.sharedKey = *c.SharedKey
		if rc.cfg != nil {
			if len(rc.cfg.CompoundIdentifier) > 0 {
				errs = append(errs, field.Error{Path: "config.shared_key", Message: "cannot be combined with compound_identifier"})
			}
			rc.cfg.CompoundIdentifier = []policy.Identifier{policy.ByDimension}
		}
	}
	if c.GroupSource != nil {
		rc.groupSource = *c.GroupSource
	}
	switch rc.groupSource {
	case "consumer_tags":
	case "shared":
		if c.GroupSharedKey != nil && *c.GroupSharedKey != "" {
			rc.groupKey = *c.GroupSharedKey
		}
	case "header":
		if c.GroupHeader == nil || *c.GroupHeader == "" {
			errs = append(errs, field.Error{Path: "config.group_header", Message: "required when group_source is header"})
		} else {
			rc.groupHeader = *c.GroupHeader
		}
	default:
		errs = append(errs, field.Error{Path: "config.group_source", Message: "expected one of: consumer_tags, shared, header"})
	}
	if c.ScopeGroup != nil && *c.ScopeGroup != "" {
		rc.scope = policy.Group{Name: *c.ScopeGroup}
	}
	return errs
}

// plan works out which attributes beyond the identifiers' the config
// reads.
func (rc *rlaCompiled) plan() {
	for _, id := range rc.cfg.CompoundIdentifier {
		if id == policy.ByIP {
			rc.ip = true
		}
	}
	ids := append(append([]policy.Identifier(nil), rc.cfg.CompoundIdentifier...), rc.cfg.Identifier)
	for _, id := range ids {
		switch id {
		case policy.ByConsumerGroup:
			rc.groups = true
		case policy.ByDimension:
			rc.readShared = true
		}
	}
	if rc.cfg.EnforceConsumerGroups {
		rc.groups = true
	}
	if rc.groups && rc.groupSource == "shared" && rc.groupKey == rc.sharedKey {
		rc.readShared = true
	}
}

// Access decides the request and applies the result: on an allowed
// request its headers in one SetHeaders call (none when hidden), on a
// rejection one Exit with status, JSON body and headers.
//
// PDK round trips before that, each only when the config needs it: the
// kong.ctx.shared entry (shared_key, dimension identifier, groups from
// shared), the consumer, then the credential when there is no consumer,
// the service, the route, the path, one per header read, the groups
// header, and the forwarded IP when the identifier is ip or the
// identifier's value is missing. A consumer-identified authenticated
// request therefore costs 2 round trips, an IP-identified one 2.
func (c *RateLimitingConfig) Access(kong *pdk.PDK) {
	c.p.storeLog.flush(kong)
	rc, done, err := c.compiled()
	if err != nil {
		failConfig(kong, err)
		return
	}
	defer done()
	req := policy.Request{Now: c.p.now()}
	if err := rc.read(kong, &req); err != nil {
		// Kong's rate limiter never fails a request for its own reasons:
		// log, and let it through without headers.
		_ = kong.Log.Err("sluice-rate-limiting: reading request: ", err.Error())
		return
	}
	res, err := rc.adv.Check(context.Background(), &req)
	switch {
	case errors.Is(err, policy.ErrInvalidQuota):
		// Decided on the plugin's own limits.
		c.p.logRepeated(kong, "warn", "quota "+rc.cfg.Namespace, "sluice-rate-limiting: ignoring quota override: "+err.Error())
	case err != nil:
		c.p.logRepeated(kong, "err", "store "+rc.cfg.Namespace, "sluice-rate-limiting: "+err.Error())
	}
	h := make(map[string][]string, len(res.Headers))
	for _, hd := range res.Headers {
		h[hd.Name] = []string{hd.Value}
	}
	if res.Allowed {
		if len(h) > 0 {
			if err := kong.Response.SetHeaders(h); err != nil {
				_ = kong.Log.Err("sluice-rate-limiting: setting headers: ", err.Error())
			}
		}
		return
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = []string{"application/json; charset=utf-8"}
	}
	kong.Response.Exit(res.Status, res.Body, h)
}

// read fills req with what the config needs, the quota override from
// kong.ctx.shared included.
// Compound items are read first (they take precedence), the identifier's
// attribute only when the compound key is incomplete, and the IP only when
// neither gives a key.
func (rc *rlaCompiled) read(kong *pdk.PDK, req *policy.Request) error {
	r := reader{rc: rc, kong: kong, req: req}
	if rc.readShared {
		v, err := kong.Ctx.GetSharedAny(rc.sharedKey)
		if err != nil {
			return err
		}
		if r.rec, err = decodeShared(v); err != nil {
			_ = kong.Log.Warn(err.Error())
			r.rec = sharedRecord{}
		}
		req.Dimension = r.rec.Key
		req.Quota = policy.Quota{Limits: r.rec.Quota, WindowTypeSet: r.rec.QuotaAlgorithmSet}
	}
	cfg := rc.cfg
	for _, id := range cfg.CompoundIdentifier {
		if err := r.fetch(id); err != nil {
			return err
		}
	}
	if !rc.compoundComplete(req) {
		if err := r.fetch(cfg.Identifier); err != nil {
			return err
		}
	}
	if rc.groups {
		if err := r.fetchGroups(); err != nil {
			return err
		}
	}
	if rc.ip || !rc.settled(req) {
		var err error
		if req.ClientIP, err = kong.Client.GetForwardedIp(); err != nil {
			return err
		}
	}
	return nil
}

// reader fetches each attribute at most once per request.
type reader struct {
	rc   *rlaCompiled
	kong *pdk.PDK
	req  *policy.Request
	rec  sharedRecord
	tags []string

	gotConsumer, gotCred, gotService, gotRoute, gotPath, gotHeader bool
}

func (r *reader) consumer() error {
	if r.gotConsumer {
		return nil
	}
	r.gotConsumer = true
	c, err := r.kong.Client.GetConsumer()
	if err != nil {
		return err
	}
	r.req.Consumer = policy.Consumer{ID: c.Id, Username: c.Username, CustomID: c.CustomId}
	r.tags = c.Tags
	return nil
}

func (r *reader) credential() error {
	if r.gotCred {
		return nil
	}
	r.gotCred = true
	c, err := r.kong.Client.GetCredential()
	r.req.CredentialID = c.Id
	return err
}

func (r *reader) fetch(id policy.Identifier) error {
	req := r.req
	var err error
	switch id {
	case policy.ByConsumer:
		if err = r.consumer(); err == nil && req.Consumer.ID == "" {
			// No consumer: Kong counts by the credential.
			err = r.credential()
		}
	case policy.ByCredential:
		err = r.credential()
	case policy.ByConsumerGroup:
		err = r.consumer()
	case policy.ByService:
		if !r.gotService {
			r.gotService = true
			var s entities.Service
			s, err = r.kong.Router.GetService()
			req.ServiceID = s.Id
		}
	case policy.ByRoute:
		if !r.gotRoute {
			r.gotRoute = true
			var rt entities.Route
			rt, err = r.kong.Router.GetRoute()
			req.RouteID = rt.Id
		}
	case policy.ByPath:
		if !r.gotPath {
			r.gotPath = true
			req.Path, err = r.kong.Request.GetPath()
		}
	case policy.ByHeader:
		if !r.gotHeader && r.rc.cfg.HeaderName != nil {
			r.gotHeader = true
			name := *r.rc.cfg.HeaderName
			var v string
			v, err = r.kong.Request.GetHeader(name)
			req.Header = func(n string) string {
				if strings.EqualFold(n, name) {
					return v
				}
				return ""
			}
		}
	}
	return err
}

func (r *reader) fetchGroups() error {
	if err := r.consumer(); err != nil {
		return err
	}
	req := r.req
	if req.Consumer.ID == "" {
		return nil
	}
	var gs []string
	switch r.rc.groupSource {
	case "consumer_tags":
		gs = groupsFromTags(r.tags)
	case "shared":
		gs = r.rec.Groups
		if !r.rc.readShared || r.rc.groupKey != r.rc.sharedKey {
			v, err := r.kong.Ctx.GetSharedAny(r.rc.groupKey)
			if err != nil {
				return err
			}
			if gs, err = groupsFromValue(v); err != nil {
				_ = r.kong.Log.Warn(err.Error())
			}
		}
	case "header":
		v, err := r.kong.Request.GetHeader(r.rc.groupHeader)
		if err != nil {
			return err
		}
		gs = groupsFromList(v)
	}
	for _, g := range gs {
		req.Groups = append(req.Groups, policy.Group{Name: g})
	}
	req.ScopeGroup = r.rc.scope
	return nil
}

// compoundComplete reports whether every compound item has a value.
func (rc *rlaCompiled) compoundComplete(req *policy.Request) bool {
	if len(rc.cfg.CompoundIdentifier) == 0 {
		return false
	}
	for _, id := range rc.cfg.CompoundIdentifier {
		if !rc.has(id, req) {
			return false
		}
	}
	return true
}

// settled reports whether the counter key is already known without the
// client IP: every compound item has a value, or the identifier has one.
// It errs on the side of "not settled", which costs one PDK call at most.
func (rc *rlaCompiled) settled(req *policy.Request) bool {
	return rc.compoundComplete(req) || rc.has(rc.cfg.Identifier, req)
}

func (rc *rlaCompiled) has(id policy.Identifier, req *policy.Request) bool {
	switch id {
	case policy.ByCredential:
		return req.CredentialID != ""
	case policy.ByConsumer:
		if req.Consumer.ID == "" {
			return req.CredentialID != ""
		}
		switch deref(rc.cfg.CounterKey) {
		case policy.CounterKeyUsername:
			return req.Consumer.Username != ""
		case policy.CounterKeyCustomID:
			return req.Consumer.CustomID != ""
		}
		return true
	case policy.ByService:
		return req.ServiceID != ""
	case policy.ByRoute:
		return req.RouteID != ""
	case policy.ByPath:
		return rc.cfg.Path != nil && req.Path == *rc.cfg.Path
	case policy.ByDimension:
		return req.Dimension != ""
	case policy.ByHeader:
		return req.Header != nil && rc.cfg.HeaderName != nil && req.Header(*rc.cfg.HeaderName) != ""
	case policy.ByConsumerGroup:
		if rc.scope == (policy.Group{}) || req.Consumer.ID == "" {
			return false
		}
		for _, g := range req.Groups {
			if g.Name == rc.scope.Name {
				return true
			}
		}
	}
	// ip needs the IP.
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
