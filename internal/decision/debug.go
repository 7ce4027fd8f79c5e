package decision

import (
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
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
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		// pprof.Cmdline would print a token given on the command line.
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, strings.Join(redactArgs(os.Args), "\x00"))
	})
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// redactArgs returns a copy of a command line with the value of every
// flag whose name holds "token", "password" or "auth" (but not a "-file"
// flag, whose value is a path) replaced by xxxxx, in both forms
// "-name=value" and "-name value".
func redactArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	secret := func(name string) bool {
		name = strings.ToLower(name)
		return !strings.HasSuffix(name, "-file") &&
			(strings.Contains(name, "token") || strings.Contains(name, "password") || strings.Contains(name, "auth"))
	}
	for i := 1; i < len(out); i++ {
		a := out[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !secret(name) {
			continue
		}
		if hasValue {
			out[i] = a[:strings.IndexByte(a, '=')+1] + "xxxxx"
		} else if i+1 < len(out) {
			i++
			out[i] = "xxxxx"
		}
	}
	return out
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
