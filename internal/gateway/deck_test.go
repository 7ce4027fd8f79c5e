package gateway

import (
	"encoding/base64"
	"encoding/json"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// deckEnv is the environment the decK dump fixture's references read.
func deckEnv(t *testing.T, upstream string) map[string]string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"DECK_UPSTREAM_HOST":     host,
		"DECK_UPSTREAM_PORT":     port,
		"SLUICE_ORDERS_KEYS":     `{"alice": "alice-key-1", "bob": "unused"}`,
		"DECK_ALICE_SECOND_KEY":  "alice-key-2",
		"BILLING_ALICE_PASSWORD": "alice-pw",
		"BILLING_BOB_PASSWORD":   "bob-pw",
		"DECK_ALICE_JWT_SECRET":  "alice-hmac-secret",
		"DECK_BOB_KEY":           "bob-key",
		"DECK_CAROL_KEY":         "carol-key",
	}
}

func lookupIn(env map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		v, ok := env[name]
		return v, ok
	}
}

func basic(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}

// signed returns a token of claims (and extra header fields) signed with
// method and key.
func signed(t *testing.T, method jwt.SigningMethod, key any, claims jwt.MapClaims, header map[string]any) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	for k, v := range header {
		tok.Header[k] = v
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func readKey(t *testing.T, path string, parse func([]byte) (any, error)) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := parse(b)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// check asserts a response's status, body (exactly, or as JSON without
// request_id) and headers.
func check(t *testing.T, name string, r resp, status int, body string, hdr map[string]string) {
	t.Helper()
	if r.status != status {
		t.Errorf("%s: status %d, want %d (body %s)", name, r.status, status, r.body)
		return
	}
	if body != "" {
		got := r.body
		var m map[string]any
		if json.Unmarshal([]byte(got), &m) == nil {
			if _, ok := m["request_id"]; ok {
				delete(m, "request_id")
				b, _ := json.Marshal(m)
				got = string(b)
			}
		}
		if got != body {
			t.Errorf("%s: body %s, want %s", name, got, body)
		}
	}
	for k, v := range hdr {
		if got := r.header.Get(k); got != v {
			t.Errorf("%s: header %s = %q, want %q", name, k, got, v)
		}
	}
}

// TestDeckDump loads the decK dump fixture (references resolved from the
// environment) and checks each auth plugin, the acl and the identity the
// rate limiters key on against Kong's documented statuses, bodies and
// headers.
func TestDeckDump(t *testing.T) {
	up := echoUpstream(t)
	env := deckEnv(t, up.URL)
	cfg, err := os.ReadFile("testdata/deck/kong.yml")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	_, base := startGateway(t, string(cfg), Options{LookupEnv: lookupIn(env)})

	t.Run("key-auth", func(t *testing.T) {
		r := do(t, "GET", base+"/orders/1", nil)
		check(t, "no key", r, 401, `{"message":"No API key found in request"}`, map[string]string{"WWW-Authenticate": `Key realm="kong"`})
		r = do(t, "GET", base+"/orders/1", map[string]string{"apikey": "nope"})
		check(t, "bad key", r, 401, `{"message":"Unauthorized"}`, nil)
		// The key comes from a vault reference to a JSON env value.
		r = do(t, "GET", base+"/orders/1", map[string]string{"apikey": "alice-key-1"})
		check(t, "alice", r, 200, "", map[string]string{"X-RateLimit-Limit-Minute": "2", "X-RateLimit-Remaining-Minute": "1", "X-RateLimit-Limit-120": "1000"})
		e := r.echoed(t)
		want := map[string]string{
			"x-consumer-id": "7f1c4f3e-3b3a-4a63-9d43-1f0b0a1c0801", "x-consumer-username": "alice", "x-consumer-custom-id": "cust-alice",
			"x-credential-identifier": "7f1c4f3e-3b3a-4a63-9d43-1f0b0a1c0a01", "x-consumer-groups": "gold",
		}
		for k, v := range want {
			if e.Headers[k] != v {
				t.Errorf("upstream %s = %q, want %q", k, e.Headers[k], v)
			}
		}
		if _, ok := e.Headers["apikey"]; ok || e.Headers["x-anonymous-consumer"] != "" {
			t.Errorf("upstream headers %v: the key is hidden and the consumer not anonymous", e.Headers)
		}
		if e.Path != "/orders-api/1" {
			t.Errorf("upstream path %q", e.Path)
		}
		// rate-limiting by credential: the second key of the same consumer
		// has its own counter.
		do(t, "GET", base+"/orders/1", map[string]string{"x-api-key": "alice-key-1"})
		r = do(t, "GET", base+"/orders/1", map[string]string{"apikey": "alice-key-1"})
		check(t, "alice 3rd", r, 429, `{"message":"API rate limit exceeded"}`, nil)
		r = do(t, "GET", base+"/orders/1", map[string]string{"apikey": "alice-key-2"})
		check(t, "alice 2nd key", r, 200, "", map[string]string{"X-RateLimit-Remaining-Minute": "1"})
		// carol is in silver: the group-scoped rate-limiting-advanced on
		// the orders service applies to her only.
		r = do(t, "GET", base+"/orders/1", map[string]string{"apikey": "carol-key"})
		check(t, "carol", r, 200, "", map[string]string{"X-RateLimit-Limit-30": "5"})
		r = do(t, "GET", base+"/orders/1", map[string]string{"apikey": "bob-key"})
		check(t, "bob", r, 200, "", map[string]string{"X-RateLimit-Limit-30": ""})
	})

	t.Run("acl", func(t *testing.T) {
		r := do(t, "GET", base+"/orders/admin/12", map[string]string{"apikey": "alice-key-2"})
		// Only the most specific instance of a plugin name runs: here the
		// global rate-limiting, on orders-read the route's.
		check(t, "alice admin", r, 200, "", map[string]string{"X-RateLimit-Limit-Hour": "100000", "X-RateLimit-Limit-Minute": ""})
		if g := r.echoed(t).Headers["x-consumer-groups"]; g != "admins, billing" {
			t.Errorf("X-Consumer-Groups %q, want the acl groups", g)
		}
		r = do(t, "GET", base+"/orders/admin/12", map[string]string{"apikey": "bob-key"})
		check(t, "bob admin", r, 403, `{"message":"You cannot consume this service"}`, nil)
		r = do(t, "GET", base+"/orders/admin/12", nil)
		check(t, "nobody", r, 401, `{"message":"No API key found in request"}`, nil)
		// deny: bob is blocked from billing, alice is not.
		r = do(t, "GET", base+"/billing", map[string]string{"Host": "billing.example.com", "Authorization": basic("bob", "bob-pw")})
		check(t, "bob billing", r, 403, `{"message":"You cannot consume this service"}`, nil)
	})

	t.Run("basic-auth", func(t *testing.T) {
		host := "billing.example.com"
		r := do(t, "GET", base+"/billing", map[string]string{"Host": host})
		check(t, "none", r, 401, `{"message":"Unauthorized"}`, map[string]string{"WWW-Authenticate": `Basic realm="billing"`})
		r = do(t, "GET", base+"/billing", map[string]string{"Host": host, "Authorization": basic("alice", "wrong")})
		check(t, "wrong password", r, 401, `{"message":"Unauthorized"}`, nil)
		r = do(t, "GET", base+"/billing", map[string]string{"Host": host, "Authorization": "Basic !!!"})
		check(t, "not base64", r, 401, `{"message":"Unauthorized"}`, nil)
		r = do(t, "GET", base+"/billing", map[string]string{"Host": host, "Authorization": basic("alice", "alice-pw")})
		check(t, "alice", r, 200, "", nil)
		e := r.echoed(t)
		// acl's hide_groups_header: no X-Consumer-Groups upstream.
		if e.Headers["x-credential-identifier"] != "alice" || e.Headers["x-consumer-username"] != "alice" || e.Headers["authorization"] != "" || e.Headers["x-consumer-groups"] != "" {
			t.Errorf("upstream headers %v", e.Headers)
		}
		r = do(t, "GET", base+"/billing", map[string]string{"Host": host, "Proxy-Authorization": basic("alice-batch", "alice-pw")})
		check(t, "proxy-authorization", r, 200, "", nil)
		// rate-limiting by consumer: both of alice's credentials count
		// together.
		mhost := "metered.billing.example.com"
		for i, u := range []string{"alice", "alice-batch", "alice"} {
			r = do(t, "GET", base+"/billing", map[string]string{"Host": mhost, "Authorization": basic(u, "alice-pw")})
			check(t, "metered "+u, r, 200, "", map[string]string{"X-RateLimit-Remaining-Minute": string(rune('2' - i))})
		}
		r = do(t, "GET", base+"/billing", map[string]string{"Host": mhost, "Authorization": basic("alice-batch", "alice-pw")})
		check(t, "metered 4th", r, 429, `{"message":"API rate limit exceeded"}`, nil)
	})

	t.Run("jwt", func(t *testing.T) {
		hs := []byte("alice-hmac-secret")
		rs := readKey(t, "testdata/deck/rs256.key", func(b []byte) (any, error) { return jwt.ParseRSAPrivateKeyFromPEM(b) })
		es := readKey(t, "testdata/deck/es256.key", func(b []byte) (any, error) { return jwt.ParseECPrivateKeyFromPEM(b) })
		exp := now.Add(time.Hour).Unix()
		good := signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "alice-issuer", "exp": exp}, nil)
		v2 := map[string]string{"X-Api-Version": "V3"}
		bearer := func(tok string) map[string]string {
			return map[string]string{"X-Api-Version": "v2", "Authorization": "Bearer " + tok}
		}
		bad := `Bearer realm="users", error="invalid_token"`

		r := do(t, "GET", base+"/users", v2)
		check(t, "no token", r, 401, `{"message":"Unauthorized"}`, map[string]string{"WWW-Authenticate": `Bearer realm="users"`})
		r = do(t, "GET", base+"/users/7", bearer(good))
		check(t, "alice", r, 200, "", nil)
		if e := r.echoed(t); e.Headers["x-credential-identifier"] != "alice-issuer" || e.Headers["x-consumer-username"] != "alice" || e.Path != "/users-api/7" {
			t.Errorf("upstream %s %v", e.Path, e.Headers)
		}
		r = do(t, "GET", base+"/users?jwt="+good, v2)
		check(t, "query", r, 200, "", nil)
		r = do(t, "GET", base+"/users", map[string]string{"X-Api-Version": "v2", "Cookie": "session_jwt=" + good})
		check(t, "cookie", r, 200, "", nil)
		other := signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "alice-issuer", "exp": exp - 1}, nil)
		r = do(t, "GET", base+"/users?jwt="+other, bearer(good))
		check(t, "two tokens", r, 401, `{"message":"Multiple tokens provided"}`, map[string]string{"WWW-Authenticate": bad})
		r = do(t, "GET", base+"/users", bearer("abc"))
		check(t, "garbage", r, 401, `{"message":"Bad token; invalid JSON"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"exp": exp}, nil)))
		check(t, "no iss", r, 401, `{"message":"No mandatory 'iss' in claims"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "mallory", "exp": exp}, nil)))
		check(t, "unknown iss", r, 401, `{"message":"No credentials found for given 'iss'"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, []byte("guess"), jwt.MapClaims{"iss": "alice-issuer", "exp": exp}, nil)))
		check(t, "bad signature", r, 401, `{"message":"Invalid signature"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "bob-rs", "exp": exp}, nil)))
		check(t, "wrong alg", r, 401, `{"message":"Invalid algorithm"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "alice-issuer", "exp": now.Add(-time.Minute).Unix()}, nil)))
		check(t, "expired", r, 401, `{"exp":"token expired"}`, map[string]string{"WWW-Authenticate": bad})
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "alice-issuer"}, nil)))
		check(t, "no exp", r, 401, `{"exp":"must be a number"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodHS256, hs, jwt.MapClaims{"iss": "alice-issuer", "exp": now.Add(48 * time.Hour).Unix()}, nil)))
		check(t, "too long", r, 401, `{"exp":"exceeds maximum allowed expiration"}`, nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodRS256, rs, jwt.MapClaims{"iss": "bob-rs", "exp": exp}, nil)))
		check(t, "RS256", r, 200, "", nil)
		r = do(t, "GET", base+"/users", bearer(signed(t, jwt.SigningMethodES256, es, jwt.MapClaims{"iss": "bob-es", "exp": exp}, nil)))
		check(t, "ES256", r, 200, "", nil)
		if e := r.echoed(t); e.Headers["x-consumer-username"] != "bob" || e.Headers["x-credential-identifier"] != "bob-es" {
			t.Errorf("ES256 upstream headers %v", e.Headers)
		}
		// run_on_preflight: false lets OPTIONS through unauthenticated.
		r = do(t, "OPTIONS", base+"/users", v2)
		check(t, "preflight", r, 200, "", nil)
		// The route with v1 in its headers is retired; jwt runs first.
		r = do(t, "GET", base+"/users", map[string]string{"X-Api-Version": "V1.0", "Authorization": "Bearer " + good})
		check(t, "v1", r, 410, `{"message":"API v1 is retired"}`, nil)
		r = do(t, "GET", base+"/users", map[string]string{"X-Api-Version": "v4", "Authorization": "Bearer " + good})
		check(t, "v4", r, 404, `{"message":"no Route matched with those values"}`, nil)
	})

	t.Run("anonymous", func(t *testing.T) {
		// Three auth plugins with anonymous are alternatives; the
		// anonymous consumer itself is answered by request-termination.
		r := do(t, "GET", base+"/partner", nil)
		check(t, "nobody", r, 401, `{"message":"partner credentials required"}`, nil)
		r = do(t, "GET", base+"/partner", map[string]string{"apikey": "carol-key"})
		check(t, "key", r, 200, "", nil)
		if e := r.echoed(t); e.Headers["x-consumer-username"] != "carol" || e.Headers["x-anonymous-consumer"] != "" {
			t.Errorf("key: upstream headers %v", e.Headers)
		}
		r = do(t, "GET", base+"/partner", map[string]string{"Authorization": basic("bob", "bob-pw")})
		check(t, "basic", r, 200, "", nil)
		if e := r.echoed(t); e.Headers["x-consumer-username"] != "bob" || e.Headers["x-credential-identifier"] != "bob" {
			t.Errorf("basic: upstream headers %v", e.Headers)
		}
		kid := signed(t, jwt.SigningMethodHS256, []byte("alice-hmac-secret"), jwt.MapClaims{"sub": "x"}, map[string]any{"kid": "alice-issuer"})
		r = do(t, "GET", base+"/partner", map[string]string{"Authorization": "Bearer " + kid})
		check(t, "jwt kid", r, 200, "", nil)
		if e := r.echoed(t); e.Headers["x-consumer-username"] != "alice" {
			t.Errorf("jwt: upstream headers %v", e.Headers)
		}
		r = do(t, "GET", base+"/open", nil)
		check(t, "open", r, 200, "", nil)
		e := r.echoed(t)
		if e.Headers["x-anonymous-consumer"] != "true" || e.Headers["x-consumer-username"] != "anonymous" || e.Headers["x-consumer-custom-id"] != "anon" || e.Headers["x-credential-identifier"] != "" {
			t.Errorf("open: upstream headers %v", e.Headers)
		}
	})

	t.Run("disabled service", func(t *testing.T) {
		check(t, "legacy", do(t, "GET", base+"/legacy", nil), 404, "", nil)
	})
}

// TestDeckDumpUnresolved: the same file without its environment is
// rejected, each reference named by its field, no value guessed.
func TestDeckDumpUnresolved(t *testing.T) {
	cfg, err := os.ReadFile("testdata/deck/kong.yml")
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Validate(cfg)
	if err == nil {
		t.Fatal("validated without its environment")
	}
	for _, want := range []string{
		"services[0].host: environment variable 'DECK_UPSTREAM_HOST' present in state file but not set",
		"services[1].url: environment variable 'DECK_UPSTREAM_HOST' present in state file but not set",
		`consumers[0].keyauth_credentials[0].key: vault reference "{vault://env/orders-keys/alice?prefix=SLUICE_}": environment variable 'SLUICE_ORDERS_KEYS' is not set`,
		`consumers[0].basicauth_credentials[0].password: vault reference "{vault://env/billing-alice-password}": environment variable 'BILLING_ALICE_PASSWORD' is not set`,
		"consumers[0].jwt_secrets[0].secret: environment variable 'DECK_ALICE_JWT_SECRET' present in state file but not set",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
