package kongplugin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"sort"
	"time"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/adminhttp"
	"github.com/seed-008287da/sluice/policy"
)

// The optional local HTTP listener of a plugin server
// (docs/kong-plugins.md): the rate-limiting and concurrency configs this
// process has compiled, one identifier's counter, its reset and the top
// lists, as the gateway's counters API answers them (docs/admin-api.md).

// inspectable is what the compiled configs offer (policy.Advanced and
// policy.Concurrency).
type inspectable interface {
	Info() policy.Info
	Counter(ctx context.Context, identifier string, now time.Time) (policy.Counter, error)
	Reset(ctx context.Context, identifier string, now time.Time) error
	Top(now time.Time, by policy.TopBy, n int) []policy.TopEntry
}

// InspectedPlugin is one compiled config of the process.
type InspectedPlugin struct {
	// ID is the Kong plugin id (__plugin_id), when Kong sent it.
	ID           string `json:"id,omitempty"`
	Name         string `json:"name"`
	InstanceName string `json:"instance_name,omitempty"`
	policy.Info
}

type inspectedPlugin struct {
	InspectedPlugin
	in inspectable
}

// plugins lists the compiled configs, by namespace.
func (p *Process) plugins() []inspectedPlugin {
	var out []inspectedPlugin
	p.rla.each(func(rc *rlaCompiled) {
		k := rc.cfg.Kong
		out = append(out, inspectedPlugin{InspectedPlugin{ID: k.PluginID, Name: "sluice-rate-limiting",
			InstanceName: k.PluginInstanceName, Info: rc.adv.Info()}, rc.adv})
	})
	p.conc.each(func(cc *concCompiled) {
		out = append(out, inspectedPlugin{InspectedPlugin{Name: "sluice-concurrency", Info: cc.pol.Info()}, cc.pol})
	})
	sort.Slice(out, func(i, j int) bool {
		if out[i].Name != out[j].Name {
			return out[i].Name < out[j].Name
		}
		return out[i].Namespace < out[j].Namespace
	})
	return out
}

// plugin finds a compiled config by Kong plugin id, instance name or
// namespace.
func (p *Process) plugin(ref string) (inspectedPlugin, bool) {
	for _, pl := range p.plugins() {
		if ref != "" && (pl.ID == ref || pl.InstanceName == ref || pl.Namespace == ref) {
			return pl, true
		}
	}
	return inspectedPlugin{}, false
}

// InspectHandler serves the inspect calls of the process:
//
//	GET    /rate-limiting/plugins
//	GET    /rate-limiting/plugins/{id, instance_name or namespace}/counters/{identifier}
//	DELETE /rate-limiting/plugins/{id, instance_name or namespace}/counters/{identifier}
//	GET    /rate-limiting/top?plugin=...&by=denied|requests&n=20
//
// A config is listed once Kong has sent it a request. With a token, every
// call must carry it in the Kong-Admin-Token header (401 otherwise); an
// empty token leaves the calls open. Calls that change state are refused
// from another browser origin.
func (p *Process) InspectHandler(token string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /rate-limiting/plugins", func(w http.ResponseWriter, r *http.Request) {
		list := []InspectedPlugin{}
		for _, pl := range p.plugins() {
			list = append(list, pl.InspectedPlugin)
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": list})
	})
	mux.HandleFunc("GET /rate-limiting/top", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		by, byName, n, err := adminhttp.TopQuery(q, "plugin")
		if err != nil {
			writeJSON(w, http.StatusBadRequest, adminhttp.ErrorBody("message", err))
			return
		}
		type list struct {
			Plugin  InspectedPlugin   `json:"plugin"`
			By      string            `json:"by"`
			Entries []policy.TopEntry `json:"top"`
		}
		out := []list{}
		for _, pl := range p.plugins() {
			if ref := q.Get("plugin"); ref != "" && pl.ID != ref && pl.InstanceName != ref && pl.Namespace != ref {
				continue
			}
			out = append(out, list{pl.InspectedPlugin, byName, pl.in.Top(p.now(), by, n)})
		}
		writeJSON(w, http.StatusOK, map[string]any{"data": out})
	})
	message := func(msg string) any { return map[string]string{"message": msg} }
	h := adminhttp.CounterRoutes(adminhttp.JSONErrors(mux, func(_ int, msg string) any { return message(msg) }), p.getCounter, p.deleteCounter, message)
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !adminauth.HasToken(r, token) {
			writeJSON(w, http.StatusUnauthorized, map[string]any{"message": adminauth.UnauthorizedMessage})
			return
		}
		h.ServeHTTP(w, r)
	})
}

func inspectError(w http.ResponseWriter, err error) {
	code := http.StatusServiceUnavailable
	if errors.Is(err, policy.ErrNotInspectable) {
		code = http.StatusNotImplemented
	}
	writeJSON(w, code, map[string]any{"message": err.Error()})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// ListenInspect serves InspectHandler(token) on addr until ctx ends. An
// address reachable from other machines needs a token; a loopback one
// ("127.0.0.1:9901") may do without, and answers only its loopback names
// (421 for another Host). It returns once the listener is
// open, with its address, or with the error that kept it from opening.
func (p *Process) ListenInspect(ctx context.Context, addr, token string) (net.Addr, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, err
	}
	if token == "" && !adminauth.IsLoopback(addr) {
		return nil, errors.New("kongplugin: the inspect listener " + addr + " is reachable from other machines: set -admin-token-file (SLUICE_ADMIN_TOKEN_FILE), or give a loopback address")
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	h := p.InspectHandler(token)
	if adminauth.IsLoopback(addr) {
		// A page on another name resolved to 127.0.0.1 (DNS rebinding)
		// reaches nothing.
		hosts, next := adminauth.NewHosts(adminauth.LoopbackHosts(ln.Addr().String())), h
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !hosts.Allows(r) {
				writeJSON(w, http.StatusMisdirectedRequest, map[string]any{"message": adminauth.HostMessage(r.Host)})
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
	}()
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr(), nil
}

func (p *Process) getCounter(w http.ResponseWriter, r *http.Request) {
	ref, id := r.PathValue("plugin"), r.PathValue("identifier")
	pl, ok := p.plugin(ref)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": noPlugin(ref)})
		return
	}
	c, err := pl.in.Counter(r.Context(), id, p.now())
	if err != nil {
		inspectError(w, err)
		return
	}
	if c.Empty() {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": noCounter(ref, pl, id)})
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Plugin InspectedPlugin `json:"plugin"`
		policy.Counter
	}{pl.InspectedPlugin, c})
}

// deleteCounter resets a counter: 204 when the plugin held a count for
// the identifier, 404 when it held none (see policy.ResetCounter).
func (p *Process) deleteCounter(w http.ResponseWriter, r *http.Request) {
	if !adminauth.SameOrigin(r) {
		writeJSON(w, http.StatusForbidden, map[string]any{"message": "cross-origin calls that change state are refused"})
		return
	}
	ref, id := r.PathValue("plugin"), r.PathValue("identifier")
	pl, ok := p.plugin(ref)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": noPlugin(ref)})
		return
	}
	held, err := policy.ResetCounter(r.Context(), pl.in, id, p.now())
	if err != nil {
		p.log.Error("kongplugin: resetting a counter failed", "plugin", pl.Name, "namespace", pl.Namespace, "identifier", id, "error", err)
		inspectError(w, err)
		return
	}
	p.log.Info("kongplugin: counter reset", "plugin", pl.Name, "namespace", pl.Namespace, "identifier", id, "held", held)
	if !held {
		writeJSON(w, http.StatusNotFound, map[string]any{"message": noCounter(ref, pl, id) + "; nothing was reset"})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func noPlugin(ref string) string {
	return "no rate-limiting plugin with that id, instance_name or namespace: '" + ref + "'"
}

func noCounter(ref string, pl inspectedPlugin, id string) string {
	return "no counter for identifier '" + id + "' in plugin '" + ref + "' (identifier: " + pl.Identifier + ")"
}
