package kongconf

import (
	"testing"

	"github.com/seed-008287da/sluice/policy/field"
)

// TestLaterErrors: a resolved value in an error is shown as its
// reference, in one pass (a value inside a reference's text is left), in
// errors of the field, below it and of a field holding it; elsewhere only
// when quoted.
func TestLaterErrors(t *testing.T) {
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

// TestLaterErrorsLeaveOutUnresolved: a plugin's error at a field whose
// vault reference could not be resolved is left out (the reference's error
// says it all); its other errors stay, with resolved values shown as their
// references.
func TestLaterErrorsLeaveOutUnresolved(t *testing.T) {
	cfg, errs := DecodeWith([]byte(`
_format_version: "3.0"
plugins:
  - name: rate-limiting
    config: {minute: 5, policy: redis, redis: {host: "{vault://env/RL_HOST}", password: "{vault://env/RL_PW}"}}
`), DecodeOptions{LookupEnv: func(k string) (string, bool) {
		if k == "RL_HOST" {
			return "h.example", true
		}
		return "", false
	}})
	if len(errs) != 1 || errs[0].Path != "plugins[0].config.redis.password" {
		t.Fatalf("DecodeWith errors %v, want one for the unresolved password", errs)
	}
	later := cfg.LaterErrors([]field.Error{
		{Path: "plugins[0].config.redis.password", Message: "length must be at least 1"},
		{Path: "plugins[0].config.redis.password", Message: "required field missing"},
		{Path: "plugins[0].config.redis.host", Message: `cannot resolve "h.example"`},
	})
	if len(later) != 1 || later[0].Path != "plugins[0].config.redis.host" || later[0].Message != `cannot resolve "{vault://env/RL_HOST}"` {
		t.Fatalf("LaterErrors = %v, want only the host's, showing its reference", later)
	}
}
