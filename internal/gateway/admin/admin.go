// Package admin is the gateway's admin API on net/http, the DB-less subset
// of Kong's: POST /config loads a new declarative configuration, GET
// /config returns the serving one, GET /status reports health, GET
// /metrics exposes Prometheus metrics. StatusHandler serves the last two
// alone, for Kong's status_listen.
package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/seed-008287da/sluice/internal/adminhttp"
	"github.com/seed-008287da/sluice/internal/gateway"
	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// MaxConfigSize bounds a POST /config body.
const MaxConfigSize = 32 << 20

// Options configure the admin handler.
type Options struct {
	// Version is reported by GET /.
	Version string

	// Token, when set, is required in the Kong-Admin-Token header of
	// every call (compared in constant time); 401 otherwise.
	Token string

	// ManagedBy, when set, names the source the configuration comes from
	// ("file /etc/kong.yml", "etcd key /sluice/kong.yml"): POST /config
	// then answers 409, so the gateway never serves something other than
	// its source says.
	ManagedBy string

	// AllowedHosts are the Host values the API answers (host:port, as
	// adminauth.LoopbackHosts returns for the listen address); others get 421, so
	// a page on another name resolved to this address (DNS rebinding)
	// reaches nothing. Empty accepts any.
	AllowedHosts []string
}

// Handler returns the admin API of g. It is safe for concurrent use;
// concurrent POST /config calls are applied one at a time. Calls that
// change state are refused from another origin (Origin, Sec-Fetch-Site)
// and need one of Kong's content types. GET /config redacts secrets
// unless ?include_secrets=true is asked with a Token set.
func Handler(g *gateway.Gateway, opts Options) http.Handler {
	mux := http.NewServeMux()
	a := &api{g: g, opts: opts}
	mux.HandleFunc("GET /{$}", a.root)
	mux.HandleFunc("POST /config", a.postConfig)
	mux.HandleFunc("GET /config", a.getConfig)
	mux.HandleFunc("GET /status", a.status)
	mux.HandleFunc("GET /status/ready", a.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.Metrics().Registry, promhttp.HandlerOpts{}))
	a.counterRoutes(mux)
	a.dashboardRoutes(mux)
	return newGuard(opts, adminhttp.CounterRoutes(adminhttp.JSONErrors(mux, kongError), a.getCounter, a.deleteCounter, message))
}

// StatusHandler serves only GET /status, GET /status/ready and GET
// /metrics, for a listener
// of their own (Kong's status_listen): probes and Prometheus reach them
// without reaching the admin API.
func StatusHandler(g *gateway.Gateway) http.Handler {
	mux := http.NewServeMux()
	a := &api{g: g}
	mux.HandleFunc("GET /status", a.status)
	mux.HandleFunc("GET /status/ready", a.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(g.Metrics().Registry, promhttp.HandlerOpts{}))
	return adminhttp.JSONErrors(mux, kongError)
}

// message is an error answer of the admin API.
func message(msg string) any { return map[string]string{"message": msg} }

// kongError is the router's 404 or 405 as Kong's Admin API words it.
func kongError(code int, _ string) any {
	if code == http.StatusMethodNotAllowed {
		return map[string]string{"message": "Method not allowed"}
	}
	return map[string]string{"message": "Not found"}
}

type api struct {
	g    *gateway.Gateway
	opts Options
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client went away; nothing to do
}

func (a *api) root(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"tagline": "Welcome to sluice",
		"version": a.opts.Version,
		"configuration": map[string]any{
			"database": "off",
			"role":     "traditional",
		},
	})
}

// fieldError is one entry of a 400 response.
type fieldError struct {
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// postConfig accepts the configuration as a form field "config"
// (multipart or urlencoded, as `curl -F config=@kong.yml`), as a JSON
// object {"config": "<yaml or json text>"}, or as the raw YAML/JSON body.
func (a *api) postConfig(w http.ResponseWriter, r *http.Request) {
	if a.opts.ManagedBy != "" {
		writeJSON(w, http.StatusConflict, map[string]any{"message": "the configuration is managed by " + a.opts.ManagedBy +
			": change it there, or run sluice with --watch=false to load configurations through the admin API"})
		return
	}
	data, err := configBody(w, r)
	if err != nil {
		code := http.StatusBadRequest
		if errors.As(err, new(*http.MaxBytesError)) {
			code = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, code, map[string]any{"message": err.Error()})
		return
	}
	changed, err := a.g.Apply(data, "admin")
	if err == nil && !changed && r.URL.Query().Get("check_hash") == "1" { // Kong reads only "1"
		// As Kong: the configuration in force was posted again.
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if err != nil {
		var errs kongconf.Errors
		if !errors.As(err, &errs) {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"message": err.Error()})
			return
		}
		list := make([]fieldError, len(errs))
		for i, fe := range errs {
			list[i] = fieldError{fe.Path, fe.Message}
		}
		ans := map[string]any{
			"code":    14,
			"name":    "invalid declarative configuration",
			"message": "declarative config is invalid: " + summary(errs),
			"errors":  list,
		}
		byField := errs
		if truthy(r.URL.Query().Get("flatten_errors")) {
			// As Kong: the errors of entities by entity; fields keeps the
			// others.
			var flat []flatEntity
			flat, byField = flatten(data, errs)
			ans["flattened_errors"] = flat
		}
		fields := map[string][]string{}
		for _, fe := range byField {
			key := fe.Path
			if key == "" {
				key = "@entity"
			}
			fields[key] = append(fields[key], fe.Message)
		}
		ans["fields"] = fields
		writeJSON(w, http.StatusBadRequest, ans)
		return
	}
	st := a.g.Status()
	writeJSON(w, http.StatusCreated, map[string]any{
		"message":            "configuration applied",
		"generation":         st.Generation,
		"configuration_hash": st.ConfigHash,
	})
}

// truthy is Kong's reading of a boolean query argument.
func truthy(v string) bool {
	switch strings.ToLower(v) {
	case "1", "true", "on", "yes":
		return true
	}
	return false
}

func summary(errs kongconf.Errors) string {
	parts := make([]string, len(errs))
	for i, fe := range errs {
		parts[i] = fe.Error()
	}
	return strings.Join(parts, "; ")
}

func configBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	r.Body = http.MaxBytesReader(w, r.Body, MaxConfigSize)
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "multipart/form-data", "application/x-www-form-urlencoded":
		if err := r.ParseMultipartForm(MaxConfigSize); err != nil && !errors.Is(err, http.ErrNotMultipart) {
			return nil, fmt.Errorf("reading form: %w", err)
		}
		if f, _, err := r.FormFile("config"); err == nil {
			defer f.Close()
			return io.ReadAll(f)
		}
		if v := r.FormValue("config"); v != "" {
			return []byte(v), nil
		}
		return nil, errors.New("missing form field 'config'")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, fmt.Errorf("reading body: %w", err)
	}
	if ct == "application/json" {
		var wrapped struct {
			Config *string `json:"config"`
		}
		if json.Unmarshal(body, &wrapped) == nil && wrapped.Config != nil {
			return []byte(*wrapped.Config), nil
		}
	}
	return body, nil // an empty one is rejected by Load, like any invalid one
}

func (a *api) getConfig(w http.ResponseWriter, r *http.Request) {
	data, source, err := a.g.Config()
	if errors.Is(err, gateway.ErrNoConfig) {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": err.Error()})
		return
	}
	switch r.URL.Query().Get("include_secrets") {
	case "true":
		if a.opts.Token == "" {
			writeJSON(w, http.StatusForbidden, map[string]any{"message": "include_secrets needs an admin token (--admin-token)"})
			return
		}
	case "", "false":
		if data, err = redactConfig(data); err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"message": "redacting the configuration failed"})
			return
		}
	default:
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": "include_secrets: want true or false"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"config": string(data), "source": source})
}

// status answers 200 once a configuration serves, 503 before.
// ready is Kong's readiness probe: 200 {"message":"ready"} while a
// configuration serves, else 503 with the reason, Kong's words.
func (a *api) ready(w http.ResponseWriter, r *http.Request) {
	st := a.g.Status()
	switch {
	case st.Draining:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"message": "draining"})
	case !st.Ready:
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"message": "no configuration available (configuration hash is not initialized)"})
	default:
		writeJSON(w, http.StatusOK, map[string]string{"message": "ready"})
	}
}

func (a *api) status(w http.ResponseWriter, r *http.Request) {
	st := a.g.Status()
	code := http.StatusOK
	if !st.Ready {
		code = http.StatusServiceUnavailable
	}
	writeJSON(w, code, map[string]any{
		"configuration_hash": st.ConfigHash,
		"server": map[string]any{
			"connections_active": a.g.Inflight(),
		},
		"sluice": st,
	})
}
