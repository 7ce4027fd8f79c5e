package admin

import (
	"bytes"
	"embed"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// The dashboard (docs/admin-api.md, "Dashboard"): a page and its script,
// embedded, that poll the admin API with fetch. The page and its assets
// hold no data and are served without the token, so that a browser,
// which cannot add a header to a navigation, can load them; the script
// then sends the token the operator entered (kept in the tab's
// sessionStorage) as Kong-Admin-Token on every call. No cookie is ever
// set, so another site cannot make the browser call the API on the
// operator's behalf.

//go:embed dashboard
var dashboardFiles embed.FS

var dashboardPage = template.Must(template.ParseFS(dashboardFiles, "dashboard/index.html"))

// dashboardCSP allows the page its own script and style, and calls to
// its own origin only; frame-ancestors 'none' keeps other sites from
// framing it (clickjacking the reset buttons).
const dashboardCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

func dashboardHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", dashboardCSP)
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

// isDashboardShell reports whether r asks for the dashboard's page or an
// asset: the calls served without the token.
func isDashboardShell(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	p := r.URL.Path
	return p == "/dashboard" || p == "/dashboard/" || strings.HasPrefix(p, "/dashboard/assets/")
}

func (a *api) dashboardRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /dashboard", a.dashboard)
	mux.HandleFunc("GET /dashboard/{$}", a.dashboard)
	assets, _ := fs.Sub(dashboardFiles, "dashboard/assets") // a constant path of the embedded tree
	files := http.StripPrefix("/dashboard/assets/", http.FileServerFS(assets))
	mux.Handle("GET /dashboard/assets/", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		dashboardHeaders(w)
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /dashboard/data", a.dashboardData)
	mux.HandleFunc("GET /config/reloads", a.reloads)
}

func (a *api) dashboard(w http.ResponseWriter, r *http.Request) {
	var b bytes.Buffer
	if err := dashboardPage.Execute(&b, map[string]any{"TokenRequired": a.opts.Token != "", "Version": a.opts.Version}); err != nil {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"message": "rendering the dashboard failed"})
		return
	}
	dashboardHeaders(w)
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(b.Bytes()) // the client went away; nothing to do
}

func (a *api) reloads(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"data": a.g.Reloads()})
}

// dashboardFamilies are the metrics the dashboard reads.
var dashboardFamilies = map[string]bool{
	"sluice_http_requests_total":              true,
	"sluice_plugin_decisions_total":           true,
	"sluice_plugin_decision_duration_seconds": true,
	"sluice_rate_limit_denials_total":         true,
	"sluice_redis_fallback":                   true,
	"sluice_redis_fault":                      true,
	"sluice_redis_state_changes_total":        true,
	"sluice_redis_sync_lag_seconds":           true,
	"sluice_redis_sync_interval_seconds":      true,
	"sluice_redis_sync_accuracy_budget":       true,
	"sluice_store_errors_total":               true,
	"sluice_admin_actions_total":              true,
}

// sample is one series of a metric family: a counter's or gauge's value,
// or a histogram's cumulative buckets.
type sample struct {
	Labels  map[string]string `json:"labels"`
	Value   float64           `json:"value"`
	Buckets [][2]float64      `json:"buckets,omitempty"` // [upper bound, cumulative count]; the last, bound -1, is +Inf
}

// dashboardData answers the dashboard's poll: the time, the status and the
// metrics it charts, as JSON (docs/admin-api.md).
func (a *api) dashboardData(w http.ResponseWriter, r *http.Request) {
	mfs, err := a.g.Metrics().Registry.Gather()
	if err != nil && len(mfs) == 0 {
		writeJSON(w, http.StatusInternalServerError, map[string]any{"message": "gathering metrics: " + err.Error()})
		return
	}
	metrics := map[string][]sample{}
	for _, mf := range mfs {
		if !dashboardFamilies[mf.GetName()] {
			continue
		}
		list := make([]sample, 0, len(mf.Metric))
		for _, m := range mf.Metric {
			list = append(list, toSample(m))
		}
		metrics[mf.GetName()] = list
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"time":    time.Now().UTC(),
		"status":  a.g.Status(),
		"metrics": metrics,
	})
}

func toSample(m *dto.Metric) sample {
	s := sample{Labels: make(map[string]string, len(m.Label))}
	for _, l := range m.Label {
		s.Labels[l.GetName()] = l.GetValue()
	}
	switch {
	case m.Counter != nil:
		s.Value = m.Counter.GetValue()
	case m.Gauge != nil:
		s.Value = m.Gauge.GetValue()
	case m.Histogram != nil:
		h := m.Histogram
		s.Value = float64(h.GetSampleCount())
		for _, b := range h.Bucket {
			if !math.IsInf(b.GetUpperBound(), 1) {
				s.Buckets = append(s.Buckets, [2]float64{b.GetUpperBound(), float64(b.GetCumulativeCount())})
			}
		}
		s.Buckets = append(s.Buckets, [2]float64{-1, float64(h.GetSampleCount())}) // +Inf, which JSON cannot write
	}
	return s
}
