package gateway

import (
	"testing"
)

// FuzzParseJWT: any token string is parsed or rejected with one of
// Kong's reasons, without a panic.
func FuzzParseJWT(f *testing.F) {
	f.Add("eyJhbGciOiJIUzI1NiJ9.eyJpc3MiOiJhIn0.c2ln")
	f.Add("abc")
	f.Add("a.b.c.d")
	f.Add("eyJhbGciOiJub25lIn0.e30.")
	f.Add("bnVsbA.bnVsbA.")
	f.Fuzz(func(t *testing.T, s string) {
		tok, reason := parseJWT(s)
		switch reason {
		case "":
			if tok == nil || tok.header == nil || tok.claims == nil || !jwtAlgs[tok.alg] {
				t.Fatalf("%q: accepted without a header, claims or a known alg", s)
			}
		case "invalid JSON", "invalid alg", "invalid signature":
		default:
			t.Fatalf("%q: reason %q", s, reason)
		}
	})
}

// FuzzBasicCredentials: any Authorization value gives a username and
// password or none, the username never empty and without a colon.
func FuzzBasicCredentials(f *testing.F) {
	f.Add("Basic dXNlcjpwYXNz")
	f.Add("basic dXNlcjpwYXNz")
	f.Add("Basic OnBhc3M=")
	f.Add("xBasic   YTpiOmM")
	f.Add("Basic !!!")
	f.Fuzz(func(t *testing.T, v string) {
		user, _, ok := basicCredentials(v)
		if ok && (user == "" || containsColon(user)) {
			t.Fatalf("%q: username %q", v, user)
		}
	})
}

func containsColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return true
		}
	}
	return false
}
