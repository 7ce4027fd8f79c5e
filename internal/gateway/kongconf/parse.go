package kongconf

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"regexp/syntax"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"

	"github.com/seed-008287da/sluice/internal/kongid"
	"github.com/seed-008287da/sluice/internal/kongname"
	"github.com/seed-008287da/sluice/internal/kongpath"

	"github.com/seed-008287da/sluice/policy/field"
)

// Decode reads a declarative configuration from YAML or JSON (JSON is read
// as YAML, of which it is a subset). It returns the linked model as far as
// it could be built together with every problem found, so that later
// checks (plugin configs) can add theirs to the same list; the model is
// valid only when the list is empty. cfg is nil only when the document
// could not be read at all. References to environment variables are
// errors: DecodeWith resolves them.
func Decode(data []byte) (*Config, Errors) {
	return DecodeWith(data, DecodeOptions{})
}

// DecodeOptions are the inputs of DecodeWith besides the document.
type DecodeOptions struct {
	// LookupEnv resolves decK's ${{ env "DECK_X" }} substitutions and Kong
	// env-vault references ({vault://env/NAME}); nil resolves none, so
	// that every reference is an error naming its field.
	LookupEnv LookupEnv
}

// DecodeWith is Decode with references resolved through opts.LookupEnv.
// A reference that cannot be resolved is an error at its field; it is
// never used as the literal value.
func DecodeWith(data []byte, opts DecodeOptions) (*Config, Errors) {
	resolved := &resolvedRefs{}
	cfg, errs := decodeWith(data, opts, resolved)
	resolved.scrub(errs)
	return cfg, errs
}

// LaterErrors returns errs, found in c after DecodeWith (by a plugin
// reading its config, say), as they are to be shown. An error at a field
// whose reference could not be resolved is left out: the reference's own
// error, from DecodeWith, says why the field is empty. In the others each
// value c resolved from a decK substitution or a vault reference appears as
// the reference's text, since a resolved value may be a secret.
// DecodeWith's own errors are shown so already. It filters errs in place
// and returns the shortened slice.
func (c *Config) LaterErrors(errs []field.Error) []field.Error {
	if c == nil {
		return errs
	}
	out := errs[:0]
	for _, fe := range errs {
		if !c.unresolved[fe.Path] {
			out = append(out, fe)
		}
	}
	c.resolved.scrub(out)
	return out
}

func decodeWith(data []byte, opts DecodeOptions, resolved *resolvedRefs) (*Config, Errors) {
	var node yaml.Node
	if err := yaml.Unmarshal(data, &node); err != nil {
		// decK renders its substitutions in the file's text before
		// reading it, so a file can be YAML only once rendered
		// (key: "${{ env "DECK_X" }}"); render it so, then.
		rendered, rerrs := renderText(data, opts.LookupEnv, resolved)
		if rendered == nil {
			return nil, yamlErrors(err)
		}
		if len(rerrs) > 0 {
			return nil, rerrs
		}
		if err := yaml.Unmarshal(rendered, &node); err != nil {
			return nil, yamlErrors(err)
		}
	}
	refErrs := &errList{}
	resolveRefs(&node, "", refEnv{lookup: opts.LookupEnv, vaults: scanVaults(&node), resolved: resolved}, refErrs)
	var doc any
	if len(node.Content) > 0 {
		if err := node.Decode(&doc); err != nil {
			return nil, yamlErrors(err)
		}
	}
	if doc == nil {
		return nil, Errors{{Message: "empty configuration"}}
	}
	p := &parser{errs: &errList{}, resolved: resolved}
	tree := dropNulls(normalize(doc))
	root := asObj(tree, "", p.errs)
	if root == nil {
		return nil, append(p.errs.list, refErrs.list...)
	}
	cfg := p.parse(root)
	// A field whose reference failed has no value to check further.
	cfg.resolved = resolved
	cfg.unresolved = make(map[string]bool, len(refErrs.list))
	for _, fe := range refErrs.list {
		cfg.unresolved[fe.Path] = true
	}
	errs := make(Errors, 0, len(p.errs.list)+len(refErrs.list))
	for _, fe := range p.errs.list {
		if !cfg.unresolved[fe.Path] {
			errs = append(errs, fe)
		}
	}
	return cfg, append(errs, refErrs.list...)
}

// yamlErrors turns the YAML reader's error into one error per problem,
// each with the line the reader gave.
func yamlErrors(err error) Errors {
	var msgs []string
	var te *yaml.TypeError
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{strings.TrimPrefix(err.Error(), "yaml: ")}
	}
	out := make(Errors, 0, len(msgs))
	for _, m := range msgs {
		if i := strings.Index(m, "invalid map key: "); i >= 0 {
			m = m[:i] + "a mapping key must be a string, a number or a boolean"
		}
		fe := field.Error{Message: "parsing: " + m}
		if rest, ok := strings.CutPrefix(m, "line "); ok {
			if n, msg, ok := strings.Cut(rest, ": "); ok {
				if l, err := strconv.Atoi(n); err == nil {
					fe = field.Error{Line: l, Message: msg}
				}
			}
		}
		out = append(out, fe)
	}
	return out
}

type parser struct {
	errs *errList
	cfg  Config
	// pending references, resolved once every entity is known
	routeSvc       []pendingRef[*Route]
	memberRefs     []pendingMember
	plugRefs       []pendingPlugin
	sniRefs        []pendingSNI
	serviceTLSRefs []pendingServiceTLS
	targetRefs     []pendingTarget
	upClientRefs   []pendingRef[*Upstream]
	// generated holds the ids the parser derived (not configured); only
	// configured ids must be unique, derived ones follow their names.
	generated map[string]bool
	resolved  *resolvedRefs // the references resolved in the file
}

// fromRef reports whether the value at path was resolved from a decK
// substitution or a vault reference: a message about it must not show
// anything derived from the value.
func (p *parser) fromRef(path string) bool {
	if p.resolved == nil {
		return false
	}
	for _, r := range p.resolved.list {
		if r.path == path || r.path == "" {
			return true
		}
	}
	return false
}

func (p *parser) genID(kind, key string) string {
	return p.markGenerated(stableID(kind, key))
}

// markGenerated records id as one the file did not give.
func (p *parser) markGenerated(id string) string {
	if p.generated == nil {
		p.generated = map[string]bool{}
	}
	p.generated[id] = true
	return id
}

type pendingRef[T any] struct {
	ent  T
	ref  string
	path string
}

type pendingMember struct {
	consumer *Consumer // nil when listed under a group
	group    *ConsumerGroup
	ref      string
	path     string
}

type pendingPlugin struct {
	p                                      *Plugin
	service, route, consumer, group        string
	servicePath, routePath, conPath, gPath string
}

func (p *parser) parse(root *obj) *Config {
	p.meta(root)
	for i, v := range root.list("services") {
		p.service(v, index("services", i))
	}
	for i, v := range root.list("routes") {
		p.route(v, index("routes", i), nil)
	}
	for i, v := range root.list("consumers") {
		p.consumer(v, index("consumers", i))
	}
	for i, v := range root.list("consumer_groups") {
		p.group(v, index("consumer_groups", i))
	}
	for i, v := range root.list("plugins") {
		p.plugin(v, index("plugins", i), scope{})
	}
	p.topCredentials(root)
	p.tlsEntities(root)
	p.upstreamEntities(root)
	root.finish()
	p.resolve()
	p.resolveTLS()
	p.resolveUpstreams()
	p.checkUnique()
	return &p.cfg
}

// stableID derives an id from an entity's kind and natural key, so that an
// entity without a configured id keeps its id (and its counters) across
// reloads. It is shaped like a UUID (version 5 layout).
func stableID(kind, key string) string {
	h := sha1.Sum([]byte("sluice\x00" + kind + "\x00" + key))
	h[6] = (h[6] & 0x0f) | 0x50
	h[8] = (h[8] & 0x3f) | 0x80
	s := hex.EncodeToString(h[:16])
	return s[0:8] + "-" + s[8:12] + "-" + s[12:16] + "-" + s[16:20] + "-" + s[20:32]
}

func (p *parser) service(v any, path string) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	timestamps(o)
	s := &Service{
		ID:      o.str("id"),
		Name:    o.str("name"),
		Enabled: o.boolean("enabled", true),
		Tags:    o.strList("tags"),
	}
	s.ConnectTimeout = time.Duration(o.integer("connect_timeout", 60000, 1, 1<<31-1)) * time.Millisecond
	s.ReadTimeout = time.Duration(o.integer("read_timeout", 60000, 1, 1<<31-1)) * time.Millisecond
	s.WriteTimeout = time.Duration(o.integer("write_timeout", 60000, 1, 1<<31-1)) * time.Millisecond
	s.Retries = int(o.integer("retries", 5, 0, 32767))
	s.TLSVerify = o.boolean("tls_verify", true)
	if o.has("url") {
		// Kong expands url into these four, replacing what they say,
		// before it validates them: they are read and ignored.
		for _, f := range []string{"protocol", "host", "port", "path"} {
			o.get(f)
		}
		p.serviceURL(s, o.str("url"), o.field("url"))
	} else {
		s.Protocol = o.str("protocol")
		if s.Protocol == "" {
			s.Protocol = "http"
		}
		s.Host = o.str("host")
		s.Path = o.str("path")
		s.Port = int(o.integer("port", 0, 0, 65535))
		if s.Host == "" && !o.has("host") {
			p.errs.add(o.field("host"), "required field missing (or set url)")
		}
		if s.Path != "" && !strings.HasPrefix(s.Path, "/") {
			p.errs.add(o.field("path"), "must start with /")
		}
	}
	switch s.Protocol {
	case "http":
		if s.Port == 0 {
			s.Port = 80
		}
	case "https":
		if s.Port == 0 {
			s.Port = 443
		}
	case "":
		// url did not parse: its error says so.
	default:
		p.errs.add(o.field("protocol"), "unsupported protocol %q (want http or https)", s.Protocol)
	}
	switch {
	case s.ID != "":
	case s.Name != "":
		s.ID = p.markGenerated(kongid.Declarative("services", s.Name)) // Kong's, as for routes
	default:
		s.ID = p.genID("service", path)
	}
	s.addr = joinHostPort(s.Host, s.Port)
	p.serviceTLS(s, o)
	p.cfg.Services = append(p.cfg.Services, s)
	for i, r := range o.list("routes") {
		p.route(r, index(o.field("routes"), i), s)
	}
	for i, pl := range o.list("plugins") {
		p.plugin(pl, index(o.field("plugins"), i), scope{service: s})
	}
	o.finish()
}

func (p *parser) serviceURL(s *Service, raw, path string) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Scheme == "" {
		p.errs.add(path, "invalid url %q (want http://host[:port][/path] or https://...)", field.RedactURL(raw))
		return
	}
	if u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		p.errs.add(path, "url must not have a query, fragment or user info")
	}
	s.Protocol = u.Scheme
	s.Host = u.Hostname()
	if ps := u.Port(); ps != "" {
		n, err := strconv.Atoi(ps)
		if err != nil || n < 1 || n > 65535 {
			p.errs.add(path, "invalid port %q", ps)
		}
		s.Port = n
	}
	s.Path = u.EscapedPath()
}

func (p *parser) route(v any, path string, svc *Service) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	timestamps(o)
	r := &Route{
		ID:                      o.str("id"),
		Name:                    o.str("name"),
		Service:                 svc,
		StripPath:               o.boolean("strip_path", true),
		PreserveHost:            o.boolean("preserve_host", false),
		RegexPriority:           int(o.integer("regex_priority", 0, -1<<31, 1<<31-1)),
		HTTPSRedirectStatusCode: int(o.integer("https_redirect_status_code", 426, 0, 999)),
		Tags:                    o.strList("tags"),
		Where:                   path,
	}
	if svc != nil {
		if o.has("service") {
			p.errs.add(o.field("service"), "a nested route belongs to its service already")
		}
		o.get("service")
	} else if ref := o.ref("service"); ref != "" {
		p.routeSvc = append(p.routeSvc, pendingRef[*Route]{r, ref, o.field("service")})
	}
	switch r.HTTPSRedirectStatusCode {
	case 426, 301, 302, 307, 308:
	default:
		p.errs.add(o.field("https_redirect_status_code"), "expected one of: 426, 301, 302, 307, 308")
	}
	if ph := o.str("path_handling"); ph != "" && ph != "v0" {
		p.errs.add(o.field("path_handling"), "only v0 is supported, got %q", ph)
	}
	// sluice streams request and response bodies whatever these say; they
	// are accepted so that decK dumps load.
	o.boolean("request_buffering", true)
	o.boolean("response_buffering", true)
	r.Paths = o.strList("paths")
	for i, ps := range r.Paths {
		fp := index(o.field("paths"), i)
		if msg := checkRouterPath(ps, p.fromRef(fp)); msg != "" {
			p.errs.add(fp, "%s", msg)
		}
	}
	r.Methods = o.strList("methods")
	for i, m := range r.Methods {
		if !upperLetters(m) {
			p.errs.add(index(o.field("methods"), i), "invalid method %q (want upper-case letters only, as Kong's http_method)", m)
		}
	}
	if hv, ok := o.get("headers"); ok {
		hp := o.field("headers")
		hm, isMap := hv.(map[string]any)
		if !isMap {
			p.errs.add(hp, "%s", field.Expected(hp, "an object of header names to lists of values", hv))
		}
		names := make([]string, 0, len(hm))
		for name := range hm {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			np := join(hp, name)
			lname := strings.ToLower(name)
			if msg := kongname.CheckHeaderName(name); msg != "" {
				p.errs.add(np, "%s", msg)
				continue
			}
			if lname == "host" {
				p.errs.add(np, "use 'hosts' to match on the Host header")
				continue
			}
			vals, ok := hm[name].([]any)
			if !ok || len(vals) == 0 {
				p.errs.add(np, "expected a non-empty list of values")
				continue
			}
			for i, v := range vals {
				sv, ok := v.(string)
				switch {
				case !ok:
					p.errs.add(index(np, i), "%s", field.Expected(index(np, i), field.String, v))
				case strings.HasPrefix(sv, "~*"):
					if _, err := regexp.Compile(strings.ToLower(sv[2:])); err != nil {
						p.errs.add(index(np, i), "invalid regex %q: %v", sv[2:], err)
						continue
					}
					fallthrough
				default:
					if r.Headers == nil {
						r.Headers = map[string][]string{}
					}
					r.Headers[lname] = append(r.Headers[lname], sv)
				}
			}
		}
	}
	r.Hosts = strings2lower(o.strList("hosts"))
	for i, h := range r.Hosts {
		if !validHost(h) {
			p.errs.add(index(o.field("hosts"), i), "invalid host %q", h)
		}
	}
	r.Protocols = o.strList("protocols")
	if r.Protocols == nil {
		r.Protocols = []string{"http", "https"}
	}
	for i, pr := range r.Protocols {
		if pr != "http" && pr != "https" {
			p.errs.add(index(o.field("protocols"), i), "unsupported protocol %q (want http or https)", pr)
		}
	}
	r.SNIs = strings2lower(o.strList("snis"))
	for i, sn := range r.SNIs {
		if !validSNI(sn) {
			p.errs.add(index(o.field("snis"), i), "invalid SNI %q (want a host name without a port, with at most one *, as its first or last character)", sn)
		}
	}
	https := contains(r.Protocols, "https")
	if len(r.SNIs) > 0 && !https {
		p.errs.add(o.field("snis"), "'snis' can only be set when 'protocols' is 'grpcs', 'https', 'tls', 'tls_passthrough', or 'wss'")
	}
	// Fields of Kong's expressions router (router_flavor = expressions).
	expression := o.has("expression")
	if expression {
		o.get("expression")
		p.errs.add(o.field("expression"), "expression routes need Kong's router_flavor = expressions, which sluice does not implement: "+
			"sluice routes as Kong's default router (traditional_compatible), with paths, hosts, methods, headers and snis")
	}
	// priority 0 is the expressions router's "not set".
	if o.integer("priority", 0, 0, 1<<46-1) != 0 {
		p.errs.add(o.field("priority"), "applies to expression routes only (router_flavor = expressions), which sluice does not implement; "+
			"use regex_priority with paths")
	}
	// Stream routing fields: Kong rejects them on http and https routes,
	// the only protocols sluice serves.
	for _, f := range []string{"sources", "destinations"} {
		if l := o.list(f); len(l) > 0 {
			p.errs.add(o.field(f), "cannot set '%s' when 'protocols' is 'http' or 'https'", f)
		}
	}
	switch {
	case expression:
		// refused above
	case o.has("headers") && len(r.Headers) == 0:
		// headers given but invalid: reported above
	case https && len(r.Paths) == 0 && len(r.Methods) == 0 && len(r.Hosts) == 0 && len(r.Headers) == 0 && len(r.SNIs) == 0:
		p.errs.add(path, "must set one of 'methods', 'hosts', 'headers', 'paths', 'snis' when 'protocols' is 'https'")
	case !https && len(r.Paths) == 0 && len(r.Methods) == 0 && len(r.Hosts) == 0 && len(r.Headers) == 0:
		p.errs.add(path, "must set one of 'methods', 'hosts', 'headers', 'paths' when 'protocols' is 'http'")
	}
	switch {
	case r.ID != "":
	case r.Name != "":
		// The id Kong gives a named route of a declarative file, so
		// that routes of equal priority are matched in Kong's order
		// (by id) and counters keyed by route id are Kong's.
		r.ID = p.markGenerated(kongid.Declarative("routes", r.Name))
	default:
		r.ID = p.genID("route", path)
	}
	p.cfg.Routes = append(p.cfg.Routes, r)
	for i, pl := range o.list("plugins") {
		p.plugin(pl, index(o.field("plugins"), i), scope{route: r})
	}
	o.finish()
}

// timestamps accepts the created_at and updated_at every Kong entity may
// carry (Unix seconds); sluice has no use for them.
func timestamps(o *obj) {
	o.integer("created_at", 0, 0, 1<<53)
	o.integer("updated_at", 0, 0, 1<<53)
}

// validSNI reports whether s is a host name (no port, no address) with an
// optional leading wildcard label.
// validSNI checks a route's sni as Kong's wildcard_host type: a host name
// without a port, not an IP, with at most one "*", as its first or last
// character ("*.example.com", "*example.com", "example.*").
func validSNI(s string) bool {
	name := s
	if i := strings.IndexByte(s, '*'); i >= 0 {
		if strings.Count(s, "*") > 1 || (i != 0 && i != len(s)-1) {
			return false
		}
		name = strings.Replace(s, "*", "wildcard", 1)
	}
	if net.ParseIP(name) != nil || strings.ContainsAny(name, ":") {
		return false
	}
	return validHost(name)
}

func validHost(h string) bool {
	if h == "" {
		return false
	}
	name := h
	if host, port, err := net.SplitHostPort(h); err == nil {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return false
		}
		name = host
	}
	name = strings.TrimPrefix(name, "*.")
	name = strings.TrimSuffix(name, ".*")
	if name == "" || strings.Contains(name, "*") {
		return false
	}
	if strings.Contains(name, ":") && net.ParseIP(strings.Trim(name, "[]")) == nil {
		return false // a second port, or a colon in a name
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == ':' || c == '_') {
			return false
		}
	}
	return true
}

func (p *parser) consumer(v any, path string) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	timestamps(o)
	c := &Consumer{
		ID:       o.str("id"),
		Username: o.str("username"),
		CustomID: o.str("custom_id"),
		Tags:     o.strList("tags"),
	}
	if c.Username == "" && c.CustomID == "" {
		p.errs.add(path, "at least one of these fields must be non-empty: 'custom_id', 'username'")
	}
	for i, g := range o.list("groups") {
		gp := index(o.field("groups"), i)
		ref := refValue(g, gp, p.errs)
		if ref != "" {
			p.memberRefs = append(p.memberRefs, pendingMember{consumer: c, ref: ref, path: gp})
		}
	}
	if c.ID == "" {
		key := "u:" + c.Username
		if c.Username == "" {
			key = "c:" + c.CustomID
		}
		c.ID = p.genID("consumer", key)
	}
	p.credentials(c, o)
	p.cfg.Consumers = append(p.cfg.Consumers, c)
	for i, pl := range o.list("plugins") {
		p.plugin(pl, index(o.field("plugins"), i), scope{consumer: c})
	}
	o.finish()
}

// refValue reads a list element that references an entity: a string or a
// mapping with one of id, name, username, custom_id.
func refValue(v any, path string, errs *errList) string {
	if s, ok := v.(string); ok && s != "" {
		return s
	}
	o := asObj(v, path, errs)
	if o == nil {
		return ""
	}
	s := ""
	for _, k := range []string{"id", "name", "username", "custom_id"} {
		if x := o.str(k); x != "" && s == "" {
			s = x
		}
	}
	o.finish()
	if s == "" {
		errs.add(path, "reference needs an id, a name or a username")
	}
	return s
}

func (p *parser) group(v any, path string) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	timestamps(o)
	g := &ConsumerGroup{ID: o.str("id"), Name: o.str("name"), Tags: o.strList("tags")}
	if g.Name == "" {
		p.errs.add(o.field("name"), "required field missing")
	}
	if g.ID == "" {
		g.ID = p.genID("consumer_group", g.Name)
	}
	p.cfg.ConsumerGroups = append(p.cfg.ConsumerGroups, g)
	for i, c := range o.list("consumers") {
		cp := index(o.field("consumers"), i)
		if ref := refValue(c, cp, p.errs); ref != "" {
			p.memberRefs = append(p.memberRefs, pendingMember{group: g, ref: ref, path: cp})
		}
	}
	for i, pl := range o.list("plugins") {
		p.plugin(pl, index(o.field("plugins"), i), scope{group: g})
	}
	o.finish()
}

// scope is the parent a nested plugin inherits.
type scope struct {
	service  *Service
	route    *Route
	consumer *Consumer
	group    *ConsumerGroup
}

func (p *parser) plugin(v any, path string, sc scope) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	timestamps(o)
	pl := &Plugin{
		ID:            o.str("id"),
		Name:          o.str("name"),
		InstanceName:  o.str("instance_name"),
		Enabled:       o.boolean("enabled", true),
		Config:        o.raw("config"),
		Protocols:     o.strList("protocols"),
		Tags:          o.strList("tags"),
		Service:       sc.service,
		Route:         sc.route,
		Consumer:      sc.consumer,
		ConsumerGroup: sc.group,
		Where:         path,
	}
	if pl.Config == nil && !o.has("config") {
		pl.Config = []byte("{}")
	}
	if pl.Name == "" {
		p.errs.add(o.field("name"), "required field missing")
	}
	if msg := checkUTF8Name(pl.InstanceName); msg != "" {
		p.errs.add(o.field("instance_name"), "%s", msg)
	}
	for i, pr := range pl.Protocols {
		switch pr {
		case "http", "https", "grpc", "grpcs":
		default:
			p.errs.add(index(o.field("protocols"), i), "unsupported protocol %q", pr)
		}
	}
	pp := pendingPlugin{p: pl}
	refs := []struct {
		field  string
		parent bool
		dst    *string
		dpath  *string
	}{
		{"service", sc.service != nil, &pp.service, &pp.servicePath},
		{"route", sc.route != nil, &pp.route, &pp.routePath},
		{"consumer", sc.consumer != nil, &pp.consumer, &pp.conPath},
		{"consumer_group", sc.group != nil, &pp.group, &pp.gPath},
	}
	for _, r := range refs {
		if r.parent && o.has(r.field) {
			p.errs.add(o.field(r.field), "a nested plugin is scoped to its parent %s already", strings.ReplaceAll(r.field, "_", " "))
		}
		*r.dst = o.ref(r.field)
		*r.dpath = o.field(r.field)
	}
	if o.has("ordering") {
		p.errs.add(o.field("ordering"), "dynamic plugin ordering is not supported")
	}
	o.get("ordering")
	p.plugRefs = append(p.plugRefs, pp)
	p.cfg.Plugins = append(p.cfg.Plugins, pl)
	o.finish()
}

// byRef indexes entities by the two ways a reference may name them: id,
// and name (username for a consumer) when set.
func byRef[T any](items []T, ref func(T) (id, name string)) map[string]T {
	m := make(map[string]T, 2*len(items))
	for _, it := range items {
		id, name := ref(it)
		m[id] = it
		if name != "" {
			m[name] = it
		}
	}
	return m
}

func (p *parser) resolve() {
	services := byRef(p.cfg.Services, func(s *Service) (string, string) { return s.ID, s.Name })
	routes := byRef(p.cfg.Routes, func(r *Route) (string, string) { return r.ID, r.Name })
	consumers := byRef(p.cfg.Consumers, func(c *Consumer) (string, string) { return c.ID, c.Username })
	groups := byRef(p.cfg.ConsumerGroups, func(g *ConsumerGroup) (string, string) { return g.ID, g.Name })
	for _, pr := range p.routeSvc {
		s, ok := services[pr.ref]
		if !ok {
			p.errs.add(pr.path, "no service named %q", pr.ref)
			continue
		}
		pr.ent.Service = s
	}
	for _, m := range p.memberRefs {
		if m.consumer != nil {
			g, ok := groups[m.ref]
			if !ok {
				p.errs.add(m.path, "no consumer group named %q", m.ref)
				continue
			}
			addMember(g, m.consumer)
			continue
		}
		c, ok := consumers[m.ref]
		if !ok {
			for _, x := range p.cfg.Consumers {
				if x.CustomID != "" && x.CustomID == m.ref {
					c, ok = x, true
					break
				}
			}
		}
		if !ok {
			p.errs.add(m.path, "no consumer named %q", m.ref)
			continue
		}
		addMember(m.group, c)
	}
	for _, c := range p.cfg.Consumers {
		sort.Slice(c.Groups, func(i, j int) bool { return c.Groups[i].Name < c.Groups[j].Name })
	}
	for _, pp := range p.plugRefs {
		pl := pp.p
		if pp.service != "" {
			if s, ok := services[pp.service]; ok {
				pl.Service = s
			} else {
				p.errs.add(pp.servicePath, "no service named %q", pp.service)
			}
		}
		if pp.route != "" {
			if r, ok := routes[pp.route]; ok {
				pl.Route = r
			} else {
				p.errs.add(pp.routePath, "no route named %q", pp.route)
			}
		}
		if pp.consumer != "" {
			if c, ok := consumers[pp.consumer]; ok {
				pl.Consumer = c
			} else {
				p.errs.add(pp.conPath, "no consumer named %q", pp.consumer)
			}
		}
		if pp.group != "" {
			if g, ok := groups[pp.group]; ok {
				pl.ConsumerGroup = g
			} else {
				p.errs.add(pp.gPath, "no consumer group named %q", pp.group)
			}
		}
		if pl.Consumer != nil && pl.ConsumerGroup != nil {
			p.errs.add(pl.Where, "a plugin cannot be scoped to both a consumer and a consumer group")
		}
		if pl.ID == "" {
			pl.ID = p.genID("plugin", pl.Name+"\x00"+scopeKey(pl)+"\x00"+pl.InstanceName)
		}
	}
}

func addMember(g *ConsumerGroup, c *Consumer) {
	for _, x := range c.Groups {
		if x == g {
			return
		}
	}
	c.Groups = append(c.Groups, g)
	g.Consumers = append(g.Consumers, c)
}

func scopeKey(pl *Plugin) string {
	var b strings.Builder
	if pl.Service != nil {
		b.WriteString("s=" + pl.Service.ID)
	}
	if pl.Route != nil {
		b.WriteString(",r=" + pl.Route.ID)
	}
	if pl.Consumer != nil {
		b.WriteString(",c=" + pl.Consumer.ID)
	}
	if pl.ConsumerGroup != nil {
		b.WriteString(",g=" + pl.ConsumerGroup.ID)
	}
	return b.String()
}

func (p *parser) checkUnique() {
	seen := map[string]string{}
	once := func(kind, key, path string) {
		if key == "" || p.generated[key] {
			return
		}
		k := kind + "\x00" + key
		if prev, ok := seen[k]; ok {
			p.errs.add(path, "duplicate %s %q (also at %s)", kind, key, prev)
			return
		}
		seen[k] = path
	}
	onceSecret := func(kind, key, path string) {
		if key == "" {
			return
		}
		k := kind + "\x00" + key
		if prev, ok := seen[k]; ok {
			p.errs.add(path, "duplicate %s (also at %s)", kind, prev)
			return
		}
		seen[k] = path
	}
	for i, s := range p.cfg.Services {
		once("service id", s.ID, index("services", i))
		once("service name", s.Name, index("services", i))
	}
	for _, r := range p.cfg.Routes {
		once("route id", r.ID, r.Where)
		once("route name", r.Name, r.Where)
	}
	for i, c := range p.cfg.Consumers {
		at := index("consumers", i)
		once("consumer id", c.ID, at)
		once("consumer username", c.Username, at)
		once("consumer custom_id", c.CustomID, at)
		for _, k := range c.KeyAuthKeys {
			// The key is a secret: the message names where, not what.
			onceSecret("key-auth key", k.Key, k.where)
			once("key-auth credential id", k.ID, k.where)
		}
		for _, b := range c.BasicAuth {
			once("basic-auth username", b.Username, b.where)
			once("basic-auth credential id", b.ID, b.where)
		}
		for _, s := range c.JWTSecrets {
			once("jwt key", s.Key, s.where)
			once("jwt secret id", s.ID, s.where)
		}
		for _, a := range c.ACLs {
			once("acl id", a.ID, a.where)
		}
	}
	for i, g := range p.cfg.ConsumerGroups {
		once("consumer group id", g.ID, index("consumer_groups", i))
		once("consumer group name", g.Name, index("consumer_groups", i))
	}
	for _, pl := range p.cfg.Plugins {
		once("plugin id", pl.ID, pl.Where)
		once("plugin instance_name", pl.InstanceName, pl.Where)
		if pl.Name != "" {
			once("plugin", pl.Name+" on "+describeScope(pl), pl.Where)
		}
	}
}

func describeScope(pl *Plugin) string {
	var parts []string
	if pl.Service != nil {
		parts = append(parts, "service "+nameOr(pl.Service.Name, pl.Service.ID))
	}
	if pl.Route != nil {
		parts = append(parts, "route "+nameOr(pl.Route.Name, pl.Route.ID))
	}
	if pl.Consumer != nil {
		parts = append(parts, "consumer "+nameOr(pl.Consumer.Username, pl.Consumer.ID))
	}
	if pl.ConsumerGroup != nil {
		parts = append(parts, "consumer group "+pl.ConsumerGroup.Name)
	}
	if len(parts) == 0 {
		return "global scope"
	}
	return strings.Join(parts, ", ")
}

func nameOr(name, id string) string {
	if name != "" {
		return name
	}
	return id
}

func joinHostPort(host string, port int) string {
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// String describes the plugin and its scope, for logs.
func (pl *Plugin) String() string {
	return fmt.Sprintf("%s (%s)", pl.Name, describeScope(pl))
}

// checkUTF8Name checks s as Kong's utf8_name type (instance_name): ASCII
// letters, digits, '.', '-', '_' and '~', and any non-ASCII UTF-8.
func checkUTF8Name(s string) string {
	if !utf8.ValidString(s) {
		return "invalid utf-8 character sequence"
	}
	for _, r := range s {
		if r < utf8.RuneSelf && !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || strings.ContainsRune(".-_~", r)) {
			return "invalid value '" + s + "': the only accepted ascii characters are alphanumerics or ., -, _, and ~"
		}
	}
	return ""
}

// checkRouterPath checks a route path as Kong's router_path type does and
// returns Kong's message, or "": a prefix path starts with "/" and is in
// the form kongpath.Normalize gives (a request path, normalised, could
// never start with any other), a regex path with "~/" and compiles;
// neither has an empty segment or a malformed percent-encoding. A
// message quotes the path whole, so that one resolved from a reference
// is shown as the reference; for such a path (secret) it suggests no
// normal form.
func checkRouterPath(ps string, secret bool) string {
	switch {
	case !strings.HasPrefix(ps, "/") && !strings.HasPrefix(ps, "~/"):
		return fmt.Sprintf("should start with: / (fixed path) or ~/ (regex path), got %q", ps)
	case strings.Contains(ps, "//"):
		return fmt.Sprintf("must not have empty segments, got %q", ps)
	}
	if bad := kongpath.ValidEncoding(ps); bad != "" {
		return fmt.Sprintf("invalid url-encoded value: '%s'", bad)
	}
	if re, ok := strings.CutPrefix(ps, "~"); ok {
		if _, err := regexp.Compile(re); err != nil {
			why := "does not compile"
			var se *syntax.Error
			if errors.As(err, &se) {
				why = string(se.Code)
			}
			return fmt.Sprintf("invalid regex %q: %s", ps, why)
		}
		return ""
	}
	if n := kongpath.Normalize(ps); n != ps {
		if secret {
			return "non-normalized path"
		}
		return fmt.Sprintf("non-normalized path, consider use '%s' instead", n)
	}
	return ""
}

// upperLetters reports whether s is one or more of A-Z.
func upperLetters(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return s != ""
}
