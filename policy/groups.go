package policy

import "strings"

// SelectScopeGroup picks, among the consumer groups a consumer belongs to,
// the one whose group-scoped plugin instance runs (Kong 3.4+):
// when several of the consumer's groups have an instance of the same
// plugin, exactly one runs, that of the group whose name sorts first
// (byte order; groups known only by id sort by id). hasInstance reports
// whether a group has an instance of the plugin. It returns false when none
// has.
func SelectScopeGroup(groups []Group, hasInstance func(Group) bool) (Group, bool) {
	var best Group
	found := false
	for _, g := range groups {
		if !hasInstance(g) {
			continue
		}
		if !found || strings.Compare(sortName(g), sortName(best)) < 0 {
			best, found = g, true
		}
	}
	return best, found
}

func sortName(g Group) string {
	if g.Name != "" {
		return g.Name
	}
	return g.ID
}
