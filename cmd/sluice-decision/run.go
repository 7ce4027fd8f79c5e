package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/seed-008287da/sluice/internal/buildinfo"
	"github.com/seed-008287da/sluice/internal/configsource"
	"github.com/seed-008287da/sluice/internal/decision"
)

type flags struct {
	config          string
	grpcListen      string
	httpListen      string
	check           bool
	version         bool
	watch           bool
	logLevel        string
	shutdownTimeout time.Duration
}

func parseFlags(args []string, stderr io.Writer) (*flags, error) {
	f := &flags{}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.config, "c", "", "configuration `file` (envoyproxy/ratelimit YAML plus sluice settings); required")
	fs.StringVar(&f.grpcListen, "grpc", "127.0.0.1:8081", "gRPC listen `address` (RateLimitService and health); loopback unless told otherwise (0.0.0.0:8081)")
	fs.StringVar(&f.httpListen, "http", "127.0.0.1:8080", "HTTP listen `address` (/v1/decide, /json, /check, /status, /healthcheck, /metrics); loopback unless told otherwise; empty disables it")
	fs.BoolVar(&f.version, "version", false, "print the version and exit")
	fs.BoolVar(&f.check, "check", false, "validate the configuration, print every error, and exit")
	fs.BoolVar(&f.watch, "watch", true, "reload the configuration when the file changes")
	fs.StringVar(&f.logLevel, "log-level", "info", "log `level`: debug, info, warn or error")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 10*time.Second, "how long in-flight calls may take to finish on shutdown")
	if err := fs.Parse(args[1:]); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if f.version {
		return f, nil
	}
	if f.config == "" {
		return nil, errors.New("-c is required")
	}
	return f, nil
}

// run is main without the process: it returns the exit code. hup delivers
// reload requests (SIGHUP).
func run(ctx context.Context, args []string, hup <-chan os.Signal, stdout, stderr io.Writer) int {
	f, err := parseFlags(args, stderr)
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
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if f.check {
		data, err := os.ReadFile(f.config)
		if err == nil {
			_, err = decision.Parse(data)
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "%s: configuration is valid\n", f.config)
		return 0
	}
	if err := serve(ctx, f, hup, log, stdout); err != nil {
		log.Error("sluice-decision stopped", "err", err)
		return 1
	}
	return 0
}

func serve(ctx context.Context, f *flags, hup <-chan os.Signal, log *slog.Logger, stdout io.Writer) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	svc, err := decision.OpenFile(f.config, decision.Options{Logger: log, Registry: reg})
	if err != nil {
		return err
	}
	defer svc.Close()

	if f.watch {
		src, err := configsource.OpenFile(ctx, f.config, configsource.FileOptions{Handlers: configsource.Handlers{
			Apply: func(d configsource.Document) error { return svc.Reload(d.Data) },
			Error: func(err error) { log.Warn("decision: config watch", "err", err) },
		}})
		if err != nil {
			return err
		}
		defer src.Close()
	}

	gl, err := net.Listen("tcp", f.grpcListen)
	if err != nil {
		return fmt.Errorf("grpc listener: %w", err)
	}
	gs := decision.NewGRPCServer(svc)
	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gl) }()
	fmt.Fprintf(stdout, "grpc listening on %s\n", gl.Addr())
	log.Info("grpc listening", "addr", gl.Addr().String())

	var hs *http.Server
	if f.httpListen != "" {
		hl, err := net.Listen("tcp", f.httpListen)
		if err != nil {
			gs.Stop()
			return fmt.Errorf("http listener: %w", err)
		}
		hs = &http.Server{Handler: svc.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
		go func() {
			if err := hs.Serve(hl); !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}()
		fmt.Fprintf(stdout, "http listening on %s\n", hl.Addr())
		log.Info("http listening", "addr", hl.Addr().String())
	}

	var serveErr error
loop:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "timeout", f.shutdownTimeout.String())
			break loop
		case <-hup:
			data, err := os.ReadFile(f.config)
			if err == nil {
				err = svc.Reload(data)
			}
			if err != nil {
				log.Error("decision: SIGHUP reload rejected", "err", err)
			}
		case serveErr = <-errc:
			break loop
		}
	}

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
