package gateway

import (
	"encoding/base64"
	"net"
	"os"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/valyala/fasthttp"
)

// BenchmarkAuth measures one request through the gateway's handler with
// each auth plugin (a request-termination after it answers, so nothing
// is proxied), and without one for reference.
func BenchmarkAuth(b *testing.B) {
	pub, err := os.ReadFile("testdata/deck/rs256.pub")
	if err != nil {
		b.Fatal(err)
	}
	rsKey, err := os.ReadFile("testdata/deck/rs256.key")
	if err != nil {
		b.Fatal(err)
	}
	cfg := `
_format_version: "3.0"
routes:
  - {name: none, paths: [/none], plugins: [{name: request-termination, config: {status_code: 200}}]}
  - name: key
    paths: [/key]
    plugins: [{name: key-auth}, {name: request-termination, config: {status_code: 200}}]
  - name: basic
    paths: [/basic]
    plugins: [{name: basic-auth}, {name: request-termination, config: {status_code: 200}}]
  - name: jwt
    paths: [/jwt]
    plugins: [{name: jwt, config: {claims_to_verify: [exp]}}, {name: request-termination, config: {status_code: 200}}]
consumers:
  - username: alice
    keyauth_credentials: [{key: alice-key}]
    basicauth_credentials: [{username: alice, password: alice-pw}]
    jwt_secrets:
      - {key: hs, secret: alice-secret}
      - key: rs
        algorithm: RS256
        rsa_public_key: |
`
	for _, l := range splitLines(string(pub)) {
		cfg += "          " + l + "\n"
	}
	g, err := New(Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := g.Load([]byte(cfg), "bench"); err != nil {
		b.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).Unix()
	hs, _ := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"iss": "hs", "exp": exp}).SignedString([]byte("alice-secret"))
	priv, err := jwt.ParseRSAPrivateKeyFromPEM(rsKey)
	if err != nil {
		b.Fatal(err)
	}
	rs, _ := jwt.NewWithClaims(jwt.SigningMethodRS256, jwt.MapClaims{"iss": "rs", "exp": exp}).SignedString(priv)
	cases := []struct{ name, path, header, value string }{
		{"none", "/none", "", ""},
		{"key-auth", "/key", "apikey", "alice-key"},
		{"basic-auth", "/basic", "Authorization", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:alice-pw"))},
		{"jwt-hs256", "/jwt", "Authorization", "Bearer " + hs},
		{"jwt-rs256", "/jwt", "Authorization", "Bearer " + rs},
	}
	addr := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			var req fasthttp.Request
			req.SetRequestURI("http://x" + c.path)
			if c.header != "" {
				req.Header.Set(c.header, c.value)
			}
			var ctx fasthttp.RequestCtx
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				ctx.Init(&req, addr, nil)
				g.handle(&ctx)
				if ctx.Response.StatusCode() != 200 {
					b.Fatalf("status %d: %s", ctx.Response.StatusCode(), ctx.Response.Body())
				}
			}
		})
	}
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '\n' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}
