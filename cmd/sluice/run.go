package main

import (
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
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seed-008287da/sluice/internal/adminauth"
	"github.com/seed-008287da/sluice/internal/buildinfo"
	"github.com/seed-008287da/sluice/internal/configsource"
	"github.com/seed-008287da/sluice/internal/gateway"
	"github.com/seed-008287da/sluice/internal/gateway/admin"
	"github.com/seed-008287da/sluice/internal/gateway/clientip"
	"github.com/seed-008287da/sluice/internal/gateway/echo"
	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy"
)

const usage = `Usage:
  sluice [run] -c kong.yml [flags]   serve the proxy and the admin API (default command)
  sluice validate kong.yml           check a configuration, print every error, exit 1 if invalid
  sluice version                     print the version (also --version)
  sluice help                        print this help (also -h, --help)

Run "sluice run -h" for the flags. Every flag can also be set with an
environment variable: SLUICE_ and the flag name in upper case with _ for -
(SLUICE_PROXY_LISTEN=0.0.0.0:8000). SIGHUP re-reads the configuration file.
`

// run is main without the process: it returns the exit code. hup delivers
// reload requests (SIGHUP).
func run(ctx context.Context, args []string, hup <-chan os.Signal, stdout, stderr io.Writer) int {
	cmd, rest := "run", args[1:]
	if len(rest) > 0 {
		switch rest[0] {
		case "-h", "-help", "--help":
			cmd, rest = "help", rest[1:]
		case "-version", "--version":
			cmd, rest = "version", rest[1:]
		default:
			if !strings.HasPrefix(rest[0], "-") {
				cmd, rest = rest[0], rest[1:]
			}
		}
	}
	switch cmd {
	case "run":
		return runServe(ctx, rest, hup, stdout, stderr)
	case "validate":
		return runValidate(rest, stdout, stderr)
	case "version":
		fmt.Fprintf(stdout, "sluice %s\n", buildinfo.String())
		return 0
	case "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "sluice: unknown command %q\n\n%s", cmd, usage)
	return 2
}

func runValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ignore := fs.String("ignore-plugins", os.Getenv(envName("ignore-plugins")), "comma-separated plugins sluice does not implement to skip")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: sluice validate [--ignore-plugins a,b] kong.yml")
		return 2
	}
	path := fs.Arg(0)
	data, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 1
	}
	shared := gateway.NewShared(policy.RegistryOptions{})
	defer shared.Close()
	g, err := gateway.New(gateway.Options{Shared: shared, IgnorePlugins: splitList(*ignore), LookupEnv: os.LookupEnv})
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 1
	}
	if err := g.Validate(data); err != nil {
		var errs kongconf.Errors
		if errors.As(err, &errs) {
			fmt.Fprintf(stderr, "%s: %d error(s)\n", path, len(errs))
			for _, fe := range errs {
				fmt.Fprintf(stderr, "%s: %s\n", path, fe.Error())
			}
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s: configuration is valid\n", path)
	return 0
}

// serveFlags are the settings of "sluice run"; each has an environment
// variable SLUICE_<NAME>.
type serveFlags struct {
	config           string
	proxyListen      string
	sslCert          string
	sslCertKey       string
	adminListen      string
	statusListen     string
	trustedCerts     string
	redisTLS         *tls.Config // from trustedCerts
	adminToken       string
	adminTokenFile   string
	adminHosts       string
	ignorePlugins    string
	trustedIPs       string
	realIPHeader     string
	realIPRecursive  bool
	proxyProtocol    bool
	groupOverrides   bool
	logLevel         string
	logFormat        string
	accessLog        bool
	watch            bool
	echo             string
	etcdEndpoints    string
	etcdKey          string
	maxBody          int
	headerBuffers    string
	headerBufSize    string
	readTimeout      time.Duration
	idleTimeout      time.Duration
	upstreamIdle     time.Duration
	shutdownTimeout  time.Duration
	otlpEndpoint     string
	otlpInsecure     bool
	traceServiceName string
	topKeys          int
}

func parseServe(args []string, stderr io.Writer) (*serveFlags, error) {
	f := &serveFlags{}
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: sluice run -c kong.yml [flags]\n\nEvery flag can also be set with SLUICE_<FLAG> (SLUICE_PROXY_LISTEN=0.0.0.0:8000).\n\nFlags:\n")
		fs.PrintDefaults()
	}
	// An environment value is parsed as the flag would parse it: a
	// malformed one is an error naming the variable, never ignored.
	var envErrs []error
	env := func(name, def string) string {
		if v, ok := os.LookupEnv(envName(name)); ok {
			return v
		}
		return def
	}
	envParse := func(name, def string, parse func(string) error) {
		if err := parse(env(name, def)); err != nil {
			envErrs = append(envErrs, fmt.Errorf("%s=%q: %w", envName(name), os.Getenv(envName(name)), err))
		}
	}
	str := func(p *string, name, def, help string) { fs.StringVar(p, name, env(name, def), help) }
	boolean := func(p *bool, name string, def bool, help string) {
		v := def
		envParse(name, strconv.FormatBool(def), func(s string) (err error) {
			if v, err = strconv.ParseBool(s); err != nil {
				return errors.New("not a boolean (want true or false)")
			}
			return nil
		})
		fs.BoolVar(p, name, v, help)
	}
	dur := func(p *time.Duration, name string, def time.Duration, help string) {
		v := def
		envParse(name, def.String(), func(s string) (err error) {
			if v, err = time.ParseDuration(s); err != nil {
				return errors.New("not a duration (want e.g. 30s or 2m)")
			}
			return nil
		})
		fs.DurationVar(p, name, v, help)
	}
	integer := func(p *int, name string, def int, help string) {
		v := def
		envParse(name, strconv.Itoa(def), func(s string) (err error) {
			if v, err = strconv.Atoi(s); err != nil {
				return errors.New("not an integer")
			}
			return nil
		})
		fs.IntVar(p, name, v, help)
	}
	fs.StringVar(&f.config, "c", os.Getenv("SLUICE_CONFIG"), "declarative configuration file (YAML or JSON), watched for changes")
	fs.StringVar(&f.config, "config", os.Getenv("SLUICE_CONFIG"), "same as -c")
	str(&f.proxyListen, "proxy-listen", "0.0.0.0:8000", "proxy listeners in Kong's proxy_listen syntax: comma-separated \"addr:port [ssl] [http2] [proxy_protocol] [reuseport] [backlog=N] ...\", or off")
	str(&f.sslCert, "ssl-cert", "", "comma-separated PEM files (or PEM text) of the default TLS certificates, served when no configured SNI matches (Kong's ssl_cert)")
	str(&f.sslCertKey, "ssl-cert-key", "", "comma-separated PEM files (or PEM text) of their keys, in the same order (Kong's ssl_cert_key)")
	str(&f.adminListen, "admin-listen", "127.0.0.1:8001", "admin API listen address (keep it on loopback); empty disables it")
	str(&f.adminToken, "admin-token", "", "token every admin call must carry in Kong-Admin-Token; required when --admin-listen is not on loopback")
	str(&f.adminTokenFile, "admin-token-file", "", "file holding the --admin-token (kept off the command line, which every local user can read)")
	str(&f.adminHosts, "admin-allowed-hosts", "", "comma-separated extra Host names (host:port) the admin API answers; by default only the names of its listen address")
	str(&f.ignorePlugins, "ignore-plugins", "", "comma-separated plugins sluice does not implement whose instances are skipped instead of refusing the file (never an authentication or authorization plugin)")
	str(&f.statusListen, "status-listen", "", "listen address of GET /status and GET /metrics alone (Kong's status_listen), for probes and Prometheus; empty disables it")
	str(&f.trustedCerts, "lua-ssl-trusted-certificate", "", "comma-separated PEM files of the CAs Redis TLS connections trust (ssl_verify), or \"system\" among them for the system's (Kong's lua_ssl_trusted_certificate); empty: the system's")
	str(&f.trustedIPs, "trusted-ips", "", "comma-separated CIDRs whose forwarding headers are trusted (Kong's trusted_ips)")
	str(&f.realIPHeader, "real-ip-header", clientip.XRealIP, "header holding the client address from a trusted proxy (Kong's real_ip_header)")
	boolean(&f.realIPRecursive, "real-ip-recursive", false, "skip trusted addresses right to left in the header (Kong's real_ip_recursive)")
	boolean(&f.proxyProtocol, "proxy-protocol", false, "require a PROXY protocol header (v1 or v2) on every proxy connection (Kong's proxy_listen ... proxy_protocol)")
	boolean(&f.groupOverrides, "consumer-group-policy-overrides", false, "read rate-limiting-advanced under consumer_groups[].plugins as legacy overrides (Kong <= 3.3) instead of group-scoped plugins")
	str(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	str(&f.logFormat, "log-format", "json", "json or text")
	boolean(&f.accessLog, "access-log", true, "log every request")
	boolean(&f.watch, "watch", true, "reload the configuration file when it changes")
	str(&f.echo, "echo", "", "also serve a built-in echo upstream on this address (quickstart)")
	str(&f.etcdEndpoints, "etcd-endpoints", "", "comma-separated etcd endpoints to read the configuration from")
	str(&f.etcdKey, "etcd-key", "/sluice/kong.yml", "etcd key holding the configuration")
	integer(&f.maxBody, "max-body-size", gateway.DefaultMaxRequestBodySize, "largest request body in bytes")
	str(&f.headerBuffers, "large-client-header-buffers", "4 8k", "number and size of the buffers for a request's line and headers (Kong's nginx_http_large_client_header_buffers): a request line over the size gets 414, a header line over it or a header block over number x size 400")
	str(&f.headerBufSize, "client-header-buffer-size", "1k", "first buffer for a request's line and headers (Kong's nginx_http_client_header_buffer_size); a request line may be as long as the larger of it and the large buffers' size")
	dur(&f.readTimeout, "read-timeout", gateway.DefaultReadTimeout, "time to read a request's headers from a client")
	dur(&f.idleTimeout, "idle-timeout", gateway.DefaultIdleTimeout, "client keep-alive idle timeout")
	dur(&f.upstreamIdle, "upstream-idle-timeout", gateway.DefaultUpstreamIdleTimeout, "upstream keep-alive idle timeout; keep it below the upstream's")
	dur(&f.shutdownTimeout, "shutdown-timeout", 30*time.Second, "how long to drain requests in flight on SIGTERM")
	str(&f.otlpEndpoint, "otlp-endpoint", os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT"), "OTLP/HTTP endpoint for traces (host:port or URL); empty disables tracing")
	boolean(&f.otlpInsecure, "otlp-insecure", true, "send traces over plain HTTP")
	str(&f.traceServiceName, "trace-service-name", "sluice", "service.name of the traces")
	integer(&f.topKeys, "top-keys", policy.DefaultTopKeys, "identifiers each rate-limiting plugin tracks per 10 seconds for GET /rate-limiting/top (memory: 6 x this many entries per plugin); 0 disables the top lists")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if err := errors.Join(envErrs...); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if _, err := gateway.ParseHeaderBuffers(f.headerBuffers); err != nil {
		return nil, fmt.Errorf("--large-client-header-buffers: %w", err)
	}
	if _, err := gateway.ParseNginxSize(f.headerBufSize); err != nil {
		return nil, fmt.Errorf("--client-header-buffer-size %q: %w", f.headerBufSize, err)
	}
	specs, err := gateway.ParseListen(f.proxyListen)
	if err != nil {
		return nil, fmt.Errorf("--proxy-listen: %w", err)
	}
	anyProxyProto := f.proxyProtocol
	for _, sp := range specs {
		anyProxyProto = anyProxyProto || sp.ProxyProtocol
	}
	if (f.sslCert == "") != (f.sslCertKey == "") {
		return nil, errors.New("--ssl-cert and --ssl-cert-key go together")
	}
	if f.realIPHeader == clientip.ProxyProtocol && !anyProxyProto {
		return nil, errors.New("--real-ip-header proxy_protocol needs --proxy-protocol (or proxy_protocol in --proxy-listen)")
	}
	if f.adminTokenFile != "" {
		if f.adminToken != "" {
			return nil, errors.New("--admin-token and --admin-token-file: give one")
		}
		if f.adminToken, err = adminauth.ReadTokenFile(f.adminTokenFile); err != nil {
			return nil, fmt.Errorf("--admin-token-file: %w", err)
		}
	}
	if f.redisTLS, err = trustedCAs(f.trustedCerts); err != nil {
		return nil, fmt.Errorf("--lua-ssl-trusted-certificate: %w", err)
	}
	for _, l := range []struct{ flag, addr string }{{"admin-listen", f.adminListen}, {"status-listen", f.statusListen}} {
		if err := checkPlainListen(l.addr); err != nil {
			return nil, fmt.Errorf("--%s %q: %w", l.flag, l.addr, err)
		}
	}
	if f.adminListen != "" && !adminauth.IsLoopback(f.adminListen) && f.adminToken == "" {
		return nil, fmt.Errorf("--admin-listen %s is reachable from other machines: set --admin-token or --admin-token-file (SLUICE_ADMIN_TOKEN, SLUICE_ADMIN_TOKEN_FILE), or listen on loopback", f.adminListen)
	}
	if f.config == "" && f.etcdEndpoints == "" {
		return nil, errors.New("a configuration is required: -c kong.yml or --etcd-endpoints")
	}
	return f, nil
}

// splitList splits a comma-separated flag value; empty gives nil.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// envName is the environment variable of a flag: SLUICE_PROXY_LISTEN for
// proxy-listen.
func envName(flagName string) string {
	return "SLUICE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func newLogger(f *serveFlags, w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	o := &slog.HandlerOptions{Level: level}
	switch f.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(w, o)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, o)), nil
	}
	return nil, fmt.Errorf("--log-format: want json or text, got %q", f.logFormat)
}

func runServe(ctx context.Context, args []string, hup <-chan os.Signal, stdout, stderr io.Writer) int {
	f, err := parseServe(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	log, err := newLogger(f, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "sluice: %v\n", err)
		return 2
	}
	if err := serve(ctx, f, hup, log, stdout); err != nil {
		log.Error("sluice stopped", "error", err.Error())
		return 1
	}
	return 0
}

func serve(ctx context.Context, f *serveFlags, hup <-chan os.Signal, log *slog.Logger, stdout io.Writer) error {
	var trusted []string
	if f.trustedIPs != "" {
		trusted = strings.Split(f.trustedIPs, ",")
	}
	resolver, err := clientip.New(clientip.Options{TrustedIPs: trusted, RealIPHeader: f.realIPHeader, Recursive: f.realIPRecursive})
	if err != nil {
		return err
	}
	metrics, err := gateway.NewMetrics(nil)
	if err != nil {
		return err
	}
	headerBuffers, _ := gateway.ParseHeaderBuffers(f.headerBuffers) // checked by parseServe
	headerBufSize, _ := gateway.ParseNginxSize(f.headerBufSize)
	opts := gateway.Options{
		HeaderBuffers:          headerBuffers,
		ClientHeaderBufferSize: headerBufSize,
		Metrics:                metrics,
		ClientIP:               resolver,
		Logger:                 log,
		AccessLog:              f.accessLog,
		MaxRequestBodySize:     f.maxBody,
		ReadTimeout:            f.readTimeout,
		IdleTimeout:            f.idleTimeout,
		UpstreamIdleTimeout:    f.upstreamIdle,
		GroupPolicyOverrides:   f.groupOverrides,
		IgnorePlugins:          splitList(f.ignorePlugins),
		LookupEnv:              os.LookupEnv,
		Shared:                 gateway.NewShared(policy.RegistryOptions{Logger: log, OnRedisState: metrics.RedisStateChanged, TopKeys: topKeys(f.topKeys), RedisTLS: f.redisTLS}),
	}
	defer opts.Shared.Close()
	if f.sslCert != "" {
		pairs, err := loadCertificates(f.sslCert, f.sslCertKey)
		if err != nil {
			return err
		}
		opts.DefaultCertificates = pairs
	}
	if f.otlpEndpoint != "" {
		tp, err := newTracerProvider(ctx, f)
		if err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = tp.Shutdown(sctx) // spans lost at exit are not worth failing for
		}()
		opts.Tracer = tp.Tracer("github.com/seed-008287da/sluice/internal/gateway")
	}
	g, err := gateway.New(opts)
	if err != nil {
		return err
	}

	if f.echo != "" {
		ln, err := net.Listen("tcp", f.echo)
		if err != nil {
			return fmt.Errorf("echo upstream: %w", err)
		}
		srv := &http.Server{Handler: echo.Handler(), ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }() // ends with Close below
		defer srv.Close()
		fmt.Fprintf(stdout, "echo upstream listening on %s\n", ln.Addr())
	}

	handlers := configsource.Handlers{
		Apply: func(d configsource.Document) error { return g.Load(d.Data, sourceName(d.Source)) },
		Error: func(err error) { log.Warn("configuration source", "error", err.Error()) },
	}
	var sources []configsource.Source
	defer func() {
		for _, s := range sources {
			_ = s.Close()
		}
	}()
	if f.config != "" {
		if f.watch {
			src, err := configsource.OpenFile(ctx, f.config, configsource.FileOptions{Handlers: handlers})
			if err != nil {
				return err
			}
			sources = append(sources, src)
		} else {
			data, err := os.ReadFile(f.config)
			if err != nil {
				return err
			}
			if err := g.Load(data, "file"); err != nil {
				return err
			}
		}
	}
	if f.etcdEndpoints != "" {
		src, err := configsource.OpenEtcd(ctx, configsource.EtcdOptions{
			Handlers: handlers, Endpoints: strings.Split(f.etcdEndpoints, ","), Key: f.etcdKey,
		})
		if err != nil {
			return err
		}
		sources = append(sources, src)
	}

	specs, err := gateway.ParseListen(f.proxyListen)
	if err != nil {
		return fmt.Errorf("--proxy-listen: %w", err)
	}
	errc := make(chan error, 2+len(specs)) // proxy listeners, status and admin servers
	for _, sp := range specs {
		sp.ProxyProtocol = sp.ProxyProtocol || f.proxyProtocol
		pln, err := gateway.Listen(ctx, sp)
		if err != nil {
			return fmt.Errorf("proxy listener: %w", err)
		}
		if sp.SSL {
			go func() { errc <- g.ServeTLS(pln, sp.HTTP2) }()
		} else {
			go func() { errc <- g.Serve(pln) }()
		}
		kind := "proxy"
		switch {
		case sp.SSL && sp.HTTP2:
			kind = "proxy (TLS, HTTP/2)"
		case sp.SSL:
			kind = "proxy (TLS)"
		}
		fmt.Fprintf(stdout, "%s listening on %s\n", kind, pln.Addr())
		log.Info("proxy listening", "addr", pln.Addr().String(), "ssl", sp.SSL, "http2", sp.HTTP2, "proxy_protocol", sp.ProxyProtocol, "version", buildinfo.String())
	}

	var statusSrv *http.Server
	if f.statusListen != "" {
		sln, err := net.Listen("tcp", f.statusListen)
		if err != nil {
			return fmt.Errorf("status listener: %w", err)
		}
		statusSrv = &http.Server{Handler: admin.StatusHandler(g), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := statusSrv.Serve(sln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		fmt.Fprintf(stdout, "status listening on %s\n", sln.Addr())
		log.Info("status listening", "addr", sln.Addr().String())
	}

	var adminSrv *http.Server
	if f.adminListen != "" {
		aln, err := net.Listen("tcp", f.adminListen)
		if err != nil {
			return fmt.Errorf("admin listener: %w", err)
		}
		hosts := adminauth.LoopbackHosts(aln.Addr().String())
		if hosts != nil && f.adminHosts != "" {
			hosts = append(hosts, strings.Split(f.adminHosts, ",")...)
		}
		adminSrv = &http.Server{Handler: admin.Handler(g, admin.Options{Version: buildinfo.String(), Token: f.adminToken, AllowedHosts: hosts, ManagedBy: managedBy(f)}), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := adminSrv.Serve(aln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		fmt.Fprintf(stdout, "admin listening on %s\n", aln.Addr())
		log.Info("admin listening", "addr", aln.Addr().String())
	}

loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "timeout", f.shutdownTimeout.String())
			break loop
		case <-hup:
			reloadFile(g, f, log)
		case err := <-errc:
			if err != nil {
				return err
			}
			break loop
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownTimeout)
	defer cancel()
	if adminSrv != nil {
		_ = adminSrv.Shutdown(sctx) // the proxy's drain is what matters
	}
	if statusSrv != nil {
		_ = statusSrv.Shutdown(sctx)
	}
	return g.Shutdown(sctx)
}

// managedBy names the source that owns the configuration, or "" when the
// admin API may replace it (a file read once, with --watch=false).
func managedBy(f *serveFlags) string {
	switch {
	case f.etcdEndpoints != "":
		return "etcd key " + f.etcdKey
	case f.watch:
		return "the watched file " + f.config
	}
	return ""
}

// reloadFile applies the configuration file again on SIGHUP (systemd's
// ExecReload). A rejected file leaves the serving configuration in force.
func reloadFile(g *gateway.Gateway, f *serveFlags, log *slog.Logger) {
	if f.config == "" {
		log.Info("SIGHUP: the configuration comes from etcd; nothing to re-read")
		return
	}
	data, err := os.ReadFile(f.config)
	if err == nil {
		err = g.Load(data, "file")
	}
	if err != nil {
		log.Error("SIGHUP: configuration rejected; the previous one stays in force", "path", f.config, "error", err.Error())
		return
	}
	log.Info("SIGHUP: configuration reloaded", "path", f.config)
}

// sourceName turns "file:/etc/kong.yml" into the metric label "file".
func sourceName(s string) string {
	if i := strings.IndexByte(s, ':'); i > 0 {
		return s[:i]
	}
	return s
}

func newTracerProvider(ctx context.Context, f *serveFlags) (*sdktrace.TracerProvider, error) {
	opts := []otlptracehttp.Option{}
	if strings.Contains(f.otlpEndpoint, "://") {
		opts = append(opts, otlptracehttp.WithEndpointURL(f.otlpEndpoint))
	} else {
		opts = append(opts, otlptracehttp.WithEndpoint(f.otlpEndpoint))
	}
	if f.otlpInsecure {
		opts = append(opts, otlptracehttp.WithInsecure())
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	return sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(serviceResource(f.traceServiceName))), nil
}

// topKeys maps --top-keys onto policy.RegistryOptions.TopKeys, where 0
// means the default and a negative value none.
func topKeys(n int) int {
	if n <= 0 {
		return -1
	}
	return n
}

// loadCertificates reads Kong's ssl_cert and ssl_cert_key: comma-separated
// lists, in the same order, of PEM files or PEM text.
func loadCertificates(certs, keys string) ([]tls.Certificate, error) {
	cl, kl := strings.Split(certs, ","), strings.Split(keys, ",")
	if len(cl) != len(kl) {
		return nil, fmt.Errorf("--ssl-cert lists %d certificates and --ssl-cert-key %d keys", len(cl), len(kl))
	}
	read := func(flagName, v string) ([]byte, error) {
		v = strings.TrimSpace(v)
		if strings.HasPrefix(v, "-----BEGIN") {
			return []byte(v), nil
		}
		b, err := os.ReadFile(v)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", flagName, err)
		}
		return b, nil
	}
	var out []tls.Certificate
	for i := range cl {
		c, err := read("ssl-cert", cl[i])
		if err != nil {
			return nil, err
		}
		k, err := read("ssl-cert-key", kl[i])
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			return nil, fmt.Errorf("--ssl-cert entry %d: %w", i+1, err)
		}
		out = append(out, pair)
	}
	return out, nil
}

// checkPlainListen checks a listen address that takes none of Kong's
// listen flags: host:port, or "" (off).
func checkPlainListen(addr string) error {
	if addr == "" {
		return nil
	}
	if strings.ContainsAny(addr, " \t,") {
		return errors.New("one host:port only: Kong's listen flags (ssl, http2, ...) and lists are not supported here, and this listener serves plain HTTP")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("want host:port: %w", err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// trustedCAs reads Kong's lua_ssl_trusted_certificate: comma-separated PEM
// files, "system" standing for the system's CAs. It returns nil (the
// system's) for "".
func trustedCAs(list string) (*tls.Config, error) {
	if strings.TrimSpace(list) == "" {
		return nil, nil
	}
	names := strings.Split(list, ",")
	for i := range names {
		names[i] = strings.TrimSpace(names[i])
	}
	pool := x509.NewCertPool()
	if slices.Contains(names, "system") {
		sys, err := x509.SystemCertPool()
		if err != nil {
			return nil, fmt.Errorf("the system's CAs: %w", err)
		}
		pool = sys
	}
	for _, name := range names {
		if name == "system" {
			continue
		}
		pem, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s holds no PEM certificate", name)
		}
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}
