// Package kongplugin holds the Kong plugin adapters of sluice, written for
// go-pdk v0.11.0: sluice-rate-limiting (Kong's rate-limiting-advanced over
// package policy), sluice-dimensions (the business plugin over
// policy/dimensions) and sluice-concurrency (concurrent-request leases).
// Each binary under cmd/ serves one plugin with go-pdk's plugin server.
//
// Kong starts a plugin instance, with a freshly decoded config struct, for
// every plugin config, replaces it on every config change, and the go-pdk
// server drops instances after about 60 s. Everything that must outlive an
// instance therefore lives in a Process, one per plugin server: counter
// stores and Redis clients (in a policy.Registry keyed by namespace),
// compiled configs (cached by the hash of their canonical JSON), lease
// stores and quota-override watchers. Config structs only point at it.
//
// Each PDK call is one IPC round trip to Kong; the handlers read only the
// attributes their config needs, set all headers in one call and exit with
// headers included. docs/kong-plugins.md lists the round trips per request.
package kongplugin

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/Kong/go-pdk"

	"github.com/seed-008287da/sluice/internal/repeats"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/policy/field"
)

// ErrInvalidConfig is wrapped by the error of a plugin config that fails
// validation. Kong only type-checks external plugin configs, so this is
// where a bad config shows: every request through the instance gets a 500
// and the error is logged to Kong's error log.
var ErrInvalidConfig = errors.New("kongplugin: invalid config")

// ErrClosed is returned by a Process used after Close.
var ErrClosed = errors.New("kongplugin: process closed")

// Options configures a Process. The zero value is ready to use.
type Options struct {
	// Now is the clock of every decision. Nil means time.Now. Tests pass a
	// fake clock here.
	Now func() time.Time
	// Registry owns the counter stores. Nil means a new policy.Registry,
	// closed by Process.Close, whose Redis state changes the handlers
	// write to Kong's error log with kong.log, one line per change; a
	// Registry passed in is not closed, and reports through its own
	// options.
	Registry *policy.Registry
	// Logger receives process-level events that belong to no request
	// (config-centre errors). Nil means slog.Default(), which a plugin
	// server's Kong writes to its error log.
	Logger *slog.Logger
	// WatchOverrides watches the config centres that sluice-dimensions
	// configs name for live quota overrides. Nil means
	// dimensions.ConfigSourceWatch(Logger).
	WatchOverrides dimensions.WatchFunc
}

// Process is the state one plugin server keeps across plugin instances. It
// is safe for concurrent use: Kong runs every event in its own goroutine.
type Process struct {
	now       func() time.Time
	watch     dimensions.WatchFunc
	log       *slog.Logger
	registry  *policy.Registry
	ownsReg   bool
	dims      compiledCache[*dimsCompiled]
	rla       compiledCache[*rlaCompiled]
	conc      compiledCache[*concCompiled]
	mu        sync.Mutex
	closed    bool
	overrides map[string]*dimensions.Live
	// closeErrs are the errors of closing compiled configs during Close.
	closeMu   sync.Mutex
	closeErrs []error
	storeLog  storeLog
	// repeats thins out the errors met on every request (a failing
	// store, an invalid quota override): one line per interval and kind.
	repeats repeats.Gate
}

// NewProcess returns the state of one plugin server.
func NewProcess(opts Options) *Process {
	p := &Process{now: opts.Now, watch: opts.WatchOverrides, log: opts.Logger, registry: opts.Registry,
		overrides: map[string]*dimensions.Live{}}
	if p.now == nil {
		p.now = time.Now
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	// Evicted compiled configs give their stores and top-keys sketches
	// back to the Registry (cache.go says when).
	p.rla.close = func(rc *rlaCompiled) { p.closed1(rc.adv.Close(), "closing an evicted rate-limiting config") }
	p.conc.close = func(cc *concCompiled) { p.closed1(cc.pol.Close(), "closing an evicted lease store") }
	p.conc.linger = func(cc *concCompiled) time.Duration { return cc.ttl }
	p.rla.linger = func(rc *rlaCompiled) time.Duration {
		var w int64
		for _, s := range rc.cfg.WindowSize {
			w = max(w, s)
		}
		return min(2*time.Duration(w)*time.Second, 24*time.Hour)
	}
	if p.registry == nil {
		p.registry = policy.NewRegistry(policy.RegistryOptions{OnRedisState: p.storeLog.changed})
		p.ownsReg = true
	}
	return p
}

// Close stops the config-centre watchers and closes the lease stores and
// the Registry (when the Process created it). Handlers called afterwards
// answer 500.
func (p *Process) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	watches := p.overrides
	p.overrides = nil
	p.mu.Unlock()
	var errs []error
	for _, w := range watches {
		_ = w.Close() // always nil
	}
	p.rla.closeAll()
	p.conc.closeAll()
	p.closeMu.Lock()
	errs = append(errs, p.closeErrs...)
	p.closeErrs = nil
	p.closeMu.Unlock()
	if p.ownsReg {
		if err := p.registry.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// closed1 reports the error of closing one compiled config: returned by
// Close while the Process closes, logged otherwise.
func (p *Process) closed1(err error, what string) {
	if err == nil {
		return
	}
	p.mu.Lock()
	closing := p.closed
	p.mu.Unlock()
	if !closing {
		p.log.Warn("kongplugin: "+what, "error", err.Error())
		return
	}
	p.closeMu.Lock()
	p.closeErrs = append(p.closeErrs, fmt.Errorf("kongplugin: %s: %w", what, err))
	p.closeMu.Unlock()
}

// internalErrorBody is Kong's body for an unexpected error.
var internalErrorBody = []byte(`{"message":"An unexpected error occurred"}`)

// failConfig answers a request through an instance whose config is
// invalid, as Kong answers a plugin error: 500, and the reason in the log.
func failConfig(kong *pdk.PDK, err error) {
	_ = kong.Log.Err(err.Error())
	kong.Response.Exit(500, internalErrorBody, map[string][]string{"Content-Type": {"application/json; charset=utf-8"}})
}

func joinErrs(errs []string) string { return strings.Join(errs, "; ") }

// A configError lists every problem of one plugin config, each with its
// field path. It wraps ErrInvalidConfig.
type configError struct {
	plugin string
	errs   []field.Error
}

func (e *configError) Error() string {
	parts := make([]string, len(e.errs))
	for i, fe := range e.errs {
		parts[i] = fe.String()
	}
	return ErrInvalidConfig.Error() + ": " + e.plugin + ": " + joinErrs(parts)
}

func (e *configError) Unwrap() error { return ErrInvalidConfig }

// FieldErrors returns the problems.
func (e *configError) FieldErrors() []field.Error { return e.errs }

// appendErr appends err's field errors, their paths under prefix, or err
// as a problem of the whole config when it has none.
func appendErr(errs []field.Error, prefix string, err error) []field.Error {
	if fes, ok := field.Of(err); ok {
		for _, fe := range fes {
			errs = append(errs, fe.Under(prefix))
		}
		return errs
	}
	var fe field.Error
	if errors.As(err, &fe) {
		return append(errs, fe)
	}
	return append(errs, field.Error{Path: "config", Message: err.Error()})
}

// logRepeated writes an error that may recur on every request through
// kong.log at level "err" or "warn", at most once per interval for each
// kind, with the number left out since the previous line.
func (p *Process) logRepeated(kong *pdk.PDK, level, kind, msg string) {
	ok, left := p.repeats.Pass(kind, p.now())
	if !ok {
		return
	}
	if left > 0 {
		msg += " (" + strconv.FormatInt(left, 10) + " more like it since the previous line)"
	}
	if level == "warn" {
		_ = kong.Log.Warn(msg)
		return
	}
	_ = kong.Log.Err(msg)
}
