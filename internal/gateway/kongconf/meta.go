package kongconf

import (
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/kongpath"
	"github.com/seed-008287da/sluice/policy/field"
)

// Info is what a file says about itself: decK's _info and Kong's
// _workspace and _transform.
type Info struct {
	// SelectTags are decK's _info.select_tags. decK uses them to pick the
	// entities of a file in a shared Kong; sluice serves only the file, so
	// they are kept for reference.
	SelectTags []string
	// ConsumerGroupPolicyOverrides is decK's
	// _info.consumer_group_policy_overrides: rate-limiting-advanced under
	// consumer_groups[].plugins are legacy group overrides (as the
	// gateway's GroupPolicyOverrides option).
	ConsumerGroupPolicyOverrides bool
	// Workspace is _workspace; sluice serves one workspace whatever its
	// name.
	Workspace string
	// Transform is _transform (default true). When false, basic-auth
	// passwords in the file are Kong's stored hashes, not plain text.
	Transform bool
}

// formatVersions are the _format_version values Kong 3.x reads.
var formatVersions = []string{"1.1", "2.1", "3.0"}

// deckDefaults are the entity kinds _info.defaults may give defaults for.
var deckDefaults = map[string][]string{
	"service":  {"services"},
	"route":    {"routes", "services[].routes"},
	"upstream": {"upstreams"},
	"target":   {"upstreams[].targets", "targets"},
}

// meta reads the top-level fields that are not entities and prepares the
// tree: _info.defaults are filled into the entities, and route paths of a
// 1.1 or 2.1 file are migrated to 3.0.
func (p *parser) meta(root *obj) {
	v := root.str("_format_version")
	switch {
	case !root.has("_format_version"):
		p.errs.add("_format_version", "required field missing (want one of: %s)", strings.Join(formatVersions, ", "))
	case !contains(formatVersions, v):
		p.errs.add("_format_version", "unsupported version %q (want one of: %s)", v, strings.Join(formatVersions, ", "))
	}
	p.cfg.FormatVersion = v
	p.cfg.Info.Transform = root.boolean("_transform", true)
	p.cfg.Info.Workspace = root.str("_workspace")
	root.str("_comment")
	root.get("_ignore") // Kong's: anything, ignored
	if kv, ok := root.get("_konnect"); ok {
		// decK's Konnect target (control_plane_name, runtime_group_name):
		// which Konnect control plane a sync goes to, nothing sluice serves.
		if ko := asObj(kv, "_konnect", p.errs); ko != nil {
			ko.str("control_plane_name")
			ko.str("runtime_group_name")
			ko.finish()
		}
	}
	if iv, ok := root.get("_info"); ok {
		if io := asObj(iv, "_info", p.errs); io != nil {
			p.cfg.Info.SelectTags = io.strList("select_tags")
			p.cfg.Info.ConsumerGroupPolicyOverrides = io.boolean("consumer_group_policy_overrides", false)
			if lt, ok := io.get("default_lookup_tags"); ok {
				// Tags decK uses to find entities outside the file in a
				// shared Kong; a standalone gateway has none.
				if lo := asObj(lt, "_info.default_lookup_tags", p.errs); lo != nil {
					for _, k := range []string{"consumers", "consumer_groups", "routes", "services"} {
						lo.strList(k)
					}
					lo.finish()
				}
			}
			if dv, ok := io.get("defaults"); ok {
				if do := asObj(dv, "_info.defaults", p.errs); do != nil {
					kinds := make([]string, 0, len(deckDefaults))
					for k := range deckDefaults {
						kinds = append(kinds, k)
					}
					sort.Strings(kinds)
					for _, kind := range kinds {
						dv, ok := do.get(kind)
						if !ok {
							continue
						}
						d, isMap := dv.(map[string]any)
						if !isMap {
							p.errs.add(do.field(kind), "%s", field.Expected(do.field(kind), field.Object, dv))
							continue
						}
						for _, at := range deckDefaults[kind] {
							applyDefaults(root.m, at, d)
						}
					}
					do.finish()
				}
			}
			io.finish()
		}
	}
	if v == "1.1" || v == "2.1" {
		migratePaths(root.m)
	}
	p.vaults(root)
}

var (
	vaultPrefix    = regexp.MustCompile(`^[a-z][a-z0-9-]*[a-z0-9]$`)
	envVaultPrefix = regexp.MustCompile(`^[A-Za-z_-][A-Za-z0-9_-]*$`)
)

// vaults validates the vaults entities; references to them were resolved
// before parsing (refs.go). Only the env vault is implemented.
func (p *parser) vaults(root *obj) {
	seen := map[string]string{}
	for i, v := range root.list("vaults") {
		o := asObj(v, index("vaults", i), p.errs)
		if o == nil {
			continue
		}
		o.str("id")
		o.str("description")
		o.strList("tags")
		timestamps(o)
		prefix, name := o.str("prefix"), o.str("name")
		switch {
		case prefix == "":
			p.errs.add(o.field("prefix"), "required field missing")
		case !vaultPrefix.MatchString(prefix):
			p.errs.add(o.field("prefix"), "invalid value: %s", prefix)
		case prefix == "env":
			p.errs.add(o.field("prefix"), "'env' is the env vault's own name; choose another prefix")
		case seen[prefix] != "":
			p.errs.add(o.field("prefix"), "duplicate vault prefix %q (also at %s)", prefix, seen[prefix])
		default:
			seen[prefix] = o.path
		}
		switch name {
		case "":
			p.errs.add(o.field("name"), "required field missing")
		case "env":
		default:
			p.errs.add(o.field("name"), "vault '%s' is not implemented by sluice (it implements env)", name)
		}
		if cv, ok := o.get("config"); ok && name == "env" {
			if co := asObj(cv, o.field("config"), p.errs); co != nil {
				if cp := co.str("prefix"); cp != "" && !envVaultPrefix.MatchString(cp) {
					p.errs.add(co.field("prefix"), "invalid value: %s", cp)
				}
				for _, f := range []string{"ttl", "neg_ttl", "resurrect_ttl"} {
					// cache times of Kong's secret rotation; sluice reads
					// the environment once per load
					co.integer(f, 0, 0, 1<<31-1)
				}
				co.finish()
			}
		}
		o.finish()
	}
}

// applyDefaults fills the fields of d missing from each entity at path
// ("services", or "services[].routes" for nested lists).
func applyDefaults(root map[string]any, path string, d map[string]any) {
	outer, inner, nested := strings.Cut(path, "[].")
	list, _ := root[outer].([]any)
	for _, e := range list {
		m, ok := e.(map[string]any)
		if !ok {
			continue
		}
		if nested {
			applyDefaults(m, inner, d)
			continue
		}
		for k, v := range d {
			if _, set := m[k]; !set {
				m[k] = v
			}
		}
	}
}

// migratePaths rewrites the route paths of a 1.1 or 2.1 file as Kong does
// when it reads one: a path made only of letters, digits and . - _ ~ / %
// is a prefix, normalised as Kong normalises request paths (see
// kongpath.Normalize: percent-encodings of other than reserved characters
// decoded, dot segments removed, slashes merged); any
// other path was a regex and gets the "~" that 3.0 requires. Top-level
// routes and routes nested in services are migrated, as in Kong.
func migratePaths(root map[string]any) {
	migrate := func(routes any) {
		list, _ := routes.([]any)
		for _, r := range list {
			m, ok := r.(map[string]any)
			if !ok {
				continue
			}
			paths, _ := m["paths"].([]any)
			for i, pv := range paths {
				if s, ok := pv.(string); ok {
					paths[i] = migratePath(s)
				}
			}
		}
	}
	migrate(root["routes"])
	services, _ := root["services"].([]any)
	for _, s := range services {
		if m, ok := s.(map[string]any); ok {
			migrate(m["routes"])
		}
	}
}

var plainPath = regexp.MustCompile(`^[a-zA-Z0-9.\-_~/%]*$`)

var pctTriplet = regexp.MustCompile(`%([0-9A-Fa-f]{2})`)

func migratePath(path string) string {
	if plainPath.MatchString(path) {
		return kongpath.Normalize(path)
	}
	return "~" + pctTriplet.ReplaceAllStringFunc(path, func(t string) string {
		n, _ := strconv.ParseUint(t[1:], 16, 8)
		c := byte(n)
		switch {
		case strings.IndexByte("!#$%&'()*+,/:;=?@[]", c) >= 0:
			return strings.ToUpper(t)
		case strings.IndexByte(".^-{}\\|", c) >= 0:
			return `\` + string(c)
		}
		return string(c)
	})
}

// dropNulls removes every mapping entry whose value is null, recursively:
// Kong reads a null as "unset" everywhere, so the default applies.
func dropNulls(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if x == nil {
				delete(t, k)
				continue
			}
			t[k] = dropNulls(x)
		}
	case []any:
		for i, x := range t {
			t[i] = dropNulls(x)
		}
	}
	return v
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
