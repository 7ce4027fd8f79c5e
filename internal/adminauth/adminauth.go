// Package adminauth holds the checks that guard the admin calls of every
// sluice binary (the gateway's admin API, the decision service's counters
// calls): the Kong-Admin-Token header, same-origin browser calls, and
// whether a listen address is reachable from other machines. It is shared
// by the adapters, which never import each other; docs/admin-api.md
// describes the behaviour.
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
