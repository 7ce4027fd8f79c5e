package admin

import (
	"mime"
	"net/http"

	"github.com/seed-008287da/sluice/internal/adminauth"
)

// TokenHeader carries the admin token, as in Kong Enterprise.
const TokenHeader = adminauth.TokenHeader

// guard wraps the admin API with the checks that make its port safe to
// open: the token, the Host names it answers to, and, for calls that
// change state, a same-origin browser and one of Kong's content types.
type guard struct {
	token string
	hosts adminauth.Hosts
	next  http.Handler
}

func newGuard(opts Options, next http.Handler) http.Handler {
	return &guard{next: next, token: opts.Token, hosts: adminauth.NewHosts(opts.AllowedHosts)}
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !g.hosts.Allows(r) {
		writeJSON(w, http.StatusMisdirectedRequest, map[string]any{"message": adminauth.HostMessage(r.Host)})
		return
	}
	if g.token != "" && !isDashboardShell(r) && !adminauth.HasToken(r, g.token) {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"message": adminauth.UnauthorizedMessage})
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if !adminauth.SameOrigin(r) {
			writeJSON(w, http.StatusForbidden, map[string]any{"message": "cross-origin admin calls are refused"})
			return
		}
		if r.ContentLength != 0 || r.Header.Get("Content-Type") != "" {
			ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
			if !acceptedTypes[ct] {
				want := "application/json, application/yaml, multipart/form-data or application/x-www-form-urlencoded"
				if r.URL.Path == "/rate-limiting/explain" {
					want = "application/json" // the request to explain is a JSON object
				}
				writeJSON(w, http.StatusUnsupportedMediaType, map[string]any{"message": "content type " + quote(ct) + " is not accepted: use " + want})
				return
			}
		}
	}
	g.next.ServeHTTP(w, r)
}

// acceptedTypes are the bodies Kong's admin API reads. text/plain, which a
// browser sends cross-site without a preflight, is not one of them.
var acceptedTypes = map[string]bool{
	"application/json":                  true,
	"application/yaml":                  true,
	"application/x-yaml":                true,
	"text/yaml":                         true,
	"text/x-yaml":                       true,
	"multipart/form-data":               true,
	"application/x-www-form-urlencoded": true,
}

func quote(s string) string { return "'" + s + "'" }
