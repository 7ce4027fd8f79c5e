package dimensions

import (
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// verifier checks bearer tokens against configured keys. Unverified
// parsing is never used: a claim is read only from a token whose signature,
// algorithm and time claims checked out.
type verifier struct {
	header  string // lower case; "" when the token is in a query argument
	query   string
	keys    []vkey
	methods []string
	opts    []jwt.ParserOption
}

type vkey struct {
	kid string
	alg string
	key any
}

var curves = map[string]elliptic.Curve{
	"ES256": elliptic.P256(),
	"ES384": elliptic.P384(),
	"ES512": elliptic.P521(),
}

func (d *decoder) verifier(path string, j *JWTConfig) *verifier {
	v := &verifier{header: strings.ToLower(j.Header), query: j.Query}
	switch {
	case j.Header != "" && j.Query != "":
		d.add(join(path, "query"), "only one of 'header' or 'query' may be set")
	case j.Header == "" && j.Query == "":
		v.header = "authorization"
	}
	if j.Leeway < 0 {
		d.add(join(path, "leeway"), "must not be negative")
	}
	if len(j.Keys) == 0 {
		d.add(join(path, "keys"), "required field missing")
	}
	seen := map[string]bool{}
	for i, k := range j.Keys {
		p := index(join(path, "keys"), i)
		vk := vkey{kid: k.KID, alg: k.Algorithm}
		switch k.Algorithm {
		case "HS256", "HS384", "HS512":
			if k.PublicKey != "" {
				d.add(join(p, "public_key"), "not allowed with algorithm "+k.Algorithm+"; use 'secret'")
			}
			secret := []byte(k.Secret)
			if k.SecretIsBase64 {
				b, err := base64.StdEncoding.DecodeString(k.Secret)
				if err != nil {
					d.add(join(p, "secret"), "invalid base64: "+err.Error())
				}
				secret = b
			}
			if k.Secret == "" {
				d.add(join(p, "secret"), "required field missing")
			}
			vk.key = secret
		case "RS256", "RS384", "RS512":
			if k.Secret != "" {
				d.add(join(p, "secret"), "not allowed with algorithm "+k.Algorithm+"; use 'public_key'")
			}
			if k.PublicKey == "" {
				d.add(join(p, "public_key"), "required field missing")
				break
			}
			pk, err := jwt.ParseRSAPublicKeyFromPEM([]byte(k.PublicKey))
			if err != nil {
				d.add(join(p, "public_key"), "expected a PEM RSA public key: "+err.Error())
			}
			vk.key = pk
		case "ES256", "ES384", "ES512":
			if k.Secret != "" {
				d.add(join(p, "secret"), "not allowed with algorithm "+k.Algorithm+"; use 'public_key'")
			}
			if k.PublicKey == "" {
				d.add(join(p, "public_key"), "required field missing")
				break
			}
			pk, err := jwt.ParseECPublicKeyFromPEM([]byte(k.PublicKey))
			switch {
			case err != nil:
				d.add(join(p, "public_key"), "expected a PEM EC public key: "+err.Error())
			case pk.Curve != curves[k.Algorithm]:
				d.add(join(p, "public_key"), "curve "+pk.Curve.Params().Name+" does not match algorithm "+k.Algorithm)
			}
			vk.key = pk
		case "":
			d.add(join(p, "algorithm"), "required field missing")
		default:
			d.add(join(p, "algorithm"), "expected one of: HS256, HS384, HS512, RS256, RS384, RS512, ES256, ES384, ES512")
		}
		id := k.KID + "\x00" + k.Algorithm
		if k.KID != "" && seen[id] {
			d.add(join(p, "kid"), "duplicated kid '"+k.KID+"' for algorithm "+k.Algorithm)
		}
		seen[id] = true
		if !contains(v.methods, k.Algorithm) && k.Algorithm != "" {
			v.methods = append(v.methods, k.Algorithm)
		}
		v.keys = append(v.keys, vk)
	}
	v.opts = []jwt.ParserOption{
		jwt.WithValidMethods(v.methods),
		jwt.WithJSONNumber(),
		jwt.WithLeeway(time.Duration(j.Leeway) * time.Second),
	}
	if j.Issuer != "" {
		v.opts = append(v.opts, jwt.WithIssuer(j.Issuer))
	}
	if j.Audience != "" {
		v.opts = append(v.opts, jwt.WithAudience(j.Audience))
	}
	if j.RequireExp {
		v.opts = append(v.opts, jwt.WithExpirationRequired())
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

// keyFor returns the keys that may have signed t: those of its algorithm,
// narrowed to the token's kid when it has one (keys without a kid always
// qualify). Keys of other algorithms are never offered, so an HMAC token
// cannot be checked against a public key used as a secret.
func (v *verifier) keyFor(t *jwt.Token) (any, error) {
	alg := t.Method.Alg()
	kid, _ := t.Header["kid"].(string)
	var set jwt.VerificationKeySet
	for _, k := range v.keys {
		if k.alg != alg || (kid != "" && k.kid != "" && k.kid != kid) {
			continue
		}
		set.Keys = append(set.Keys, k.key)
	}
	if len(set.Keys) == 0 {
		return nil, errNoKey
	}
	return set, nil
}

var errNoKey = jwt.ErrTokenUnverifiable

// token returns the raw token of in, without a "Bearer " scheme.
func (v *verifier) token(in *Input) string {
	var s string
	if v.header != "" {
		s = in.header(v.header)
	} else {
		s = in.query(v.query)
	}
	s = strings.TrimSpace(s)
	if len(s) > 7 && strings.EqualFold(s[:7], "bearer ") {
		s = strings.TrimSpace(s[7:])
	}
	return s
}

// verify returns the claims of in's token, or ok false when there is no
// token or it does not verify at now.
func (v *verifier) verify(in *Input, now time.Time) (jwt.MapClaims, bool) {
	raw := v.token(in)
	if raw == "" {
		return nil, false
	}
	opts := append(v.opts[:len(v.opts):len(v.opts)], jwt.WithTimeFunc(func() time.Time { return now }))
	claims := jwt.MapClaims{}
	t, err := jwt.NewParser(opts...).ParseWithClaims(raw, claims, v.keyFor)
	if err != nil || !t.Valid {
		return nil, false
	}
	return claims, true
}

// claimValue returns the text of a string, number or boolean claim at path;
// objects, arrays and null give no value.
func claimValue(claims jwt.MapClaims, path []string) string {
	var cur any = map[string]any(claims)
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return ""
		}
		cur = m[p]
	}
	switch x := cur.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	case bool:
		return strconv.FormatBool(x)
	}
	return ""
}
