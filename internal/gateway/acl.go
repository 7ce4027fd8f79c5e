package gateway

import (
	"encoding/json"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// aclConfig is Kong's acl config.
type aclConfig struct {
	Allow                        []string `json:"allow"`
	Deny                         []string `json:"deny"`
	HideGroupsHeader             bool     `json:"hide_groups_header"`
	AlwaysUseAuthenticatedGroups bool     `json:"always_use_authenticated_groups"`
}

// acl is Kong's acl plugin (priority 950): it lets through, or stops, the
// consumer an authentication plugin found by the groups of its acls
// entries (not its consumer groups). A request without a consumer gets
// 401; one whose consumer the rule refuses, 403. The groups are sent
// upstream in X-Consumer-Groups unless hide_groups_header.
//
// Kong's "authenticated groups" (set by LDAP and OpenID Connect plugins,
// which sluice does not implement) never exist here, so
// always_use_authenticated_groups is accepted and changes nothing.
type acl struct {
	deny   bool
	groups map[string]bool
	hide   bool
}

func newACL(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c aclConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs []field.Error
	switch {
	case len(c.Allow) > 0 && len(c.Deny) > 0:
		errs = append(errs, field.Error{Path: "config", Message: "only one of these fields must be non-empty: 'config.allow', 'config.deny'"})
	case len(c.Allow) == 0 && len(c.Deny) == 0:
		errs = append(errs, field.Error{Path: "config", Message: "at least one of these fields must be non-empty: 'config.allow', 'config.deny'"})
	}
	errs = append(errs, noConsumerScope(env)...)
	if len(errs) > 0 {
		return nil, kongconf.Errors(errs)
	}
	a := &acl{deny: len(c.Deny) > 0, groups: map[string]bool{}, hide: c.HideGroupsHeader}
	list := c.Allow
	if a.deny {
		list = c.Deny
	}
	for _, g := range list {
		a.groups[g] = true
	}
	return a, nil
}

func (a *acl) Access(x *Exchange) error {
	c := x.Consumer
	if c == nil {
		x.RespondError(401, "Unauthorized")
		x.Outcome("acl", "unauthorized")
		return nil
	}
	if len(c.ACLs) == 0 && !a.deny {
		if x.Credential != "" {
			a.forbid(x)
			return nil
		}
		x.RespondError(401, "Unauthorized") // the anonymous consumer
		x.Outcome("acl", "unauthorized")
		return nil
	}
	in := false
	names := make([]string, len(c.ACLs))
	for i, g := range c.ACLs {
		names[i] = g.Group
		if a.groups[g.Group] {
			in = true
		}
	}
	if in == a.deny {
		a.forbid(x)
		return nil
	}
	if a.hide {
		// Nor the consumer groups an auth plugin sent.
		x.DelHeader("X-Consumer-Groups")
	} else {
		// An empty value when the consumer has no groups, as Kong sends.
		x.SetUpstreamHeader("X-Consumer-Groups", strings.Join(names, ", "))
	}
	x.Outcome("acl", "allowed")
	return nil
}

func (a *acl) forbid(x *Exchange) {
	x.RespondError(403, "You cannot consume this service")
	x.Outcome("acl", "denied")
}
