package dimensions

import (
	"errors"
	"strings"
	"testing"
)

// Each case is one invalid config and every message it must produce, in
// order: the whole list, not just the first error.
func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		cfg  string
		want []string
	}{
		{"not json", `{`, []string{"invalid JSON: EOF"}},
		{"not an object", `[]`, []string{"expected an object, got a list"}},
		{"trailing data", `{"dimensions":[{"type":"ip"}]} {}`, []string{"invalid JSON: data after the record"}},
		{"no dimensions", `{}`, []string{"dimensions: required field missing"}},
		{"empty dimensions", `{"dimensions":[]}`, []string{"dimensions: at least one dimension is required"}},
		{"unknown fields everywhere", `{"dimensions":[{"type":"ip","colour":1}],"extra":true,"jwt":{"keys":[{"algorithm":"HS256","secret":"s","x":1}],"y":2}}`, []string{
			"dimensions[0].colour: unknown field",
			"jwt.keys[0].x: unknown field",
			"jwt.y: unknown field",
			"extra: unknown field",
			"jwt: set but no dimension is of type jwt_claim",
		}},
		{"duplicate field", `{"dimensions":[{"type":"ip","type":"method"}]}`, []string{"dimensions[0].type: duplicate field"}},
		{"wrong types", `{"dimensions":[{"type":1,"index":"2"},{"type":"path_segment","index":1.5}],"placeholder":[],"on_missing":"drop"}`, []string{
			"dimensions[0].type: expected a string, got the number 1",
			"dimensions[0].index: expected a number, got a string",
			"dimensions[1].index: expected an integer, got the number 1.5",
			"on_missing: expected one of: skip, placeholder",
			"placeholder: expected a string, got a list",
		}},
		{"every dimension problem at once", `{"dimensions":[
			{"type":"header"},
			{"type":"header","header":"bad header"},
			{"type":"query"},
			{"type":"path_regex"},
			{"type":"path_regex","pattern":"("},
			{"type":"path_regex","pattern":"^/(a)","group":"nope"},
			{"type":"path_regex","pattern":"^/a","group":"1"},
			{"type":"consumer","field":"email"},
			{"type":"route","field":"username"},
			{"type":"jwt_claim"},
			{"type":"teapot"},
			{"type":"method","header":"x"},
			{"type":"ip"},
			{"type":"ip"}]}`, []string{
			"dimensions[0].header: required field missing",
			"dimensions[1].header: invalid header name 'bad header'",
			"dimensions[2].query: required field missing",
			"dimensions[3].pattern: required field missing",
			"dimensions[4].name: duplicated dimension name 'path_regex:1' (also dimensions[3])",
			"dimensions[4].pattern: invalid regex: error parsing regexp: missing closing ): `(`",
			"dimensions[5].group: pattern has no capture group 'nope'",
			"dimensions[6].name: duplicated dimension name 'path_regex:1' (also dimensions[4])",
			"dimensions[6].group: pattern has no capture group '1'",
			"dimensions[7].field: expected one of: id, username, custom_id",
			"dimensions[8].field: expected one of: id, name",
			"dimensions[9].claim: required field missing",
			"dimensions[10].type: expected one of: header, query, path_segment, path_regex, method, ip, consumer, route, service, jwt_claim",
			"dimensions[11].header: not used by type 'method'",
			"dimensions[13].name: duplicated dimension name 'ip' (also dimensions[12])",
			"jwt: required when a dimension is of type jwt_claim",
		}},
		{"jwt problems", `{"dimensions":[{"type":"ip"}],"jwt":{"header":"a","query":"b","leeway":-1,"keys":[
			{"algorithm":"HS256"},
			{"algorithm":"HS256","secret":"%%","secret_is_base64":true,"public_key":"x"},
			{"algorithm":"RS256","secret":"s"},
			{"algorithm":"ES256","public_key":"not pem"},
			{"algorithm":"none"},
			{},
			{"kid":"k","algorithm":"HS512","secret":"a"},
			{"kid":"k","algorithm":"HS512","secret":"b"}]}}`, []string{
			"jwt.query: only one of 'header' or 'query' may be set",
			"jwt.leeway: must not be negative",
			"jwt.keys[0].secret: required field missing",
			"jwt.keys[1].public_key: not allowed with algorithm HS256; use 'secret'",
			"jwt.keys[1].secret: invalid base64: illegal base64 data at input byte 0",
			"jwt.keys[2].secret: not allowed with algorithm RS256; use 'public_key'",
			"jwt.keys[2].public_key: required field missing",
			"jwt.keys[3].public_key: expected a PEM EC public key: invalid key: Key must be a PEM encoded PKCS1 or PKCS8 key",
			"jwt.keys[4].algorithm: expected one of: HS256, HS384, HS512, RS256, RS384, RS512, ES256, ES384, ES512",
			"jwt.keys[5].algorithm: required field missing",
			"jwt.keys[7].kid: duplicated kid 'k' for algorithm HS512",
			"jwt: set but no dimension is of type jwt_claim",
		}},
		{"overrides with Kong's messages", `{"dimensions":[{"name":"tenant","type":"header","header":"x-tenant"}],"overrides":[
			{"dimension":"tenant","value":"a"},
			{"dimension":"tenant","value":"b","limit":[1,2],"window_size":[60]},
			{"dimension":"tenant","value":"c","limit":[0],"window_size":[60]},
			{"dimension":"tenant","value":"d","limit":["x"],"window_size":[60],"window_type":"leaky"},
			{"dimension":"tenant","value":"e","limit":[1.5],"window_size":[0.0005]},
			{"dimension":"tenant","limit":[1],"window_size":[1]},
			{"limit":[1],"window_size":[1]},
			{"dimension":"tenant","value":"f","values":["f"],"limit":[1],"window_size":[1]},
			{"values":[""],"limit":[1],"window_size":[1]},
			{"dimension":"tenant","value":"g","limit":[1],"window_size":[1]},
			{"dimension":"tenant","value":"g","limit":[2],"window_size":[1]},
			{"dimension":"plan","value":"g","limit":[2],"window_size":[1]}]}`, []string{
			"overrides[0].limit: required field missing",
			"overrides[0].window_size: required field missing",
			"overrides[1]: You must provide the same number of windows and limits",
			"overrides[2]: window_size and limit values must be greater than 0",
			"overrides[3].window_type: expected one of: sliding, fixed",
			"overrides[3].limit[0]: expected a number, got a string",
			"overrides[4].limit[0]: expected an integer, got the number 1.5",
			"overrides[4].window_size[0]: expected a whole number of milliseconds of at most 100 years",
			"overrides[5].value: required field missing",
			"overrides[6]: one of 'values' or 'dimension' and 'value' is required",
			"overrides[7]: only one of 'values' or 'dimension' and 'value' may be set",
			"overrides[8].values[0]: must not be empty",
			"overrides[10]: duplicated override for dimension 'tenant' value 'g'",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.cfg))
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Parse error = %v, want a *ConfigError", err)
			}
			got := make([]string, len(ce.Errors))
			for i, fe := range ce.Errors {
				got[i] = fe.Error()
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Fatalf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestConfigErrorText(t *testing.T) {
	_, err := Parse([]byte(`{"dimensions":[{"type":"header"}],"x":1}`))
	want := "dimensions: invalid config: x: unknown field; dimensions[0].header: required field missing"
	if err == nil || err.Error() != want {
		t.Fatalf("error = %v\nwant    %s", err, want)
	}
}

func TestParseNullIsAbsent(t *testing.T) {
	cfg, err := Parse([]byte(`{"dimensions":[{"type":"ip","name":null}],"jwt":null,"overrides":null,"placeholder":null}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.JWT != nil || cfg.Dimensions[0].Name != "" {
		t.Fatalf("cfg = %+v", cfg)
	}
}

func TestTooManyDimensions(t *testing.T) {
	dims := strings.Repeat(`{"type":"ip"},`, MaxDimensions+1)
	_, err := Parse([]byte(`{"dimensions":[` + strings.TrimSuffix(dims, ",") + `]}`))
	if err == nil || !strings.Contains(err.Error(), "dimensions: at most 16 dimensions are allowed") {
		t.Fatalf("error = %v", err)
	}
}
