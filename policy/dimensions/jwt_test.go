package dimensions

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/seed-008287da/sluice/ratelimit"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func pemOf(t *testing.T, pub any) string {
	t.Helper()
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}))
}

func sign(t *testing.T, m jwt.SigningMethod, key any, kid string, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func jwtBuilder(t *testing.T, jwtCfg map[string]any) *Builder {
	t.Helper()
	cfg := map[string]any{
		"dimensions": []any{map[string]any{"type": "jwt_claim", "claim": "tenant"}},
		"jwt":        jwtCfg,
	}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return mustNew(t, string(data), Options{Now: func() time.Time { t.Fatal("clock read although Input.Now is set"); return time.Time{} }})
}

func bearer(tok string) *Input {
	in := &Input{Now: t0}
	in.SetHeader("Authorization", "Bearer "+tok)
	return in
}

func TestJWTClaimOnlyWhenVerified(t *testing.T) {
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherEC, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("s3cret-s3cret-s3cret-s3cret-s3cr")
	b := jwtBuilder(t, map[string]any{
		"keys": []any{
			map[string]any{"algorithm": "HS256", "secret": string(secret)},
			map[string]any{"kid": "rsa-1", "algorithm": "RS256", "public_key": pemOf(t, &rsaKey.PublicKey)},
			map[string]any{"algorithm": "ES256", "public_key": pemOf(t, &ecKey.PublicKey)},
		},
		"leeway": 5,
	})
	ok := jwt.MapClaims{"tenant": "acme", "exp": t0.Add(time.Minute).Unix()}
	tests := []struct {
		name string
		tok  string
		want string // "" = no value
	}{
		{"HS256", sign(t, jwt.SigningMethodHS256, secret, "", ok), "acme"},
		{"RS256 with kid", sign(t, jwt.SigningMethodRS256, rsaKey, "rsa-1", ok), "acme"},
		{"RS256 without kid", sign(t, jwt.SigningMethodRS256, rsaKey, "", ok), "acme"},
		{"RS256 unknown kid", sign(t, jwt.SigningMethodRS256, rsaKey, "rsa-2", ok), ""},
		{"ES256", sign(t, jwt.SigningMethodES256, ecKey, "", ok), "acme"},
		{"ES256 wrong key", sign(t, jwt.SigningMethodES256, otherEC, "", ok), ""},
		{"HS256 wrong secret", sign(t, jwt.SigningMethodHS256, []byte("other"), "", ok), ""},
		{"HS384 not configured", sign(t, jwt.SigningMethodHS384, secret, "", ok), ""},
		{"alg none", sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, "", ok), ""},
		// Algorithm confusion: an HMAC token whose secret is the RSA public
		// key's PEM must not verify.
		{"HS256 keyed with the RSA PEM", sign(t, jwt.SigningMethodHS256, []byte(pemOf(t, &rsaKey.PublicKey)), "rsa-1", ok), ""},
		{"expired", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": "acme", "exp": t0.Add(-6 * time.Second).Unix()}), ""},
		{"expired within leeway", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": "acme", "exp": t0.Add(-4 * time.Second).Unix()}), "acme"},
		{"not yet valid", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": "acme", "nbf": t0.Add(6 * time.Second).Unix()}), ""},
		{"no exp is accepted by default", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": "acme"}), "acme"},
		{"number claim", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": 12345678901234}), "12345678901234"},
		{"bool claim", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": true}), "true"},
		{"object claim", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"tenant": map[string]any{"a": 1}}), ""},
		{"missing claim", sign(t, jwt.SigningMethodHS256, secret, "", jwt.MapClaims{"sub": "x"}), ""},
		{"garbage", "a.b.c", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, ok := b.Key(bearer(tt.tok))
			switch {
			case tt.want == "" && ok:
				t.Fatalf("Key = %q, want no key", key)
			case tt.want != "" && (!ok || key != ratelimit.Key(tt.want)):
				t.Fatalf("Key = %q, %v; want %q", key, ok, ratelimit.Key(tt.want))
			}
		})
	}
	if _, ok := b.Key(&Input{Now: t0}); ok {
		t.Fatal("no token gave a key")
	}
}

func TestJWTOptions(t *testing.T) {
	secret := "k"
	b := jwtBuilder(t, map[string]any{
		"query":       "access_token",
		"keys":        []any{map[string]any{"algorithm": "HS512", "secret": "aw==", "secret_is_base64": true}},
		"issuer":      "https://idp.example",
		"audience":    "api",
		"require_exp": true,
	})
	if n := b.Needs(); len(n.Headers) != 0 || len(n.Query) != 1 || n.Query[0] != "access_token" {
		t.Fatalf("Needs = %+v", n)
	}
	good := jwt.MapClaims{"tenant": "acme", "iss": "https://idp.example", "aud": []string{"web", "api"}, "exp": t0.Add(time.Hour).Unix()}
	tests := []struct {
		name   string
		claims jwt.MapClaims
		want   bool
	}{
		{"good", good, true},
		{"wrong issuer", jwt.MapClaims{"tenant": "acme", "iss": "evil", "aud": "api", "exp": t0.Add(time.Hour).Unix()}, false},
		{"wrong audience", jwt.MapClaims{"tenant": "acme", "iss": "https://idp.example", "aud": "web", "exp": t0.Add(time.Hour).Unix()}, false},
		{"no exp", jwt.MapClaims{"tenant": "acme", "iss": "https://idp.example", "aud": "api"}, false},
	}
	for _, tt := range tests {
		in := &Input{Now: t0}
		in.SetQuery("access_token", sign(t, jwt.SigningMethodHS512, []byte(secret), "", tt.claims))
		if _, ok := b.Key(in); ok != tt.want {
			t.Errorf("%s: ok = %v, want %v", tt.name, ok, tt.want)
		}
	}
}

func TestJWTInjectedClockAndNestedClaim(t *testing.T) {
	now := t0
	b := mustNew(t, `{"dimensions":[{"type":"jwt_claim","claim":"org.id"},{"type":"jwt_claim","claim":"org.plan"}],
		"jwt":{"header":"X-Token","keys":[{"algorithm":"HS256","secret":"k"}]}}`, Options{Now: func() time.Time { return now }})
	tok := sign(t, jwt.SigningMethodHS256, []byte("k"), "", jwt.MapClaims{
		"org": map[string]any{"id": "o-1", "plan": "gold"}, "exp": t0.Add(time.Minute).Unix(),
	})
	in := &Input{}
	in.SetHeader("x-token", tok) // no Bearer scheme: the raw token is accepted too
	if key, ok := b.Key(in); !ok || key != ratelimit.Key("o-1", "gold") {
		t.Fatalf("Key = %q, %v", key, ok)
	}
	now = t0.Add(2 * time.Minute)
	if _, ok := b.Key(in); ok {
		t.Fatal("expired token still gave a key under the injected clock")
	}
}

func TestJWTCurveMismatch(t *testing.T) {
	k, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _ := json.Marshal(map[string]any{
		"dimensions": []any{map[string]any{"type": "jwt_claim", "claim": "sub"}},
		"jwt":        map[string]any{"keys": []any{map[string]any{"algorithm": "ES256", "public_key": pemOf(t, &k.PublicKey)}}},
	})
	_, err = Parse(cfg)
	if err == nil || err.Error() != "dimensions: invalid config: jwt.keys[0].public_key: curve P-384 does not match algorithm ES256" {
		t.Fatalf("error = %v", err)
	}
}
