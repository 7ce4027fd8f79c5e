package gateway

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// decodeStrict decodes a plugin config object into dst, rejecting unknown
// fields and wrong types with errors naming "config.<field>".
func decodeStrict(raw json.RawMessage, dst any) error {
	if err := field.Decode("config", raw, dst); err != nil {
		return kongconf.Errors{err.(field.Error)}
	}
	return nil
}

// keyAuthConfig is Kong's key-auth config.
type keyAuthConfig struct {
	KeyNames        []string `json:"key_names"`
	HideCredentials bool     `json:"hide_credentials"`
	Anonymous       string   `json:"anonymous"`
	KeyInHeader     *bool    `json:"key_in_header"`
	KeyInQuery      *bool    `json:"key_in_query"`
	KeyInBody       bool     `json:"key_in_body"`
	RunOnPreflight  *bool    `json:"run_on_preflight"`
	Realm           string   `json:"realm"`
}

// keyAuth is Kong's key-auth plugin (priority 1250): it identifies the
// consumer from an API key in a header or query argument.
type keyAuth struct {
	names      []string
	hide       bool
	inHeader   bool
	inQuery    bool
	preflight  bool
	anonymous  *kongconf.Consumer
	realm      string
	byKey      map[string]keyOwner
	authHeader string
}

type keyOwner struct {
	consumer *kongconf.Consumer
	credID   string
}

func newKeyAuth(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c keyAuthConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	if c.KeyNames == nil {
		c.KeyNames = []string{"apikey"}
	}
	if len(c.KeyNames) == 0 {
		errs = append(errs, field.Error{Path: "config.key_names", Message: "length must be at least 1"})
	}
	for i, n := range c.KeyNames {
		if n == "" || strings.ContainsAny(n, " \t\r\n:") {
			errs = append(errs, field.Error{Path: fmt.Sprintf("config.key_names[%d]", i), Message: fmt.Sprintf("invalid header or query name %q", n)})
		}
	}
	if c.KeyInBody {
		errs = append(errs, field.Error{Path: "config.key_in_body", Message: "keys in the request body are not supported"})
	}
	k := &keyAuth{
		names:     c.KeyNames,
		hide:      c.HideCredentials,
		inHeader:  c.KeyInHeader == nil || *c.KeyInHeader,
		inQuery:   c.KeyInQuery == nil || *c.KeyInQuery,
		preflight: c.RunOnPreflight == nil || *c.RunOnPreflight,
		realm:     c.Realm,
		byKey:     map[string]keyOwner{},
	}
	if k.realm == "" {
		k.realm = "kong"
	}
	k.authHeader = `Key realm="` + k.realm + `"`
	for _, con := range env.Config.Consumers {
		for _, cr := range con.KeyAuthKeys {
			if cr.Key != "" {
				k.byKey[cr.Key] = keyOwner{con, cr.ID}
			}
		}
	}
	anon, aerrs := anonymousConsumer(env.Config, c.Anonymous)
	k.anonymous = anon
	errs = append(errs, aerrs...)
	errs = append(errs, noConsumerScope(env)...)
	if len(errs) > 0 {
		return nil, errs
	}
	return k, nil
}

func (k *keyAuth) Access(x *Exchange) error {
	if !k.preflight && x.Method() == "OPTIONS" {
		return nil
	}
	if k.anonymous != nil && x.Credential != "" {
		return nil // authenticated by an earlier auth plugin: logical OR
	}
	var key, name string
	dup := false
	for _, n := range k.names {
		if k.inHeader {
			if vs := x.ctx.Request.Header.PeekAll(n); len(vs) > 0 {
				key, name, dup = string(vs[0]), n, len(vs) > 1
				break
			}
		}
		if k.inQuery {
			if vs := x.ctx.QueryArgs().PeekMulti(n); len(vs) > 0 {
				key, name, dup = string(vs[0]), n, len(vs) > 1
				break
			}
		}
	}
	fail := func(msg string) {
		if k.anonymous != nil {
			authenticate(x, "key-auth", k.anonymous, "", "")
			return
		}
		x.SetResponseHeader("WWW-Authenticate", k.authHeader)
		x.RespondError(401, msg)
		x.Outcome("key-auth", "unauthorized")
	}
	switch {
	case dup:
		fail("Duplicate API key found")
		return nil
	case key == "":
		fail("No API key found in request")
		return nil
	}
	owner, ok := k.byKey[key]
	if !ok {
		fail("Unauthorized")
		return nil
	}
	if k.hide {
		// Kong clears the name from both the headers and the query.
		x.DelHeader(name)
		if x.HasQuery(name) {
			x.DelQuery(name)
		}
	}
	authenticate(x, "key-auth", owner.consumer, owner.credID, owner.credID)
	return nil
}
