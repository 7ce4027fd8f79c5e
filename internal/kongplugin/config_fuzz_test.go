package kongplugin

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/seed-008287da/sluice/policy/field"
)

// TestConfigErrorMessages asserts the exact field errors of one failure
// per config.
func TestConfigErrorMessages(t *testing.T) {
	p, _ := newTestProcess(t, Options{})
	for _, tc := range []struct {
		newFn  func() any
		config string
		want   string
	}{
		{p.NewRateLimiting, `{"limit": [10], "window_size": [60], "shared_key": ""}`, "config.shared_key: length must be at least 1"},
		{p.NewRateLimiting, `{"limit": [10], "window_size": [60], "group_source": "cookie"}`, "config.group_source: expected one of: consumer_tags, shared, header"},
		{p.NewRateLimiting, `{"limit": [10]}`, "config.window_size: required field missing"},
		{p.NewDimensions, `{"dimensions": [{"type": "header"}]}`, "config.dimensions[0].header: required field missing"},
		{p.NewDimensions, `{"dimensions": [{"type": "ip"}], "groups_from": "header"}`, "config.groups_header: required when groups_from is header"},
		{p.NewDimensions, `{"dimensions": [{"type": "ip"}], "overrides_etcd_prefix": "/x/"}`, "config.overrides_etcd_endpoints: both overrides_etcd_endpoints and overrides_etcd_prefix are required"},
	} {
		cfg := tc.newFn()
		if err := json.Unmarshal([]byte(tc.config), cfg); err != nil {
			t.Fatal(err)
		}
		err := cfg.(interface{ Validate() error }).Validate()
		fes, ok := field.Of(err)
		if !ok || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("%s: error %v, want field errors wrapping ErrInvalidConfig", tc.config, err)
		}
		var got []string
		for _, fe := range fes {
			got = append(got, fe.String())
		}
		if strings.Join(got, "\n") != tc.want {
			t.Errorf("%s:\n%s\nwant:\n%s", tc.config, strings.Join(got, "\n"), tc.want)
		}
	}
}

var goWords = regexp.MustCompile(`\[\]|map\[|json:|Go value|float64|int64|\bbool\b|interface|struct|%!`)

// FuzzValidate feeds the plugins' configs arbitrary JSON of the types Kong
// checks: no panic, and every rejection lists field errors under "config"
// in the user's words.
func FuzzValidate(f *testing.F) {
	f.Add(uint8(0), `{"limit":[10],"window_size":[60],"shared_key":"","group_source":"x"}`)
	f.Add(uint8(0), `{"limit":[10],"window_size":[60,1],"redis":{"port":0}}`)
	f.Add(uint8(1), `{"dimensions":[{"type":"path_regex","pattern":"("}],"groups_from":"header"}`)
	f.Add(uint8(1), `{"dimensions":[],"overrides_file":"/x","overrides_etcd_prefix":"/y/"}`)
	p := NewProcess(Options{})
	f.Cleanup(func() { _ = p.Close() })
	f.Fuzz(func(t *testing.T, which uint8, config string) {
		var cfg interface{ Validate() error }
		if which%2 == 0 {
			cfg = p.NewRateLimiting().(*RateLimitingConfig)
		} else {
			cfg = p.NewDimensions().(*DimensionsConfig)
		}
		if json.Unmarshal([]byte(config), cfg) != nil {
			return // Kong rejects what its schema does not type-check
		}
		err := cfg.Validate()
		if err == nil {
			return
		}
		fes, ok := field.Of(err)
		if !ok || len(fes) == 0 || !errors.Is(err, ErrInvalidConfig) {
			t.Fatalf("error %v lists no field errors", err)
		}
		for _, fe := range fes {
			if fe.Path != "config" && !strings.HasPrefix(fe.Path, "config.") || fe.Message == "" {
				t.Fatalf("error %q does not name a field", fe)
			}
			if goWords.MatchString(fe.Message) {
				t.Fatalf("error %q speaks Go", fe)
			}
		}
	})
}
