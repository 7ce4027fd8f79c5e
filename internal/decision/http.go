package decision

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/adminhttp"
)

// maxBody bounds a decide request body.
const maxBody = 1 << 20

// Handler returns the HTTP face of s, for gateways that do not speak gRPC:
//
//	POST /v1/decide   a RateLimitRequest as JSON (protobuf JSON mapping:
//	                  {"domain": ..., "descriptors": [{"entries": [{"key":
//	                  ..., "value": ...}]}], "hits_addend": n}) answered
//	                  with the RateLimitResponse as JSON, status 200 when
//	                  OK and 429 when over limit
//	POST /json        the same, under envoyproxy/ratelimit's path and with
//	                  its camelCase field names
//	GET  /check       for nginx auth_request and Traefik forwardAuth: the
//	                  original request from the proxy's headers, 200 or
//	                  the configured deny status with the rate-limit
//	                  headers (see CheckConfig)
//	GET  /status      the configuration in use and reload health
//	GET  /healthcheck "OK", or 500 while unhealthy (see Healthy), as
//	                  envoyproxy/ratelimit answers its probes
//	GET  /metrics     Prometheus metrics (see Registry)
//	GET|DELETE /rate-limiting/counters?domain=D&key=K&value=V...
//	                  one descriptor's counter, or its reset (204)
//	GET  /rate-limiting/top?domain=D&by=denied|requests&n=20
//	                  the heaviest descriptors of the last minute
//
// The counters calls need Kong-Admin-Token when Options.AdminToken is set,
// and answer only the Options.AdminHosts names when set.
// A request that cannot be decided gets 400, a store failure 503, each with
// {"error": "..."}. Unknown JSON fields are errors.
func (s *Service) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/decide", func(w http.ResponseWriter, r *http.Request) { s.serveDecide(w, r, snakeJSON) })
	mux.HandleFunc("POST /json", func(w http.ResponseWriter, r *http.Request) { s.serveDecide(w, r, camelJSON) })
	mux.HandleFunc("/check", s.serveCheck)
	mux.HandleFunc("GET /status", s.serveStatus)
	mux.HandleFunc("GET /healthcheck", s.serveHealth)
	mux.Handle("GET /metrics", s.metricsHandler())
	mux.HandleFunc("GET /rate-limiting/counters", s.admin(s.serveCounter))
	mux.HandleFunc("DELETE /rate-limiting/counters", s.admin(s.serveReset))
	mux.HandleFunc("GET /rate-limiting/top", s.admin(s.serveTop))
	return adminhttp.JSONErrors(mux, func(_ int, msg string) any { return map[string]string{"error": msg} })
}

// admin guards a counters call: the Host must be one of
// Options.AdminHosts (when set), and the call must carry
// Options.AdminToken (when set).
func (s *Service) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !s.adminHosts.Allows(r) {
			writeError(w, http.StatusMisdirectedRequest, adminauth.HostMessage(r.Host))
			return
		}
		if s.adminToken != "" && !adminauth.HasToken(r, s.adminToken) {
			writeError(w, http.StatusUnauthorized, adminauth.UnauthorizedMessage)
			return
		}
		h(w, r)
	}
}

func writeJSONValue(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// /v1/decide answers with the proto field names (overall_code), /json
// with the JSON names envoyproxy/ratelimit's /json endpoint writes
// (overallCode). Both accept either form in requests.
var (
	snakeJSON = protojson.MarshalOptions{UseProtoNames: true}
	camelJSON = protojson.MarshalOptions{}
)

func (s *Service) serveDecide(w http.ResponseWriter, r *http.Request, jsonOut protojson.MarshalOptions) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, "decision: reading the request body: "+err.Error())
		return
	}
	var req rlspb.RateLimitRequest
	if err := protojson.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, "decision: decoding the request: "+err.Error())
		return
	}
	start := time.Now()
	resp, err := s.Decide(r.Context(), &req, s.now())
	s.m.observe(viaHTTP, start, resp, err)
	if err != nil {
		code := http.StatusServiceUnavailable
		if errors.Is(err, ErrInvalidRequest) {
			code = http.StatusBadRequest
		}
		writeError(w, code, err.Error())
		return
	}
	out, err := jsonOut.Marshal(resp)
	if err != nil {
		writeError(w, http.StatusInternalServerError, "decision: encoding the response: "+err.Error())
		return
	}
	code := http.StatusOK
	if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
		code = http.StatusTooManyRequests
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(out)
}

// serveHealth answers "OK", or 500 while the service is unhealthy, as
// envoyproxy/ratelimit answers its probes.
func (s *Service) serveHealth(w http.ResponseWriter, _ *http.Request) {
	if !s.Healthy() {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	_, _ = io.WriteString(w, "OK")
}

func writeError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": msg})
}

// Status is the body of GET /status.
type Status struct {
	// Generation counts configurations: 1 for the one loaded at start, 0
	// while none is loaded.
	Generation uint64 `json:"generation"`
	// LoadedAt is when the configuration in use was loaded.
	LoadedAt time.Time `json:"loaded_at"`
	// ConfigSHA256 is the digest of the file the configuration was reloaded
	// from; empty for the configuration given to New.
	ConfigSHA256 string `json:"config_sha256,omitempty"`
	// Store is the store type.
	Store string `json:"store"`
	// Domains are the configured domains, sorted.
	Domains []string `json:"domains"`
	// ReloadErrors counts rejected reloads since start.
	ReloadErrors int64 `json:"reload_errors"`
	// LastReloadError is the error of the last reload when it was rejected.
	LastReloadError string `json:"last_reload_error,omitempty"`
	// Healthy is what /healthcheck and gRPC health answer (see
	// Service.Healthy).
	Healthy bool `json:"healthy"`
}

// Status reports the configuration in use.
func (s *Service) Status() Status {
	g := s.gen.Load()
	st := Status{
		Generation:   g.number,
		ConfigSHA256: g.digest,
		Domains:      []string{},
		ReloadErrors: s.reloadErrors.Load(),
		Healthy:      s.Healthy(),
	}
	if g.cfg != nil {
		st.LoadedAt = g.loaded.UTC()
		st.Store = g.cfg.Store.Type
		for _, d := range g.cfg.Domains {
			st.Domains = append(st.Domains, d.Name)
		}
	}
	sort.Strings(st.Domains)
	if e := s.lastError.Load(); e != nil {
		st.LastReloadError = *e
	}
	return st
}

func (s *Service) serveStatus(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(s.Status())
}
