package decision

import (
	"errors"
	"strings"
	"testing"
)

// The cases of envoyproxy/ratelimit's own config tests (test/config),
// with fixtures written from its documented behaviour: each file the peer
// rejects is rejected here with an error naming the field; where the
// peer's rule differs, the case says so.
func TestPeerConfigCases(t *testing.T) {
	for _, tc := range []struct {
		name, yml, want string // want "" means the file loads
	}{
		{"bad_limit_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: foo, requests_per_unit: 5}\n", `descriptors[0].rate_limit.unit: invalid unit "foo"`},
		{"bad_yaml", "domain: d\ndescriptors: [\n", "parsing YAML"},
		{"duplicate_key", "domain: d\ndescriptors:\n  - {key: k, value: v}\n  - {key: k, value: v}\n", `duplicate descriptor key "k" value "v"`},
		{"empty_domain", "descriptors:\n", "no domains: give domain and descriptors, or domains"},
		{"empty_domain with descriptors", "descriptors: [{key: k}]\n", "domain: must not be empty"},
		{"empty_key", "domain: d\ndescriptors:\n  - value: v\n", "descriptors[0].key: must not be empty"},
		{"misspelled_key", "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day, requests_per_unit: 5}\n", "descriptors[0].ratelimit: unknown field"},
		{"misspelled_key2", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requestsperunit: 5}\n", "descriptors[0].rate_limit.requestsperunit: unknown field"},
		{"non_map_list", "domain: d\ndescriptors: [a, b, c]\n", "descriptors[0]: expected an object, got a string"},
		{"non_string_key", "0.25: d\ndescriptors: [{key: k}]\n", "0.25: unknown field"},
		{"replaces_empty", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: self, replaces: [{name: }], unit: second, requests_per_unit: 5}\n", "replaces[0].name: must not be empty"},
		{"replaces_self", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {name: self, replaces: [{name: self}], unit: second, requests_per_unit: 5}\n", "a limit must not replace itself"},
		{"unlimited_with_requests_per_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, requests_per_unit: 5}\n", ""},
		{"unlimited_with_unit", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day, requests_per_unit: 25}\n", "an unlimited rate_limit must not set unit"},
		{"share_threshold without a wildcard", "domain: d\ndescriptors:\n  - {key: k, value: v, share_threshold: true, rate_limit: {unit: day, requests_per_unit: 1}}\n", "share_threshold: only for a wildcard value"},
		// Files the peer loads.
		{"basic", "domain: d\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - {key: subkey1, rate_limit: {unit: second, requests_per_unit: 5}}\n      - {key: subkey1, value: subvalue1, rate_limit: {unit: second, requests_per_unit: 10}}\n  - {key: key2, rate_limit: {unit: minute, requests_per_unit: 20}}\n  - {key: key3, rate_limit: {unit: hour, requests_per_unit: 1}}\n  - {key: key4, rate_limit: {unit: day, requests_per_unit: 1}}\n", ""},
		{"wildcard", "domain: d\ndescriptors:\n  - {key: wild, value: foo*, rate_limit: {unit: minute, requests_per_unit: 20}}\n  - {key: mid, value: 'a*b*c', rate_limit: {unit: minute, requests_per_unit: 20}}\n", ""},
		{"metadata", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 5}\n    metadata: {name: service_1, nested: {a: 1}}\n", ""},
		{"shadow_mode", "domain: d\ndescriptors:\n  - {key: k, shadow_mode: true, rate_limit: {unit: second, requests_per_unit: 5}}\n", ""},
		{"numeric value", "domain: d\ndescriptors:\n  - {key: code, value: 200, rate_limit: {unit: second, requests_per_unit: 5}}\n", ""},
		{"no requests_per_unit", "domain: d\ndescriptors:\n  - {key: k, rate_limit: {unit: minute}}\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yml))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("rejected: %v", err)
			case tc.want != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
