package gateway

import (
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// basicAuthConfig is Kong's basic-auth config.
type basicAuthConfig struct {
	Anonymous       string  `json:"anonymous"`
	HideCredentials bool    `json:"hide_credentials"`
	Realm           *string `json:"realm"`
}

// basicAuth is Kong's basic-auth plugin (priority 1100): it identifies the
// consumer from a username and password in Proxy-Authorization, then
// Authorization ("Basic base64(user:password)"), checked against the
// consumers' basicauth_credentials.
type basicAuth struct {
	hide      bool
	anonymous *kongconf.Consumer
	wwwAuth   string
	byUser    map[string]basicOwner
}

type basicOwner struct {
	consumer *kongconf.Consumer
	cred     *kongconf.BasicAuthCredential
}

func newBasicAuth(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c basicAuthConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	realm := "service"
	if c.Realm != nil {
		realm = *c.Realm
	}
	b := &basicAuth{hide: c.HideCredentials, wwwAuth: `Basic realm="` + realm + `"`, byUser: map[string]basicOwner{}}
	for _, con := range env.Config.Consumers {
		for i := range con.BasicAuth {
			b.byUser[con.BasicAuth[i].Username] = basicOwner{con, &con.BasicAuth[i]}
		}
	}
	anon, errs := anonymousConsumer(env.Config, c.Anonymous)
	b.anonymous = anon
	errs = append(errs, noConsumerScope(env)...)
	if len(errs) > 0 {
		return nil, kongconf.Errors(errs)
	}
	return b, nil
}

var (
	basicScheme = regexp.MustCompile(`\s*[Bb]asic\s*(.+)`)
	basicPair   = regexp.MustCompile(`([^:]+):(.*)`)
)

// basicCredentials reads a username and password from a header value as
// Kong does; ok is false when the value holds none.
func basicCredentials(v string) (user, password string, ok bool) {
	m := basicScheme.FindStringSubmatch(v)
	if m == nil {
		return "", "", false
	}
	dec, err := base64.StdEncoding.DecodeString(m[1])
	if err != nil {
		// nginx's decoder also takes base64 without its padding.
		dec, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(m[1], "="))
		if err != nil {
			return "", "", false
		}
	}
	p := basicPair.FindStringSubmatch(string(dec))
	if p == nil {
		return "", "", false
	}
	return p[1], p[2], true
}

func (b *basicAuth) Access(x *Exchange) error {
	if b.anonymous != nil && x.Credential != "" {
		return nil // authenticated by an earlier auth plugin: logical OR
	}
	h := &x.ctx.Request.Header
	authz, hasAuthz := h.Peek("Authorization"), h.Peek("Authorization") != nil
	proxyAuthz, hasProxy := h.Peek("Proxy-Authorization"), h.Peek("Proxy-Authorization") != nil
	owner, ok := b.check(x, string(authz), string(proxyAuthz), hasAuthz || hasProxy)
	if ok {
		authenticate(x, "basic-auth", owner.consumer, owner.cred.ID, owner.cred.Username)
		return nil
	}
	if b.anonymous != nil {
		authenticate(x, "basic-auth", b.anonymous, "", "")
		return nil
	}
	x.SetResponseHeader("WWW-Authenticate", b.wwwAuth)
	x.RespondError(401, "Unauthorized")
	x.Outcome("basic-auth", "unauthorized")
	return nil
}

// check finds the credential of the request: Proxy-Authorization first,
// then Authorization, each removed with hide_credentials once read.
func (b *basicAuth) check(x *Exchange, authz, proxyAuthz string, any bool) (basicOwner, bool) {
	if !any {
		return basicOwner{}, false
	}
	var owner basicOwner
	found := false
	user, pass, ok := basicCredentials(proxyAuthz)
	if b.hide {
		x.DelHeader("Proxy-Authorization")
	}
	if ok {
		owner, found = b.byUser[user]
	}
	if !found {
		user, pass, ok = basicCredentials(authz)
		if b.hide {
			x.DelHeader("Authorization")
		}
		if !ok {
			return basicOwner{}, false
		}
		owner, found = b.byUser[user]
	}
	if !found {
		return basicOwner{}, false
	}
	digest := kongconf.BasicAuthHash(owner.consumer.ID, pass)
	if subtle.ConstantTimeCompare([]byte(digest), []byte(owner.cred.PasswordHash)) != 1 {
		return basicOwner{}, false
	}
	return owner, true
}
