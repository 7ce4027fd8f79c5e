// Package adminhttp holds what the admin HTTP APIs of the gateway, the
// decision service and the Kong plugins share beyond their guards
// (internal/adminauth).
package adminhttp

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/policy"
)

// JSONErrors serves h, answering in JSON where an http.ServeMux answers a
// request that matches no route (404) or none for its method (405, with
// its Allow header) in plain text. body builds the answer from the status
// and its text, in the API's own shape ({"message": ...} or
// {"error": ...}).
func JSONErrors(h http.Handler, body func(code int, msg string) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&muxErrors{ResponseWriter: w, body: body}, r)
	})
}

// muxErrors turns a plain-text 404 or 405, as http.Error writes it, into
// JSON; every other answer passes through.
type muxErrors struct {
	http.ResponseWriter
	body     func(int, string) any
	replaced bool
}

func (m *muxErrors) WriteHeader(code int) {
	h := m.Header()
	if (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) && strings.HasPrefix(h.Get("Content-Type"), "text/plain") {
		m.replaced = true
		h.Set("Content-Type", "application/json")
		h.Del("X-Content-Type-Options")
		m.ResponseWriter.WriteHeader(code)
		_ = json.NewEncoder(m.ResponseWriter).Encode(m.body(code, http.StatusText(code)))
		return
	}
	m.ResponseWriter.WriteHeader(code)
}

func (m *muxErrors) Write(b []byte) (int, error) {
	if m.replaced {
		return len(b), nil // the plain-text body, already answered in JSON
	}
	return m.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (m *muxErrors) Unwrap() http.ResponseWriter { return m.ResponseWriter }

// UnknownQuery returns an error naming the first query parameter of q
// that is not one of known, so that a misspelt parameter (?plugins= for
// ?plugin=) is an error instead of a silently wider answer; nil when all
// are known.
func UnknownQuery(q url.Values, known ...string) error {
	var unknown []string
	for name := range q {
		if !slices.Contains(known, name) {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return &QueryError{Param: unknown[0], Message: "unknown query parameter (this call takes " + strings.Join(known, ", ") + ")"}
}

// A QueryError is a query parameter that cannot be used.
type QueryError struct {
	Param, Message string
}

func (e *QueryError) Error() string { return e.Param + ": " + e.Message }

// ErrorBody is the JSON answer to err under key ("message" or "error"),
// with "field" naming the query parameter of a QueryError.
func ErrorBody(key string, err error) map[string]any {
	ans := map[string]any{key: err.Error()}
	if qe, ok := errors.AsType[*QueryError](err); ok {
		ans["field"] = qe.Param
	}
	return ans
}

// CounterRoutes serves GET (and HEAD) and DELETE on
// /rate-limiting/plugins/{plugin}/counters/{identifier...} with get and
// del, reading the path as sent, never cleaned: the identifier "/a/b" of a
// path-identifier plugin is ".../counters//a/b". The path values "plugin"
// and "identifier" are set, unescaped. Other paths go to next; errBody
// builds the answer to another method (405) or a bad escape (400).
func CounterRoutes(next http.Handler, get, del http.HandlerFunc, errBody func(msg string) any) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/rate-limiting/plugins/")
		plugin, ident, cut := strings.Cut(rest, "/counters/")
		if !ok || !cut || plugin == "" || strings.Contains(plugin, "/") || ident == "" {
			next.ServeHTTP(w, r)
			return
		}
		pv, err1 := url.PathUnescape(plugin)
		iv, err2 := url.PathUnescape(ident)
		if err1 != nil || err2 != nil {
			writeJSON(w, http.StatusBadRequest, errBody("the path is not validly escaped"))
			return
		}
		r.SetPathValue("plugin", pv)
		r.SetPathValue("identifier", iv)
		switch r.Method {
		case http.MethodGet, http.MethodHead:
			get(w, r)
		case http.MethodDelete:
			del(w, r)
		default:
			w.Header().Set("Allow", "GET, HEAD, DELETE")
			writeJSON(w, http.StatusMethodNotAllowed, errBody("Method not allowed"))
		}
	})
}

// MaxTop bounds n of a top-list call.
const MaxTop = 1000

// TopQuery reads a top-list call's query: by (denied, the default, or
// requests) and n (default 20, at most MaxTop), beside scope, the
// parameter naming what to list (plugin, domain). Any other parameter is
// an error (UnknownQuery).
func TopQuery(q url.Values, scope string) (by policy.TopBy, byName string, n int, err error) {
	if err := UnknownQuery(q, scope, "by", "n"); err != nil {
		return 0, "", 0, err
	}
	by, byName = policy.TopByDenied, "denied"
	switch q.Get("by") {
	case "", "denied":
	case "requests":
		by, byName = policy.TopByRequests, "requests"
	default:
		return 0, "", 0, &QueryError{Param: "by", Message: "want denied or requests"}
	}
	n = 20
	if s := q.Get("n"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxTop {
			return 0, "", 0, &QueryError{Param: "n", Message: fmt.Sprintf("want a whole number from 1 to %d", MaxTop)}
		}
		n = v
	}
	return by, byName, n, nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
