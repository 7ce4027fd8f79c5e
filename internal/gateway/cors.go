package gateway

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityCORS is Kong's cors PRIORITY.
const PriorityCORS = 2000

// corsMethods are the methods Kong's cors accepts, and its default list.
var corsMethods = []string{"GET", "HEAD", "PUT", "PATCH", "POST", "DELETE", "OPTIONS", "TRACE", "CONNECT"}

// plainOrigin is what Kong takes for an origin that is not a regex.
var plainOrigin = regexp.MustCompile(`^[A-Za-z0-9.:/-]+$`)

// cors is Kong's cors plugin. A preflight (OPTIONS with Origin and
// Access-Control-Request-Method) is answered 200 with the
// Access-Control-Allow-* headers, unless preflight_continue proxies it;
// other responses get Access-Control-Allow-Origin (and -Credentials,
// -Expose-Headers, Vary: Origin) in the response phase.
type cors struct {
	allowAll      bool   // no origins, or only "*"
	single        string // one plain origin, sent as it is
	origins       []corsOrigin
	headers       string // Access-Control-Allow-Headers, "" to echo the request's
	exposed       string // Access-Control-Expose-Headers
	methods       string // Access-Control-Allow-Methods
	maxAge        string // Access-Control-Max-Age, "" for none
	credentials   bool
	privateNet    bool
	continueFirst bool // preflight_continue
	originAbsent  bool // allow_origin_absent
}

// corsOrigin is one configured origin: a normalized origin compared
// exactly, or a regex matched against the request origin's host (when
// the pattern has no ':') or its normalized origin.
type corsOrigin struct {
	domain string
	re     *regexp.Regexp
	byHost bool
}

type corsConfig struct {
	Origins           []string `json:"origins"`
	Headers           []string `json:"headers"`
	ExposedHeaders    []string `json:"exposed_headers"`
	Methods           []string `json:"methods"`
	MaxAge            *float64 `json:"max_age"`
	Credentials       bool     `json:"credentials"`
	PrivateNetwork    bool     `json:"private_network"`
	PreflightContinue bool     `json:"preflight_continue"`
	AllowOriginAbsent *bool    `json:"allow_origin_absent"`
}

func newCORS(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c corsConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	errs := noConsumer(env)
	p := &cors{
		credentials:   c.Credentials,
		privateNet:    c.PrivateNetwork,
		continueFirst: c.PreflightContinue,
		originAbsent:  c.AllowOriginAbsent == nil || *c.AllowOriginAbsent,
		headers:       strings.Join(c.Headers, ","),
		exposed:       strings.Join(c.ExposedHeaders, ","),
	}
	if c.Methods == nil {
		c.Methods = corsMethods
	}
	for i, m := range c.Methods {
		if !contains(corsMethods, m) {
			errs = append(errs, field.Error{Path: fmt.Sprintf("config.methods[%d]", i), Message: "expected one of: " + strings.Join(corsMethods, ", ")})
		}
	}
	p.methods = strings.Join(c.Methods, ",")
	if c.MaxAge != nil {
		p.maxAge = strconv.FormatFloat(*c.MaxAge, 'f', -1, 64)
	}
	switch {
	case len(c.Origins) == 0 || len(c.Origins) == 1 && c.Origins[0] == "*":
		p.allowAll = true
	case len(c.Origins) == 1 && plainOrigin.MatchString(c.Origins[0]):
		p.single = c.Origins[0]
	}
	for i, o := range c.Origins {
		switch {
		case o == "*":
			if len(c.Origins) > 1 {
				// Kong answers "*" once a request with an Origin reaches this
				// entry; sluice does the same.
				p.origins = append(p.origins, corsOrigin{domain: "*"})
			}
		case plainOrigin.MatchString(o):
			p.origins = append(p.origins, corsOrigin{domain: normalizeOrigin(o).domain, byHost: !strings.Contains(o, ":")})
		default:
			// Kong anchors the end and drops a leading ^ then matches with
			// the anchored flag: the pattern must match from the start.
			pat := o
			if !strings.HasSuffix(pat, "$") {
				pat += "$"
			}
			pat = strings.TrimPrefix(pat, "^")
			re, err := regexp.Compile("^(?:" + pat + ")")
			if err != nil {
				errs = append(errs, field.Error{Path: fmt.Sprintf("config.origins[%d]", i), Message: fmt.Sprintf("'%s' is not a valid regex (sluice uses RE2 syntax: no look-around, back-references or possessive quantifiers)", o)})
				continue
			}
			p.origins = append(p.origins, corsOrigin{re: re, byHost: !strings.Contains(o, ":")})
		}
	}
	if len(errs) > 0 {
		return nil, kongconf.Errors(errs)
	}
	return p, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

type normalizedOrigin struct{ domain, host string }

// normalizeOrigin is Kong's: scheme://host[:port] without a default port,
// or the string itself when it has no host.
func normalizeOrigin(s string) normalizedOrigin {
	u, err := url.Parse(s)
	if err != nil || u.Host == "" {
		return normalizedOrigin{domain: s, host: s}
	}
	host, port := u.Hostname(), u.Port()
	if (u.Scheme == "http" && port == "80") || (u.Scheme == "https" && port == "443") {
		port = ""
	}
	d := host
	if u.Scheme != "" {
		d = u.Scheme + "://" + host
	}
	if port != "" {
		d += ":" + port
	}
	return normalizedOrigin{domain: d, host: host}
}

// originHeaders sets Access-Control-Allow-Origin (and Vary) through set
// and vary; it reports whether every origin is allowed ("*").
func (p *cors) originHeaders(origin string, set func(k, v string), del func(k string), vary func()) bool {
	if p.allowAll {
		set("Access-Control-Allow-Origin", "*")
		return true
	}
	vary()
	if p.single != "" {
		set("Access-Control-Allow-Origin", p.single)
		return false
	}
	if origin != "" {
		req := normalizeOrigin(origin)
		for _, o := range p.origins {
			if o.domain == "*" {
				set("Access-Control-Allow-Origin", "*")
				return true
			}
			var ok bool
			if o.re != nil {
				subject := req.domain
				if o.byHost {
					subject = req.host
				}
				ok = o.re.MatchString(subject)
			} else {
				ok = req.domain == o.domain
			}
			if ok {
				set("Access-Control-Allow-Origin", req.domain)
				return false
			}
		}
	}
	del("Access-Control-Allow-Origin")
	return false
}

func (p *cors) credentialHeaders(allowAll bool, origin string, set func(k, v string), vary func()) {
	if !p.credentials {
		return
	}
	if !allowAll {
		set("Access-Control-Allow-Credentials", "true")
		return
	}
	// "*" cannot go with credentials: the request's origin is echoed.
	if origin != "" {
		vary()
		set("Access-Control-Allow-Origin", origin)
		set("Access-Control-Allow-Credentials", "true")
	}
}

func (p *cors) Access(x *Exchange) error {
	origin := x.Header("Origin")
	if x.Method() != "OPTIONS" || origin == "" || x.Header("Access-Control-Request-Method") == "" {
		return nil
	}
	x.corsPreflight = true // no response headers from the response phase
	if p.continueFirst {
		return nil
	}
	set := x.SetResponseHeader
	del := func(k string) { x.dropResponseHeader(k) }
	vary := func() { x.SetResponseHeader("Vary", "Origin") }
	allowAll := p.originHeaders(origin, set, del, vary)
	p.credentialHeaders(allowAll, origin, set, vary)
	switch {
	case p.headers != "":
		set("Access-Control-Allow-Headers", p.headers)
	case x.Header("Access-Control-Request-Headers") != "":
		set("Access-Control-Allow-Headers", x.Header("Access-Control-Request-Headers"))
	}
	set("Access-Control-Allow-Methods", p.methods)
	if p.maxAge != "" {
		set("Access-Control-Max-Age", p.maxAge)
	}
	if p.privateNet && x.Header("Access-Control-Request-Private-Network") == "true" {
		set("Access-Control-Allow-Private-Network", "true")
	}
	x.Respond(200, "", nil)
	x.Outcome("cors", "preflight")
	return nil
}

// Filter adds the CORS headers to every response but a preflight's.
func (p *cors) Filter(x *Exchange) {
	if x.corsPreflight {
		return
	}
	origin := x.Header("Origin")
	if origin == "" && !p.originAbsent {
		return
	}
	h := &x.ctx.Response.Header
	set := func(k, v string) { h.Set(k, v) }
	del := func(k string) { h.Del(k) }
	vary := func() { h.Add("Vary", "Origin") }
	allowAll := p.originHeaders(origin, set, del, vary)
	p.credentialHeaders(allowAll, origin, set, vary)
	if p.exposed != "" {
		h.Set("Access-Control-Expose-Headers", p.exposed)
	}
}
