// Package adminauth holds the checks that guard the admin calls of every
// sluice binary (the gateway's admin API, the decision service's counters
// calls): the Kong-Admin-Token header, same-origin browser calls, the Host
// names a listener answers, and whether a listen address is reachable from
// other machines. It is shared by the adapters, which never import each
// other; docs/admin-api.md describes the behaviour.
package adminauth

import (
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// TokenHeader carries the admin token, as in Kong Enterprise.
const TokenHeader = "Kong-Admin-Token"

// UnauthorizedMessage is Kong's message for a call without a valid token.
const UnauthorizedMessage = "Invalid credentials. Token or User credentials required"

// HasToken reports whether r carries token in TokenHeader, compared in
// constant time. An empty token is never carried.
func HasToken(r *http.Request, token string) bool {
	if token == "" {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(r.Header.Get(TokenHeader)), []byte(token)) == 1
}

// SameOrigin reports whether a state-changing call may come from the
// browser page that sent it: no Origin (curl, scripts) or an Origin whose
// host is the one addressed, and no Sec-Fetch-Site saying cross-site.
func SameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "cross-site", "same-site":
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // "null" (a sandboxed frame or a file) or garbage
	}
	return strings.EqualFold(u.Host, r.Host)
}

// Hosts are the Host values an admin listener answers (lower-case
// host:port). A request naming another host comes from a page whose name
// was resolved to this address (DNS rebinding) and is refused. A nil Hosts
// allows every name.
type Hosts map[string]bool

// NewHosts returns the Hosts of the given host:port values; nil when there
// are none.
func NewHosts(hostports []string) Hosts {
	if len(hostports) == 0 {
		return nil
	}
	h := make(Hosts, len(hostports))
	for _, hp := range hostports {
		h[strings.ToLower(hp)] = true
	}
	return h
}

// Allows reports whether r names a host h answers.
func (h Hosts) Allows(r *http.Request) bool {
	return h == nil || h[strings.ToLower(r.Host)]
}

// HostMessage is the message of a refused Host.
func HostMessage(host string) string {
	return "host '" + host + "' is not served by this admin listener"
}

// LoopbackHosts returns the Host values a client may use for a listener
// bound to addr ("127.0.0.1:8001"): for a loopback address, the loopback
// names with its port; for a named or specific address, that address. For
// a wildcard address (0.0.0.0, [::]) or a Unix socket it returns nil:
// every name may reach it, so the token is what protects it.
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

// IsLoopback reports whether a listen address is reachable only from this
// machine: a loopback IP or localhost, with a port, or a Unix socket
// ("unix:PATH").
func IsLoopback(addr string) bool {
	if strings.HasPrefix(addr, "unix:") {
		return true
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadTokenFile returns the token stored in the file at path, without the
// white space around it (a trailing newline). An empty file is an error.
// Errors name the file, never its content.
func ReadTokenFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", errors.New("adminauth: reading the token file: " + err.Error())
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", errors.New("adminauth: the token file " + path + " is empty")
	}
	return tok, nil
}
