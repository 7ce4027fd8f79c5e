package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/buildinfo"
	"github.com/seed-008287da/sluice/internal/configsource"
	"github.com/seed-008287da/sluice/internal/decision"
)

type flags struct {
	config            string
	runtimeRoot       string
	runtimeSub        string
	runtimeApp        string
	runtimeWatchRoot  bool
	runtimeIgnoreDots bool
	mergeDomains      bool
	healthyWithConfig bool
	grpcListen        string
	httpListen        string
	check             bool
	version           bool
	watch             bool
	logLevel          string
	logFormat         string
	shutdownTimeout   time.Duration
	topKeys           int
	quotaMode         bool
	shadowMode        bool
	dynamicMetadata   bool
	responseHeaders   bool
	limitHeader       string
	remainingHeader   string
	resetHeader       string
	nearLimitRatio    float64
	localCacheBytes   int

	stopIncrement   bool
	envoyKeys       bool
	countDenied     bool
	adminToken      string
	adminTokenFile  string
	statsd          string
	statsdInterval  time.Duration
	statsdProtocol  string
	dogstatsd       bool
	statsdTags      string
	mogrifiers      []decision.Mogrifier // from USE_DOG_STATSD_MOGRIFIERS
	debugListen     string
	grpcCert        string
	grpcKey         string
	grpcClientCA    string
	grpcMaxAge      time.Duration
	grpcMaxAgeGrace time.Duration
	streamWorkers   int

	store    *decision.StoreConfig // from REDIS_*, nil for the file's
	warnings []string              // about the environment, logged once the logger exists
}

// runtimeDir is the directory of configuration files in the peer's layout.
func (f *flags) runtimeDir() string {
	return filepath.Join(f.runtimeRoot, f.runtimeSub, f.runtimeApp)
}

func parseFlags(args []string, getenv func(string) (string, bool), stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "c", "", "configuration `file` (envoyproxy/ratelimit YAML plus sluice settings); without it, the directory -runtime-root/-runtime-subdirectory/-runtime-appdirectory")
	fs.StringVar(&f.runtimeRoot, "runtime-root", "/srv/runtime_data/current", "envoyproxy/ratelimit's RUNTIME_ROOT: the `directory` above the configuration files")
	fs.StringVar(&f.runtimeSub, "runtime-subdirectory", "", "RUNTIME_SUBDIRECTORY: the `directory` below -runtime-root")
	fs.StringVar(&f.runtimeApp, "runtime-appdirectory", "config", "RUNTIME_APPDIRECTORY: the `directory` of the files below -runtime-subdirectory")
	fs.BoolVar(&f.runtimeWatchRoot, "runtime-watch-root", true, "RUNTIME_WATCH_ROOT: also reload when -runtime-root itself is replaced (a symlink swap)")
	fs.BoolVar(&f.runtimeIgnoreDots, "runtime-ignore-dotfiles", false, "RUNTIME_IGNOREDOTFILES: leave out files whose names start with \".\"")
	fs.BoolVar(&f.mergeDomains, "merge-domains", false, "MERGE_DOMAIN_CONFIG: merge a domain given in several files of the directory")
	fs.BoolVar(&f.healthyWithConfig, "healthy-with-config", false, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED: unhealthy until a configuration with a domain is loaded")
	fs.StringVar(&f.grpcListen, "grpc", "127.0.0.1:8081", "gRPC listen `address` (RateLimitService and health), or unix:PATH; loopback unless told otherwise (0.0.0.0:8081)")
	fs.StringVar(&f.httpListen, "http", "127.0.0.1:8080", "HTTP listen `address` (/v1/decide, /json, /check, /status, /healthcheck, /metrics), or unix:PATH; loopback unless told otherwise; empty disables it")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.BoolVar(&f.check, "check", false, "validate the configuration, print every error, and exit")
	fs.BoolVar(&f.watch, "watch", true, "reload the configuration when it changes")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "log `format`: text or json")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight calls may take to finish on shutdown")
	fs.IntVar(&f.topKeys, "top-keys", 128, "descriptors each domain tracks per 10 seconds for GET /rate-limiting/top (memory: 6 x this many entries per domain); 0 disables the top lists")
	fs.BoolVar(&f.stopIncrement, "stop-increment-when-over-limit", false, "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: count none of a request's descriptors when any would be over its limit")
	fs.BoolVar(&f.envoyKeys, "envoy-key-layout", false, "with REDIS_URL: keep counters in envoyproxy/ratelimit's Redis keys (CACHE_KEY_PREFIX starts them), so both continue each other's counters")
	fs.BoolVar(&f.countDenied, "count-denied", false, "count a denied call's hits anyway, as envoyproxy/ratelimit does (default: all or nothing)")
	fs.StringVar(&f.statsd, "statsd", "", "send envoyproxy/ratelimit's statistics to this statsd `host:port` (USE_STATSD, STATSD_HOST, STATSD_PORT); empty: off")
	fs.StringVar(&f.statsdProtocol, "statsd-protocol", "", "STATSD_PROTOCOL: `udp` or tcp; empty: udp, or tcp for plain statsd set by envoyproxy/ratelimit's variables (its gostats default)")
	fs.DurationVar(&f.statsdInterval, "statsd-interval", 10*time.Second, "STATS_FLUSH_INTERVAL: how often statistics are sent")
	fs.BoolVar(&f.dogstatsd, "dogstatsd", false, "USE_DOG_STATSD: DogStatsD lines, with -statsd-tags")
	fs.StringVar(&f.statsdTags, "statsd-tags", "", "EXTRA_TAGS: `k1:v1,k2:v2` added to every DogStatsD line")
	fs.StringVar(&f.debugListen, "debug", "", "debug listen `address` (/rlconfig, /stats, /debug/pprof/; DEBUG_HOST, DEBUG_PORT); empty: off")
	fs.StringVar(&f.grpcCert, "grpc-tls-cert", "", "GRPC_SERVER_TLS_CERT: serve gRPC over TLS with this certificate `file` (PEM)")
	fs.StringVar(&f.grpcKey, "grpc-tls-key", "", "GRPC_SERVER_TLS_KEY: the certificate's key `file` (PEM)")
	fs.StringVar(&f.grpcClientCA, "grpc-client-ca", "", "GRPC_CLIENT_TLS_CACERT: require client certificates signed by this CA `file` (mTLS)")
	fs.DurationVar(&f.grpcMaxAge, "grpc-max-connection-age", 0, "GRPC_MAX_CONNECTION_AGE: close gRPC connections after this long (GOAWAY); 0: never")
	fs.DurationVar(&f.grpcMaxAgeGrace, "grpc-max-connection-age-grace", 0, "GRPC_MAX_CONNECTION_AGE_GRACE: then force them closed after this long")
	fs.IntVar(&f.streamWorkers, "grpc-stream-workers", decision.DefaultStreamWorkers, "SLUICE_GRPC_STREAM_WORKERS: serve gRPC calls on this many long-lived goroutines (a call finding all busy gets its own); 0: a new goroutine per call")
	fs.BoolVar(&f.quotaMode, "quota-mode", false, "QUOTA_MODE: every descriptor is a quota (over limit only when all quota descriptors are)")
	fs.BoolVar(&f.shadowMode, "shadow-mode", false, "SHADOW_MODE: answer OK to every request; statuses still tell")
	fs.BoolVar(&f.dynamicMetadata, "response-dynamic-metadata", false, "RESPONSE_DYNAMIC_METADATA: fill the response's dynamic_metadata")
	fs.BoolVar(&f.responseHeaders, "response-headers", false, "LIMIT_RESPONSE_HEADERS_ENABLED: add the RateLimit-* headers to every response")
	fs.StringVar(&f.limitHeader, "limit-header", "RateLimit-Limit", "LIMIT_LIMIT_HEADER: the `name` of the limit header")
	fs.StringVar(&f.remainingHeader, "remaining-header", "RateLimit-Remaining", "LIMIT_REMAINING_HEADER: the `name` of the remaining header")
	fs.StringVar(&f.resetHeader, "reset-header", "RateLimit-Reset", "LIMIT_RESET_HEADER: the `name` of the reset header")
	fs.Float64Var(&f.nearLimitRatio, "near-limit-ratio", 0.8, "NEAR_LIMIT_RATIO: the share of a limit above which hits count as near_limit (0 to 1)")
	fs.StringVar(&f.adminToken, "admin-token", "", "SLUICE_ADMIN_TOKEN: `token` the counters calls (GET and DELETE /rate-limiting/counters, GET /rate-limiting/top) must carry in Kong-Admin-Token; empty leaves them open (a warning when -http is not on loopback)")
	fs.StringVar(&f.adminTokenFile, "admin-token-file", "", "SLUICE_ADMIN_TOKEN_FILE: `file` holding the -admin-token (kept off the command line, which every local user can read)")
	fs.IntVar(&f.localCacheBytes, "local-cache-bytes", 0, "LOCAL_CACHE_SIZE_IN_BYTES: remember keys over their limit for their window, in about this many `bytes`; 0 disables")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.version {
		return f, nil
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if err := applyEnv(f, fs, set, getenv); err != nil {
		return nil, err
	}
	if (f.grpcCert == "") != (f.grpcKey == "") {
		return nil, errors.New("-grpc-tls-cert and -grpc-tls-key go together")
	}
	if f.grpcClientCA != "" && f.grpcCert == "" {
		return nil, errors.New("-grpc-client-ca needs -grpc-tls-cert and -grpc-tls-key")
	}
	if f.statsdTags != "" && !f.dogstatsd {
		return nil, errors.New("-statsd-tags (EXTRA_TAGS) needs -dogstatsd (USE_DOG_STATSD): plain statsd has no tags")
	}
	if f.nearLimitRatio <= 0 || f.nearLimitRatio > 1 {
		return nil, fmt.Errorf("-near-limit-ratio: %v is not in (0, 1]", f.nearLimitRatio)
	}
	if f.localCacheBytes < 0 {
		return nil, fmt.Errorf("-local-cache-bytes: %d is negative", f.localCacheBytes)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return nil, fmt.Errorf("-log-format: unknown format %q (want text or json)", f.logFormat)
	}
	if f.adminTokenFile != "" {
		if f.adminToken != "" {
			return nil, errors.New("-admin-token and -admin-token-file: give one")
		}
		tok, err := adminauth.ReadTokenFile(f.adminTokenFile)
		if err != nil {
			return nil, fmt.Errorf("-admin-token-file: %w", err)
		}
		f.adminToken = tok
	}
	return f, nil
}

// run is main without the process: it returns the exit code. hup delivers
// reload requests (SIGHUP); getenv reads the environment.
func run(ctx context.Context, args []string, getenv func(string) (string, bool), hup <-chan os.Signal, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sluice-decision: %v\n", err)
		return 2
	}
	if f.version {
		fmt.Fprintf(stdout, "sluice-decision %s\n", buildinfo.String())
		return 0
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		fmt.Fprintf(stderr, "sluice-decision: -log-level: %v\n", err)
		return 2
	}
	hopts := &slog.HandlerOptions{Level: level}
	var handler slog.Handler = slog.NewTextHandler(stderr, hopts)
	if f.logFormat == "json" {
		handler = slog.NewJSONHandler(stderr, hopts)
	}
	log := slog.New(handler)
	for _, w := range f.warnings {
		log.Warn("sluice-decision: " + w)
	}
	if f.check {
		if err := f.parse(); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: configuration is valid\n", f.source())
		return 0
	}
	if err := serve(ctx, f, hup, log, stdout); err != nil {
		log.Error("sluice-decision stopped", "err", err)
		return 1
	}
	return 0
}

// source names where the configuration comes from.
func (f *flags) source() string {
	if f.config != "" {
		return f.config
	}
	return f.runtimeDir()
}

// parse validates the configuration without opening a store.
func (f *flags) parse() error {
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return err
		}
		_, err = decision.Parse(data)
		return err
	}
	files, err := f.files()
	if err != nil {
		return err
	}
	_, err = decision.ParseFiles(files, decision.ParseOptions{MergeDomains: f.mergeDomains})
	return err
}

// files reads the runtime directory.
func (f *flags) files() ([]decision.File, error) {
	entries, err := configsource.ReadDir(f.runtimeDir(), f.runtimeIgnoreDots)
	if err != nil {
		return nil, err
	}
	return toFiles(entries), nil
}

func toFiles(entries []configsource.Entry) []decision.File {
	files := make([]decision.File, len(entries))
	for i, e := range entries {
		files[i] = decision.File{Name: e.Key, Data: e.Value}
	}
	return files
}

// options are the service's options from the flags.
func (f *flags) options(log *slog.Logger, reg *prometheus.Registry) decision.Options {
	o := decision.Options{Logger: log, Registry: reg, HealthyWithConfig: f.healthyWithConfig,
		MergeDomains: f.mergeDomains, StartInvalid: true, QuotaMode: f.quotaMode, ShadowMode: f.shadowMode,
		DynamicMetadata: f.dynamicMetadata, NearLimitRatio: f.nearLimitRatio, LocalCacheBytes: f.localCacheBytes,
		TopKeys: topKeys(f.topKeys), Store: f.store, PeerStats: f.statsd != "" || f.debugListen != "",
		StopIncrementWhenOverLimit: f.stopIncrement, CountDenied: f.countDenied, AdminToken: f.adminToken}
	if f.responseHeaders {
		o.ResponseHeaders = &decision.HeaderNames{Limit: f.limitHeader, Remaining: f.remainingHeader, Reset: f.resetHeader}
	}
	return o
}

// load opens the service over the configuration as it is now.
func (f *flags) load(opts decision.Options) (*decision.Service, error) {
	if f.config != "" {
		return decision.OpenFile(f.config, opts)
	}
	files, err := f.files()
	if err != nil {
		return nil, err
	}
	return decision.OpenFiles(files, opts)
}

// reload reads the configuration again (SIGHUP).
func (f *flags) reload(svc *decision.Service) error {
	if f.config != "" {
		data, err := os.ReadFile(f.config)
		if err != nil {
			return err
		}
		return svc.Reload(data)
	}
	files, err := f.files()
	if err != nil {
		return err
	}
	return svc.ReloadFiles(files)
}

// watch starts the watcher of the configuration.
func (f *flags) startWatch(ctx context.Context, svc *decision.Service, log *slog.Logger) (configsource.Source, error) {
	h := configsource.Handlers{
		Apply: func(d configsource.Document) error {
			if d.Entries != nil {
				return svc.ReloadFiles(toFiles(d.Entries))
			}
			return svc.Reload(d.Data)
		},
		Error: func(err error) { log.Warn("decision: config watch", "err", err) },
	}
	if f.config != "" {
		return configsource.OpenFile(ctx, f.config, configsource.FileOptions{Handlers: h, StartRejected: true})
	}
	opts := configsource.DirOptions{Handlers: h, IgnoreDotFiles: f.runtimeIgnoreDots, StartRejected: true}
	if f.runtimeWatchRoot {
		opts.Root = f.runtimeRoot
	}
	return configsource.OpenDir(ctx, f.runtimeDir(), opts)
}

// grpcOptions are the gRPC server's TLS and keepalive options.
func (f *flags) grpcOptions() ([]grpc.ServerOption, error) {
	var opts []grpc.ServerOption
	if f.streamWorkers < 0 {
		return nil, fmt.Errorf("-grpc-stream-workers (SLUICE_GRPC_STREAM_WORKERS): must be 0 or more, got %d", f.streamWorkers)
	}
	opts = append(opts, grpc.NumStreamWorkers(uint32(f.streamWorkers)))
	if f.grpcMaxAge > 0 {
		opts = append(opts, grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: f.grpcMaxAge, MaxConnectionAgeGrace: f.grpcMaxAgeGrace}))
	}
	if f.grpcCert == "" {
		return opts, nil
	}
	cert, err := tls.LoadX509KeyPair(f.grpcCert, f.grpcKey)
	if err != nil {
		return nil, fmt.Errorf("-grpc-tls-cert/-grpc-tls-key: %w", err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if f.grpcClientCA != "" {
		pem, err := os.ReadFile(f.grpcClientCA)
		if err != nil {
			return nil, fmt.Errorf("-grpc-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-grpc-client-ca %s: no PEM certificate in it", f.grpcClientCA)
		}
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return append(opts, grpc.Creds(credentials.NewTLS(tc))), nil
}

// parseTags reads "k1:v1,k2:v2".
func parseTags(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	tags := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), ":")
		if !ok || k == "" {
			return nil, fmt.Errorf("-statsd-tags (EXTRA_TAGS) %q: want k1:v1,k2:v2", s)
		}
		tags[k] = v
	}
	return tags, nil
}

// listen opens a TCP listener, or a Unix socket for "unix:PATH" (a stale
// socket file left by an earlier run is replaced).
func listen(addr string) (net.Listener, error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path)
		}
		return net.Listen("unix", path)
	}
	return net.Listen("tcp", addr)
}

func serve(ctx context.Context, f *flags, hup <-chan os.Signal, log *slog.Logger, stdout io.Writer) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// The HTTP listener opens first: on loopback, the counters calls
	// answer only the loopback names of its port.
	var hl net.Listener
	if f.httpListen != "" {
		l, err := listen(f.httpListen)
		if err != nil {
			return fmt.Errorf("http listener: %w", err)
		}
		hl = l
		defer hl.Close()
	}
	opts := f.options(log, reg)
	if hl != nil && adminauth.IsLoopback(f.httpListen) {
		opts.AdminHosts = adminauth.LoopbackHosts(hl.Addr().String())
	}
	svc, err := f.load(opts)
	if err != nil {
		return err
	}
	defer svc.Close()

	if f.watch {
		src, err := f.startWatch(ctx, svc, log)
		if err != nil {
			return err
		}
		defer src.Close()
	}

	if f.statsd != "" {
		tags, err := parseTags(f.statsdTags)
		if err != nil {
			return err
		}
		sink, err := svc.StartStatsd(decision.StatsdOptions{Addr: f.statsd, Protocol: f.statsdProtocol, Interval: f.statsdInterval, Dogstatsd: f.dogstatsd, Tags: tags, Mogrifiers: f.mogrifiers})
		if err != nil {
			return err
		}
		defer sink.Close()
		log.Info("statsd", "addr", f.statsd, "protocol", cmp.Or(f.statsdProtocol, "udp"), "interval", f.statsdInterval.String())
	}
	gopts, err := f.grpcOptions()
	if err != nil {
		return err
	}
	gl, err := listen(f.grpcListen)
	if err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}
	gs := decision.NewGRPCServer(svc, gopts...)
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	fmt.Fprintf(stdout, "grpc listening on %s\n", gl.Addr())
	log.Info("grpc listening", "addr", gl.Addr().String())

	if f.debugListen != "" {
		dl, err := listen(f.debugListen)
		if err != nil {
			gs.Stop()
			return fmt.Errorf("debug listener: %w", err)
		}
		ds := &http.Server{Handler: svc.DebugHandler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = ds.Serve(dl) }()
		defer ds.Close()
		fmt.Fprintf(stdout, "debug listening on %s\n", dl.Addr())
		log.Info("debug listening", "addr", dl.Addr().String())
		if !adminauth.IsLoopback(f.debugListen) {
			log.Warn(debugPortWarning, "addr", f.debugListen)
		}
	}

	var hs *http.Server
	if hl != nil {
		hs = &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() {
			if err := hs.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		fmt.Fprintf(stdout, "http listening on %s\n", hl.Addr())
		log.Info("http listening", "addr", hl.Addr().String())
		if f.adminToken == "" && !adminauth.IsLoopback(f.httpListen) {
			// Not refused: the container image and the Helm chart listen on
			// 0.0.0.0 without a token (docs/decision-service.md).
			log.Warn("the HTTP port is not on loopback and -admin-token is not set: anyone who reaches it can read and reset counters", "addr", f.httpListen)
		}
	}

	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "timeout", f.shutdownTimeout.String())
			break loop
		case <-hup:
			if err := f.reload(svc); err != nil {
				log.Error("decision: SIGHUP reload rejected", "err", err)
			}
		case serveErr = <-errc:
			break loop
		}
	}

	// Health answers NOT_SERVING from now on, so probes take the
	// instance out while in-flight calls finish.
	svc.Drain()
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if hs != nil {
		_ = hs.Shutdown(sctx) // connections still open at the deadline are dropped by Close below
		_ = hs.Close()
	}
	stopped := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-sctx.Done():
		gs.Stop()
		<-stopped
	}
	return serveErr
}

// topKeys maps -top-keys onto decision.Options.TopKeys, where 0 means the
// default and a negative value none.
func topKeys(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// debugPortWarning is logged when the debug port, which has no token, is
// not on loopback.
const debugPortWarning = "the debug port is not on loopback: anyone who reaches it can read the configuration (/rlconfig), the statistics and profiles (/debug/pprof/)"
