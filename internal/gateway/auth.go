package gateway

import (
	"fmt"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// What every authentication plugin (key-auth, basic-auth, jwt) shares, as
// Kong's do:
//
//   - success sets the consumer and credential (which the rate-limiting
//     identifiers consumer and credential then use) and the upstream
//     headers X-Consumer-ID, X-Consumer-Custom-ID, X-Consumer-Username,
//     X-Credential-Identifier and X-Consumer-Groups, removing
//     X-Anonymous-Consumer;
//   - with config.anonymous, a failure authenticates the anonymous
//     consumer instead (no credential, X-Anonymous-Consumer: true), and a
//     request some earlier auth plugin authenticated with a credential is
//     left alone: several auth plugins with anonymous are alternatives
//     ("logical OR"); without anonymous each one must pass ("logical AND").

// authenticate sets the consumer and the upstream headers. credID is the
// credential's id (the rate-limiting "credential" identifier) and
// credHeader the X-Credential-Identifier value, both "" for the anonymous
// consumer.
func authenticate(x *Exchange, plugin string, c *kongconf.Consumer, credID, credHeader string) {
	x.Consumer, x.Credential = c, credID
	h := &x.ctx.Request.Header
	h.Set("X-Consumer-ID", c.ID)
	setOrDel(h.Set, h.Del, "X-Consumer-Custom-ID", c.CustomID)
	setOrDel(h.Set, h.Del, "X-Consumer-Username", c.Username)
	setOrDel(h.Set, h.Del, "X-Credential-Identifier", credHeader)
	if len(c.Groups) > 0 {
		names := make([]string, len(c.Groups))
		for i, g := range c.Groups {
			names[i] = g.Name
		}
		h.Set("X-Consumer-Groups", strings.Join(names, ", "))
	} else {
		h.Del("X-Consumer-Groups")
	}
	if credID == "" {
		h.Set("X-Anonymous-Consumer", "true")
		x.Outcome(plugin, "anonymous")
	} else {
		h.Del("X-Anonymous-Consumer")
		x.Outcome(plugin, "authenticated")
	}
}

func setOrDel(set func(k, v string), del func(k string), name, v string) {
	if v == "" {
		del(name)
		return
	}
	set(name, v)
}

// anonymousConsumer finds config.anonymous (a consumer id or username, as
// Kong looks it up); a name no consumer has is a config error here, where
// Kong answers 500 to every request that needs it.
func anonymousConsumer(cfg *kongconf.Config, ref string) (*kongconf.Consumer, []field.Error) {
	if ref == "" {
		return nil, nil
	}
	for _, c := range cfg.Consumers {
		if c.ID == ref {
			return c, nil
		}
	}
	for _, c := range cfg.Consumers {
		if c.Username == ref {
			return c, nil
		}
	}
	return nil, []field.Error{{Path: "config.anonymous", Message: fmt.Sprintf("no consumer %q (want a consumer id or username)", ref)}}
}

// noConsumerScope is Kong's no_consumer rule of the auth plugins: they
// cannot be scoped to a consumer, whom they are to find.
func noConsumerScope(env *BuildEnv) []field.Error {
	if env.Entity != nil && env.Entity.Consumer != nil {
		return []field.Error{{Path: "consumer", Message: "value must be null"}}
	}
	return nil
}
