package kongconf

import (
	"testing"

	"github.com/seed-008287da/sluice/policy/field"
)

// TestShowReferences: a resolved value in an error is shown as its
// reference, in one pass (a value inside a reference's text is left), in
// errors of the field, below it and of a field holding it; elsewhere only
// when quoted.
func TestShowReferences(t *testing.T) {
	r := &resolvedRefs{}
	r.add("plugins[0].config.redis.host", "{vault://env/X}", "X")
	r.add("services[0].url", "{vault://env/URL}", "http://u:pw@h st/")
	errs := []field.Error{
		{Path: "plugins[0].config.redis.host", Message: `bad X "X"`},
		{Path: "plugins[0].config", Message: "dialing X"},
		{Path: "plugins[1].config", Message: `X is not "X"`},
		{Path: "services[0].url", Message: `invalid url "http://xxxxx@h st/"`},
	}
	r.scrub(errs)
	want := []string{
		`bad {vault://env/X} "{vault://env/X}"`,
		"dialing {vault://env/X}",
		`X is not "{vault://env/X}"`,
		`invalid url "{vault://env/URL}"`,
	}
	for i, e := range errs {
		if e.Message != want[i] {
			t.Errorf("%s: %s, want %s", e.Path, e.Message, want[i])
		}
	}
}
