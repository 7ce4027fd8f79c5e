package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy/field"
)

// jwtConfig is Kong's jwt config.
type jwtConfig struct {
	URIParamNames     *[]string `json:"uri_param_names"`
	CookieNames       []string  `json:"cookie_names"`
	HeaderNames       *[]string `json:"header_names"`
	KeyClaimName      *string   `json:"key_claim_name"`
	SecretIsBase64    bool      `json:"secret_is_base64"`
	ClaimsToVerify    []string  `json:"claims_to_verify"`
	Anonymous         string    `json:"anonymous"`
	RunOnPreflight    *bool     `json:"run_on_preflight"`
	MaximumExpiration float64   `json:"maximum_expiration"`
	Realm             *string   `json:"realm"`
}

// jwtAuth is Kong's jwt plugin (priority 1450): it identifies the consumer
// from a signed JSON Web Token in a query argument, a cookie or a
// "Bearer" header, whose key claim (iss by default) names one of the
// consumers' jwt_secrets.
type jwtAuth struct {
	uriParams []string
	cookies   []string
	headers   []string
	claim     string
	base64    bool
	verify    []string // "exp", "nbf"
	anonymous *kongconf.Consumer
	preflight bool
	maxExp    float64
	wwwBase   string // WWW-Authenticate without a token
	wwwError  string // and with a bad one
	secrets   map[string]jwtOwner
}

type jwtOwner struct {
	consumer *kongconf.Consumer
	secret   *kongconf.JWTSecret
	// key verifies the signature: []byte for HMAC, a public key else; nil
	// when the credential has none (Kong: "Invalid key/secret").
	key any
}

func newJWT(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var c jwtConfig
	if err := decodeStrict(raw, &c); err != nil {
		return nil, err
	}
	var errs []field.Error
	j := &jwtAuth{
		uriParams: []string{"jwt"},
		cookies:   c.CookieNames,
		headers:   []string{"authorization"},
		claim:     "iss",
		base64:    c.SecretIsBase64,
		preflight: c.RunOnPreflight == nil || *c.RunOnPreflight,
		maxExp:    c.MaximumExpiration,
		secrets:   map[string]jwtOwner{},
	}
	if c.URIParamNames != nil {
		j.uriParams = *c.URIParamNames
	}
	if c.HeaderNames != nil {
		j.headers = *c.HeaderNames
	}
	if c.KeyClaimName != nil {
		j.claim = *c.KeyClaimName
	}
	seen := map[string]bool{}
	for i, cl := range c.ClaimsToVerify {
		if cl != "exp" && cl != "nbf" {
			errs = append(errs, field.Error{Path: fmt.Sprintf("config.claims_to_verify[%d]", i), Message: "expected one of: exp, nbf"})
			continue
		}
		if !seen[cl] {
			seen[cl] = true
			j.verify = append(j.verify, cl)
		}
	}
	if c.MaximumExpiration < 0 || c.MaximumExpiration > 31536000 {
		errs = append(errs, field.Error{Path: "config.maximum_expiration", Message: "value should be between 0 and 31536000"})
	}
	if c.MaximumExpiration > 0 && !seen["exp"] {
		errs = append(errs, field.Error{Path: "config.claims_to_verify", Message: "expected to contain: exp (maximum_expiration is set)"})
	}
	if c.Realm != nil {
		j.wwwBase = fmt.Sprintf(`Bearer realm="%s"`, *c.Realm)
		j.wwwError = j.wwwBase + `, error="invalid_token"`
	} else {
		j.wwwBase, j.wwwError = "Bearer", `Bearer error="invalid_token"`
	}
	for _, con := range env.Config.Consumers {
		for i := range con.JWTSecrets {
			s := &con.JWTSecrets[i]
			if s.Key == "" {
				continue // Kong would generate a key nobody knows
			}
			j.secrets[s.Key] = jwtOwner{consumer: con, secret: s, key: j.verifyKey(s)}
		}
	}
	anon, aerrs := anonymousConsumer(env.Config, c.Anonymous)
	j.anonymous = anon
	errs = append(errs, aerrs...)
	errs = append(errs, noConsumerScope(env)...)
	if len(errs) > 0 {
		return nil, kongconf.Errors(errs)
	}
	return j, nil
}

// verifyKey is the key a credential's signatures are checked with, nil
// when there is none to use.
func (j *jwtAuth) verifyKey(s *kongconf.JWTSecret) any {
	if strings.HasPrefix(s.Algorithm, "HS") {
		if s.Secret == "" {
			return nil // Kong would generate a secret nobody knows
		}
		if !j.base64 {
			return []byte(s.Secret)
		}
		b, err := base64url(s.Secret)
		if err != nil {
			return nil
		}
		return b
	}
	if s.RSAPublicKey == "" {
		return nil
	}
	k, err := kongconf.ParsePublicKey(s.RSAPublicKey)
	if err != nil {
		return nil
	}
	return k
}

// base64url decodes URL-safe base64 with or without padding, as Kong's
// token parser does.
func base64url(s string) ([]byte, error) {
	return base64.RawURLEncoding.DecodeString(strings.TrimRight(s, "="))
}

var bearer = regexp.MustCompile(`\s*[Bb]earer\s+(.+)`)

// jwtFailure is a rejection: status 401 with a body and a
// WWW-Authenticate value.
type jwtFailure struct {
	body    []byte
	wwwAuth string
}

func (j *jwtAuth) message(msg string, www string) *jwtFailure {
	b, _ := json.Marshal(map[string]string{"message": msg}) // a string map always marshals
	return &jwtFailure{body: b, wwwAuth: www}
}

func (j *jwtAuth) Access(x *Exchange) error {
	if !j.preflight && x.Method() == "OPTIONS" {
		return nil
	}
	if j.anonymous != nil && x.Credential != "" {
		return nil // authenticated by an earlier auth plugin: logical OR
	}
	owner, fail := j.authenticate(x)
	if fail == nil {
		authenticate(x, "jwt", owner.consumer, owner.secret.ID, owner.secret.Key)
		return nil
	}
	if j.anonymous != nil {
		authenticate(x, "jwt", j.anonymous, "", "")
		return nil
	}
	x.SetResponseHeader("WWW-Authenticate", fail.wwwAuth)
	x.Respond(401, jsonType, fail.body)
	x.Outcome("jwt", "unauthorized")
	return nil
}

// tokens returns the distinct non-empty tokens of the request: every
// value of the query arguments, the cookies, then the Bearer headers.
func (j *jwtAuth) tokens(x *Exchange) []string {
	var out []string
	add := func(t string) {
		if t == "" {
			return
		}
		for _, o := range out {
			if o == t {
				return
			}
		}
		out = append(out, t)
	}
	args := x.ctx.QueryArgs()
	for _, n := range j.uriParams {
		for _, v := range args.PeekMulti(n) {
			add(string(v))
		}
	}
	for _, n := range j.cookies {
		add(string(x.ctx.Request.Header.Cookie(n)))
	}
	for _, n := range j.headers {
		v := x.ctx.Request.Header.Peek(n)
		if v == nil {
			continue
		}
		if m := bearer.FindSubmatch(v); m != nil {
			add(string(m[1]))
		}
	}
	return out
}

func (j *jwtAuth) authenticate(x *Exchange) (jwtOwner, *jwtFailure) {
	toks := j.tokens(x)
	switch len(toks) {
	case 0:
		return jwtOwner{}, j.message("Unauthorized", j.wwwBase)
	case 1:
	default:
		return jwtOwner{}, j.message("Multiple tokens provided", j.wwwError)
	}
	tok, err := parseJWT(toks[0])
	if err != "" {
		return jwtOwner{}, j.message("Bad token; "+err, j.wwwError)
	}
	kv, ok := tok.claims[j.claim]
	if !ok || kv == nil {
		kv, ok = tok.header[j.claim]
	}
	if !ok || kv == nil || kv == false {
		return jwtOwner{}, j.message("No mandatory '"+j.claim+"' in claims", j.wwwError)
	}
	if kv == "" {
		return jwtOwner{}, j.message("Invalid '"+j.claim+"' in claims", j.wwwError)
	}
	key, _ := kv.(string)
	owner, ok := j.secrets[key]
	if !ok {
		return jwtOwner{}, j.message("No credentials found for given '"+j.claim+"'", j.wwwError)
	}
	if tok.alg != owner.secret.Algorithm {
		return jwtOwner{}, j.message("Invalid algorithm", j.wwwError)
	}
	if owner.key == nil {
		return jwtOwner{}, j.message("Invalid key/secret", j.wwwError)
	}
	m := jwt.GetSigningMethod(tok.alg)
	if m == nil || m.Verify(tok.signed, tok.signature, owner.key) != nil {
		return jwtOwner{}, j.message("Invalid signature", j.wwwError)
	}
	now := float64(x.Now.Unix())
	claimErrs := map[string]string{}
	for _, name := range j.verify {
		v, isNum := tok.claims[name].(float64)
		switch {
		case !isNum:
			claimErrs[name] = "must be a number"
		case name == "nbf" && v > now:
			claimErrs[name] = "token not valid yet"
		case name == "exp" && v <= now:
			claimErrs[name] = "token expired"
		}
	}
	if len(claimErrs) == 0 && j.maxExp > 0 {
		if exp, isNum := tok.claims["exp"].(float64); !isNum || exp-now > j.maxExp {
			claimErrs["exp"] = "exceeds maximum allowed expiration"
		}
	}
	if len(claimErrs) > 0 {
		b, _ := json.Marshal(claimErrs) // a string map always marshals
		return jwtOwner{}, &jwtFailure{body: b, wwwAuth: j.wwwError}
	}
	return owner, nil
}

// parsedJWT is a token split and decoded as Kong's parser does it.
type parsedJWT struct {
	header, claims map[string]any
	alg            string
	signed         string // header.claims, what the signature covers
	signature      []byte
}

// jwtAlgs are the "alg" values Kong's parser accepts.
var jwtAlgs = map[string]bool{
	"HS256": true, "HS384": true, "HS512": true, "RS256": true, "RS384": true, "RS512": true,
	"ES256": true, "ES384": true, "ES512": true, "PS256": true, "PS384": true, "PS512": true, "EdDSA": true,
}

// parseJWT returns the token, or the reason Kong's parser gives for
// rejecting it ("invalid JSON", "invalid alg", "invalid signature").
func parseJWT(s string) (*parsedJWT, string) {
	parts := strings.SplitN(s, ".", 3)
	if len(parts) < 3 {
		return nil, "invalid JSON"
	}
	t := &parsedJWT{signed: parts[0] + "." + parts[1]}
	for i, dst := range []*map[string]any{&t.header, &t.claims} {
		raw, err := base64url(parts[i])
		if err != nil {
			return nil, "invalid JSON"
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		if dec.Decode(dst) != nil || *dst == nil || dec.More() {
			return nil, "invalid JSON"
		}
	}
	alg, _ := t.header["alg"].(string)
	if !jwtAlgs[alg] {
		return nil, "invalid alg"
	}
	t.alg = alg
	sig, err := base64url(parts[2])
	if err != nil {
		return nil, "invalid signature"
	}
	t.signature = sig
	return t, ""
}
