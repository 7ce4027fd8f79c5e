package dimensions

import (
	"errors"
	"strings"

	"github.com/seed-008287da/sluice/policy/field"
)

// ErrInvalidConfig is wrapped by every error about a configuration or an
// overrides document. The concrete error is a *ConfigError listing every
// problem with its field path.
var ErrInvalidConfig = errors.New("dimensions: invalid config")

// A ConfigError lists every problem found in one document, one per field:
// decoding problems (types, unknown fields) first, in document order, then
// the checks of the decoded values. It wraps ErrInvalidConfig.
// Paths are dotted, as in "dimensions[2].pattern".
type ConfigError struct {
	Errors []field.Error
}

func (e *ConfigError) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalidConfig.Error())
	for i, fe := range e.Errors {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }

// FieldErrors returns e.Errors.
func (e *ConfigError) FieldErrors() []field.Error { return e.Errors }

// Type is where a dimension's value comes from.
type Type string

// The dimension types. Each names the Input field it reads.
const (
	// Header is the first value of a request header (Dimension.Header).
	Header Type = "header"
	// Query is the first value of a query-string argument (Dimension.Query).
	Query Type = "query"
	// PathSegment is one "/"-separated segment of the request path
	// (Dimension.Index; 0 is the first segment, -1 the last).
	PathSegment Type = "path_segment"
	// PathRegex is a capture group of Dimension.Pattern matched against the
	// request path (Dimension.Group: a name or a number; default 1).
	PathRegex Type = "path_regex"
	// Method is the request method in upper case.
	Method Type = "method"
	// IP is the client IP as the adapter computed it (Kong's forwarded IP).
	IP Type = "ip"
	// Consumer is the authenticated consumer's id, username or custom_id
	// (Dimension.Field; default id).
	Consumer Type = "consumer"
	// Route is the matched route's id or name (Dimension.Field; default id).
	Route Type = "route"
	// Service is the matched service's id or name (Dimension.Field; default
	// id).
	Service Type = "service"
	// JWTClaim is a claim of a bearer token that verified against one of
	// the keys of Config.JWT (Dimension.Claim, dotted for nested claims).
	// A token that does not verify, or has expired, yields no value.
	JWTClaim Type = "jwt_claim"
)

// Missing says what a dimension without a value does to the key.
type Missing uint8

const (
	// MissingDefault means "as the config says" on a dimension and
	// MissingSkip on the config.
	MissingDefault Missing = iota
	// MissingSkip gives no key at all: the rate-limiting plugin then falls
	// back to its own identifier, as Kong does for a compound identifier
	// with a missing part.
	MissingSkip
	// MissingPlaceholder uses the literal Placeholder as the value. All
	// requests that lack the value share one counter.
	MissingPlaceholder
)

// String returns the configuration name: "skip" or "placeholder" ("" for
// MissingDefault).
func (m Missing) String() string {
	switch m {
	case MissingSkip:
		return "skip"
	case MissingPlaceholder:
		return "placeholder"
	}
	return ""
}

// DefaultPlaceholder is the value used for a missing dimension under
// MissingPlaceholder when no placeholder is configured.
const DefaultPlaceholder = "-"

// MaxDimensions is the largest number of dimensions in one config.
const MaxDimensions = 16

// Config is a business plugin configuration: the dimensions whose values
// make the composite key, in order, and the quota overrides known at load
// time. Its JSON form is described in docs/business-layer.md; Parse reads
// it and Compile turns it into a Builder.
type Config struct {
	Dimensions []Dimension
	// OnMissing applies to dimensions that do not set their own. The zero
	// value is MissingSkip.
	OnMissing Missing
	// Placeholder is the value of a missing dimension under
	// MissingPlaceholder; empty means DefaultPlaceholder.
	Placeholder string
	// KeyPrefix, when not empty, is the first part of every key, so that two
	// business configs counting in one namespace cannot share counters.
	KeyPrefix string
	// JWT is required when a dimension is of type JWTClaim.
	JWT *JWTConfig
	// Overrides are quota overrides in force until the config centre
	// delivers a table (see Options.Overrides).
	Overrides []Override
}

// A Dimension is one part of the composite key.
type Dimension struct {
	// Name identifies the dimension in overrides and logs. Empty means a
	// name derived from the type ("header:x-tenant", "method",
	// "path_segment:1", "jwt_claim:org.id"). Names are unique in a config.
	Name string
	Type Type
	// Header is the header name (Type Header); matched case-insensitively.
	Header string
	// Query is the query argument name (Type Query).
	Query string
	// Index is the path segment (Type PathSegment): 0 is the first segment
	// after the leading slash, negative values count from the end.
	Index int
	// Pattern is an RE2 expression matched against the path (Type
	// PathRegex); a leading "~", as in Kong route paths, is dropped.
	Pattern string
	// Group is the capture group of Pattern: a name or a number. Empty
	// means 1.
	Group string
	// Field selects the consumer attribute ("id", "username", "custom_id")
	// or the route or service attribute ("id", "name"). Empty means "id".
	Field string
	// Claim is the JWT claim, with dots for nested objects ("org.id").
	Claim string
	// OnMissing overrides Config.OnMissing for this dimension.
	OnMissing Missing
	// Placeholder overrides Config.Placeholder for this dimension.
	Placeholder string
}

// JWTConfig says where the bearer token is and which keys may have signed
// it. Tokens are verified (signature, algorithm, exp and nbf against the
// request time, optional iss and aud) before any claim is used.
type JWTConfig struct {
	// Header carries the token, optionally after a "Bearer " scheme. Empty
	// means "Authorization" unless Query is set.
	Header string
	// Query is a query argument carrying the token instead of a header.
	Query string
	// Keys are tried by algorithm and, when both the token and the key have
	// one, by kid. At least one is required.
	Keys []JWTKey
	// Leeway is the clock skew tolerated for exp and nbf, in whole seconds.
	Leeway int
	// Issuer, when set, must equal the iss claim.
	Issuer string
	// Audience, when set, must be one of the aud claim's values.
	Audience string
	// RequireExp rejects tokens without an exp claim.
	RequireExp bool
}

// A JWTKey verifies one algorithm: HS256, HS384, HS512 with Secret;
// RS256, RS384, RS512, ES256, ES384, ES512 with a PEM PublicKey.
type JWTKey struct {
	KID       string
	Algorithm string
	Secret    string
	// SecretIsBase64 decodes Secret from standard base64 first, like Kong's
	// jwt plugin.
	SecretIsBase64 bool
	PublicKey      string
}

// An Override replaces the limits of the requests whose dimension Dimension
// has value Value, or, when Values is set, of the one composite key made of
// Values (one per dimension, in order).
type Override struct {
	Dimension string
	Value     string
	Values    []string
	// Quota holds the limits, sorted by ascending count as Kong stores
	// rate-limiting-advanced limits.
	Quota Quota
}

// Parse decodes a business plugin configuration from JSON and validates it.
// Decoding is strict: unknown and duplicate fields are errors. The error,
// when not nil, is a *ConfigError naming every problem with its field path.
func Parse(data []byte) (*Config, error) {
	d := &decoder{}
	cfg := d.config(data)
	if cfg != nil {
		compile(cfg, d)
	}
	if len(d.errs) > 0 {
		return nil, &ConfigError{Errors: d.errs}
	}
	return cfg, nil
}

func (d *decoder) config(data []byte) *Config {
	o := d.decodeObject("", data)
	if o == nil {
		return nil
	}
	cfg := &Config{}
	if a, ok := o.array("dimensions"); ok {
		for i, raw := range a {
			path := index("dimensions", i)
			if do := d.decodeObject(path, raw); do != nil {
				cfg.Dimensions = append(cfg.Dimensions, d.dimension(do))
			}
		}
	} else if !o.has("dimensions") {
		d.add("dimensions", "required field missing")
	}
	cfg.OnMissing = d.missing(o, "on_missing")
	cfg.Placeholder, _ = o.str("placeholder")
	cfg.KeyPrefix, _ = o.str("key_prefix")
	if jo, ok := o.record("jwt"); ok {
		cfg.JWT = d.jwt(jo)
	}
	if a, ok := o.array("overrides"); ok {
		cfg.Overrides = d.overrides("overrides", a)
	}
	o.done()
	return cfg
}

func (d *decoder) missing(o *object, name string) Missing {
	s, ok := o.str(name)
	if !ok {
		return MissingDefault
	}
	switch s {
	case "skip":
		return MissingSkip
	case "placeholder":
		return MissingPlaceholder
	}
	d.add(join(o.path, name), "expected one of: skip, placeholder")
	return MissingDefault
}

func (d *decoder) dimension(o *object) Dimension {
	var dim Dimension
	dim.Name, _ = o.str("name")
	t, _ := o.str("type")
	dim.Type = Type(t)
	dim.Header, _ = o.str("header")
	dim.Query, _ = o.str("query")
	dim.Index, _ = o.integer("index")
	dim.Pattern, _ = o.str("pattern")
	dim.Group, _ = o.str("group")
	dim.Field, _ = o.str("field")
	dim.Claim, _ = o.str("claim")
	dim.OnMissing = d.missing(o, "on_missing")
	dim.Placeholder, _ = o.str("placeholder")
	o.done()
	return dim
}

func (d *decoder) jwt(o *object) *JWTConfig {
	j := &JWTConfig{}
	j.Header, _ = o.str("header")
	j.Query, _ = o.str("query")
	j.Leeway, _ = o.integer("leeway")
	j.Issuer, _ = o.str("issuer")
	j.Audience, _ = o.str("audience")
	j.RequireExp, _ = o.boolean("require_exp")
	if a, ok := o.array("keys"); ok {
		for i, raw := range a {
			ko := d.decodeObject(index(join(o.path, "keys"), i), raw)
			if ko == nil {
				continue
			}
			var k JWTKey
			k.KID, _ = ko.str("kid")
			k.Algorithm, _ = ko.str("algorithm")
			k.Secret, _ = ko.str("secret")
			k.SecretIsBase64, _ = ko.boolean("secret_is_base64")
			k.PublicKey, _ = ko.str("public_key")
			ko.done()
			j.Keys = append(j.Keys, k)
		}
	}
	o.done()
	return j
}

// DimensionName returns d.Name, or the name derived from its type when
// empty.
func DimensionName(d Dimension) string {
	if d.Name != "" {
		return d.Name
	}
	switch d.Type {
	case Header:
		return "header:" + strings.ToLower(d.Header)
	case Query:
		return "query:" + d.Query
	case PathSegment:
		return "path_segment:" + itoa(d.Index)
	case PathRegex:
		g := d.Group
		if g == "" {
			g = "1"
		}
		return "path_regex:" + g
	case Consumer, Route, Service:
		f := d.Field
		if f == "" {
			f = "id"
		}
		return string(d.Type) + ":" + f
	case JWTClaim:
		return "jwt_claim:" + d.Claim
	}
	return string(d.Type)
}
