package kongconf

import (
	"sort"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/policy/field"
)

// unresolvedRefs reports every string of the document that is a Kong vault
// reference ({vault://env/NAME}) or a decK environment substitution
// (${{ env "DECK_X" }}): sluice resolves neither yet, and using one as the
// literal value (a key, a password, a host) would be a silent difference.
func unresolvedRefs(v any, path string, out *Errors) {
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			unresolvedRefs(t[k], p, out)
		}
	case []any:
		for i, x := range t {
			unresolvedRefs(x, path+"["+strconv.Itoa(i)+"]", out)
		}
	case string:
		switch {
		case strings.HasPrefix(strings.TrimSpace(t), "{vault://"):
			*out = append(*out, field.Error{Path: path, Message: "a Kong vault reference: sluice does not resolve vault references yet, and will not use one as a literal value"})
		case strings.Contains(t, "${{"):
			*out = append(*out, field.Error{Path: path, Message: "a decK environment substitution: sluice does not resolve it yet (render the file with deck file render first), and will not use it as a literal value"})
		}
	}
}
