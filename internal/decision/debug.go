package decision

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"sort"
	"strings"
)

// DebugHandler returns envoyproxy/ratelimit's debug port:
//
//	GET /               the list of endpoints
//	GET /rlconfig       the configuration in use, one line per limit
//	GET /stats          envoyproxy/ratelimit's statistics, "name: value"
//	    /debug/pprof/   Go's profiles
//
// It shows no secrets, but profiles reveal the process: serve it on
// loopback or a private network.
func (s *Service) DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "/debug/pprof/: root of various pprof endpoints. hit for help.\n/rlconfig: print out the currently loaded configuration for debugging\n/stats: print out stats\n")
	})
	mux.HandleFunc("GET /rlconfig", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, s.Dump())
	})
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		for _, st := range s.PeerStats() {
			fmt.Fprintf(w, "%s: %d\n", st.Name, st.Value)
		}
	})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// Dump describes the configuration in use, one line per configured limit
// in the form of envoyproxy/ratelimit's /rlconfig:
//
//	domain.key_value.key: unit=MINUTE requests_per_unit=10, shadow_mode: false, quota_mode: false
//
// sorted; empty while no configuration is loaded.
func (s *Service) Dump() string {
	cfg := s.gen.Load().cfg
	if cfg == nil {
		return ""
	}
	var lines []string
	var walk func(prefix string, ds []Descriptor)
	walk = func(prefix string, ds []Descriptor) {
		for _, d := range ds {
			k := prefix + "." + d.Key
			if d.Value != "" {
				k += "_" + d.Value
			}
			if rl := d.RateLimit; rl != nil {
				switch {
				case rl.Unlimited:
					lines = append(lines, fmt.Sprintf("%s: unlimited, shadow_mode: %t, quota_mode: %t", k, d.ShadowMode, d.QuotaMode))
				default:
					var parts []string
					for _, l := range rl.Limits {
						p := fmt.Sprintf("unit=%s requests_per_unit=%d", l.Unit, l.RequestsPerUnit)
						if l.Multiplier > 1 {
							p += fmt.Sprintf(" unit_multiplier=%d", l.Multiplier)
						}
						p += " algorithm=" + l.Algorithm.String()
						parts = append(parts, p)
					}
					lines = append(lines, fmt.Sprintf("%s: %s, shadow_mode: %t, quota_mode: %t", k, strings.Join(parts, "; "), d.ShadowMode, d.QuotaMode))
				}
			}
			walk(k, d.Descriptors)
		}
	}
	for _, dom := range cfg.Domains {
		walk(dom.Name, dom.Descriptors)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}
