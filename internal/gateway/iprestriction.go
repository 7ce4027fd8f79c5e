package gateway

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// PriorityIPRestriction is Kong's ip-restriction PRIORITY.
const PriorityIPRestriction = 990

// ipRestriction is Kong's ip-restriction plugin: a client address in deny
// is rejected, then, when allow is set, one outside allow is. The client
// address is the one the gateway resolved (trusted proxies, real IP
// header), as Kong's is.
type ipRestriction struct {
	allow, deny []netip.Prefix
	status      int
	message     string
}

type ipRestrictionConfig struct {
	Allow   []string `json:"allow"`
	Deny    []string `json:"deny"`
	Status  *float64 `json:"status"`
	Message *string  `json:"message"`
}

func newIPRestriction(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c ipRestrictionConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs kongconf.Errors
	p := &ipRestriction{status: 403, message: "Your IP address is not allowed"}
	if len(c.Allow) == 0 && len(c.Deny) == 0 {
		errs = append(errs, field.Error{Path: "config", Message: "at least one of these fields must be non-empty: 'config.allow', 'config.deny'"})
	}
	parse := func(name string, list []string) []netip.Prefix {
		var out []netip.Prefix
		for i, s := range list {
			pf, ok := parseIPOrCIDR(s)
			if !ok {
				errs = append(errs, field.Error{Path: fmt.Sprintf("config.%s[%d]", name, i), Message: fmt.Sprintf("invalid ip or cidr range: '%s'", s)})
				continue
			}
			out = append(out, pf)
		}
		return out
	}
	p.allow, p.deny = parse("allow", c.Allow), parse("deny", c.Deny)
	if c.Status != nil {
		st := int(*c.Status)
		if float64(st) != *c.Status || st < 100 || st > 599 {
			// Kong accepts any number and fails each request at run time.
			errs = append(errs, field.Error{Path: "config.status", Message: "must be an HTTP status code between 100 and 599"})
		}
		p.status = st
	}
	if c.Message != nil {
		p.message = *c.Message
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return p, nil
}

// parseIPOrCIDR reads an address ("10.0.0.1", "::1") or a CIDR range
// ("10.0.0.0/8"); host bits of a range are ignored, as Kong's ipmatcher
// ignores them.
func parseIPOrCIDR(s string) (netip.Prefix, bool) {
	if strings.Contains(s, "/") {
		pf, err := netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, false
		}
		return pf.Masked(), true
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, a.BitLen()), true
}

func matchesAny(list []netip.Prefix, a netip.Addr) bool {
	for _, pf := range list {
		if pf.Contains(a) {
			return true
		}
		if a.Is4In6() && pf.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

func (p *ipRestriction) Access(x *Exchange) error {
	ip := x.ClientIP
	if !ip.IsValid() {
		x.RespondError(403, "Cannot identify the client IP address, unix domain sockets are not supported.")
		x.Outcome("ip-restriction", "denied")
		return nil
	}
	if (len(p.deny) > 0 && matchesAny(p.deny, ip)) || (len(p.allow) > 0 && !matchesAny(p.allow, ip)) {
		x.RespondError(p.status, p.message)
		x.Outcome("ip-restriction", "denied")
		return nil
	}
	x.Outcome("ip-restriction", "allowed")
	return nil
}
