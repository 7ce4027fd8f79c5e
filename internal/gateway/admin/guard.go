package admin

import (
	"mime"
	"net"
	"net/http"
	"strings"

	"github.com/seed-008287da/sluice/internal/adminauth"
)

// TokenHeader carries the admin token, as in Kong Enterprise.
const TokenHeader = adminauth.TokenHeader

// guard wraps the admin API with the checks that make its port safe to
// open: the token, the Host names it answers to, and, for calls that
// change state, a same-origin browser and one of Kong's content types.
type guard struct {
	token string
	hosts map[string]bool // lower-case host[:port]; nil accepts any
	next  http.Handler
}

func newGuard(opts Options, next http.Handler) http.Handler {
	g := &guard{next: next, token: opts.Token}
	if len(opts.AllowedHosts) > 0 {
		g.hosts = make(map[string]bool, len(opts.AllowedHosts))
		for _, h := range opts.AllowedHosts {
			g.hosts[strings.ToLower(h)] = true
		}
	}
	return g
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.hosts != nil && !g.hosts[strings.ToLower(r.Host)] {
		// A page on another name resolved to this address (DNS rebinding).
		writeJSON(w, http.StatusMisdirectedRequest, map[string]any{"message": "host " + quote(r.Host) + " is not served by this admin listener"})
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
				writeJSON(w, http.StatusUnsupportedMediaType, map[string]any{"message": "content type " + quote(ct) + " is not accepted: use application/json, application/yaml, multipart/form-data or application/x-www-form-urlencoded"})
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

// LoopbackHosts returns the Host values a client may use for a listener
// bound to addr ("127.0.0.1:8001"): for a loopback address, the loopback
// names with its port; for a named or specific address, that address. For
// a wildcard address (0.0.0.0, [::]) it returns nil: every name may reach
// it, so the token is what protects it.
func LoopbackHosts(addr string) []string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil
	}
	ip := net.ParseIP(host)
	switch {
	case host == "localhost" || (ip != nil && ip.IsLoopback()):
		return []string{"127.0.0.1:" + port, "localhost:" + port, "[::1]:" + port, net.JoinHostPort(host, port)}
	case host == "" || (ip != nil && ip.IsUnspecified()):
		return nil
	}
	return []string{net.JoinHostPort(host, port)}
}

func quote(s string) string { return "'" + s + "'" }
