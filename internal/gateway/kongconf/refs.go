package kongconf

import (
	"strings"

	"github.com/seed-008287da/sluice/policy/field"
)

// unresolvedRefs reports every string of the document that is a Kong vault
// reference ({vault://env/NAME}) or a decK environment substitution
// (${{ env "DECK_X" }}): sluice resolves neither yet, and using one as the
// literal value (a key, a password, a host) would be a silent difference.
func unresolvedRefs(doc any, out *Errors) {
	walkLeaves(doc, "", func(path string, v any) {
		s, ok := v.(string)
		switch {
		case !ok:
		case strings.HasPrefix(strings.TrimSpace(s), "{vault://"):
			*out = append(*out, field.Error{Path: path, Message: "a Kong vault reference: sluice does not resolve vault references yet, and will not use one as a literal value"})
		case strings.Contains(s, "${{"):
			*out = append(*out, field.Error{Path: path, Message: "a decK environment substitution: sluice does not resolve it yet (render the file with deck file render first), and will not use it as a literal value"})
		}
	})
}
