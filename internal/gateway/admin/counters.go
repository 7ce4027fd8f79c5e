package admin

import (
	"errors"
	"io"
	"mime"
	"net/http"

	"github.com/seed-008287da/sluice/internal/adminhttp"
	"github.com/seed-008287da/sluice/internal/gateway"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/field"
)

// The counters API (docs/admin-api.md).

// maxExplainBody bounds a POST /rate-limiting/explain body.
const maxExplainBody = 1 << 20

// pluginRef names the instance an answer is about.
type pluginRef struct {
	ID           string `json:"id"`
	Name         string `json:"name"`
	InstanceName string `json:"instance_name,omitempty"`
}

func (a *api) counterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /rate-limiting/plugins", a.listPlugins)
	mux.HandleFunc("POST /rate-limiting/explain", a.explain)
	mux.HandleFunc("GET /rate-limiting/top", a.top)
}

// inspectError answers an error of the counters API.
func inspectError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, gateway.ErrNoConfig), errors.Is(err, gateway.ErrNoPlugin):
		writeJSON(w, http.StatusNotFound, map[string]any{"message": err.Error()})
	case errors.Is(err, policy.ErrNotInspectable):
		writeJSON(w, http.StatusNotImplemented, map[string]any{"message": err.Error()})
	default:
		// The store failed (Redis refused or did not answer).
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"message": err.Error()})
	}
}

func (a *api) listPlugins(w http.ResponseWriter, r *http.Request) {
	ps, err := a.g.RateLimitPlugins()
	if err != nil {
		inspectError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": ps})
}

func (a *api) getCounter(w http.ResponseWriter, r *http.Request) {
	ref, id := r.PathValue("plugin"), r.PathValue("identifier")
	p, err := a.g.RateLimitPlugin(ref)
	if err != nil {
		inspectError(w, err)
		return
	}
	c, found, err := a.g.PluginCounter(r.Context(), ref, id)
	if err != nil {
		inspectError(w, err)
		return
	}
	if !found {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": noCounter(p, ref, id)})
		return
	}
	ans := struct {
		Plugin pluginRef `json:"plugin"`
		policy.Counter
		Consumer *gateway.ConsumerRef `json:"consumer,omitempty"`
	}{Plugin: pluginRef{p.ID, p.Name, p.InstanceName}, Counter: c}
	if cr, ok := a.g.PluginConsumer(ref, id); ok {
		ans.Consumer = &cr
	}
	writeJSON(w, http.StatusOK, ans)
}

func (a *api) deleteCounter(w http.ResponseWriter, r *http.Request) {
	ref, id := r.PathValue("plugin"), r.PathValue("identifier")
	held, err := a.g.ResetCounter(r.Context(), ref, id)
	if err != nil {
		inspectError(w, err)
		return
	}
	if !held {
		p, _ := a.g.RateLimitPlugin(ref) // the zero value if a reload took it away meanwhile
		writeJSON(w, http.StatusNotFound, map[string]any{"message": noCounter(p, ref, id) + "; nothing was reset"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// noCounter says that instance p (ref) holds no counter for id, and what
// it counts by.
func noCounter(p gateway.RateLimitPlugin, ref, id string) string {
	msg := "no counter for identifier " + quote(id) + " in plugin " + quote(ref)
	if p.Identifier != "" {
		msg += " (identifier: " + p.Identifier + ")"
	}
	return msg
}

func (a *api) explain(w http.ResponseWriter, r *http.Request) {
	var req gateway.ExplainRequest
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct != "" && ct != "application/json" {
		writeJSON(w, http.StatusUnsupportedMediaType, map[string]any{"message": "content type " + quote(ct) + " is not accepted here: the request to explain is a JSON object (application/json)"})
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxExplainBody))
	if err != nil {
		code := http.StatusBadRequest
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			code = http.StatusRequestEntityTooLarge
		}
		writeJSON(w, code, map[string]any{"message": "reading the request to explain: " + err.Error()})
		return
	}
	if err := field.Decode("", body, &req); err != nil {
		ans := map[string]any{"message": err.Error()}
		if fe, ok := errors.AsType[field.Error](err); ok && fe.Path != "" {
			ans["field"] = fe.Path
		}
		writeJSON(w, http.StatusBadRequest, ans)
		return
	}
	ex, err := a.g.Explain(r.Context(), req)
	var pe *gateway.ExplainError
	switch {
	case errors.As(err, &pe):
		writeJSON(w, http.StatusBadRequest, map[string]any{"message": err.Error(), "field": pe.Field})
		return
	case err != nil:
		inspectError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, ex)
}

func (a *api) top(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by, _, n, err := adminhttp.TopQuery(q, "plugin")
	if err != nil {
		writeJSON(w, http.StatusBadRequest, adminhttp.ErrorBody("message", err))
		return
	}
	lists, err := a.g.Top(q.Get("plugin"), by, n)
	if err != nil {
		inspectError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"data": lists})
}
