package main

import (
	"flag"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// envoyproxy/ratelimit is configured by environment variables; sluice-decision
// reads the same names (docs/decision-service.md, "envoyproxy/ratelimit's
// environment"). A flag given on the command line wins over its variable. A
// variable sluice does not implement is an error naming it when its value
// would change behaviour, and a warning when it only tunes the peer's
// implementation; a variable left at the peer's default is fine either way.

// envFlags are variables that set a flag as they are.
var envFlags = []struct{ env, flag string }{
	{"RUNTIME_ROOT", "runtime-root"},
	{"RUNTIME_SUBDIRECTORY", "runtime-subdirectory"},
	{"RUNTIME_APPDIRECTORY", "runtime-appdirectory"},
	{"RUNTIME_WATCH_ROOT", "runtime-watch-root"},
	{"RUNTIME_IGNOREDOTFILES", "runtime-ignore-dotfiles"},
	{"MERGE_DOMAIN_CONFIG", "merge-domains"},
	{"HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "healthy-with-config"},
	{"LOG_FORMAT", "log-format"},
	{"QUOTA_MODE", "quota-mode"},
	{"SHADOW_MODE", "shadow-mode"},
	{"RESPONSE_DYNAMIC_METADATA", "response-dynamic-metadata"},
	{"LIMIT_RESPONSE_HEADERS_ENABLED", "response-headers"},
	{"LIMIT_LIMIT_HEADER", "limit-header"},
	{"LIMIT_REMAINING_HEADER", "remaining-header"},
	{"LIMIT_RESET_HEADER", "reset-header"},
	{"NEAR_LIMIT_RATIO", "near-limit-ratio"},
	{"LOCAL_CACHE_SIZE_IN_BYTES", "local-cache-bytes"},
}

// An unsupported variable: fine when its value is one of ok (compared
// case-insensitively; "" is always fine), else an error, or a warning when
// warn is set.
type unsupported struct {
	env    string
	ok     []string
	warn   bool
	reason string
}

var unsupportedEnv = []unsupported{
	{env: "CONFIG_TYPE", ok: []string{"FILE"}, reason: "only file configuration is implemented, not xDS"},
	{env: "USE_PROMETHEUS", ok: []string{"false"}, reason: "Prometheus metrics are always served at /metrics on the HTTP port"},
	{env: "PROMETHEUS_ADDR", ok: []string{":9090"}, reason: "Prometheus metrics are served at /metrics on the HTTP port"},
	{env: "PROMETHEUS_PATH", ok: []string{"/metrics"}, reason: "Prometheus metrics are served at /metrics on the HTTP port"},
	{env: "PROMETHEUS_MAPPER_YAML", reason: "sluice's Prometheus metrics have their own names; statsd names are not mapped"},
	{env: "TRACING_ENABLED", ok: []string{"false"}, reason: "tracing is not implemented"},
	{env: "MEMCACHE_HOST_PORT", reason: "memcached is not implemented; use Redis or the memory store"},
	{env: "MEMCACHE_SRV", reason: "memcached is not implemented; use Redis or the memory store"},
	{env: "CONFIG_GRPC_XDS_SERVER_URL", ok: []string{"localhost:18000"}, reason: "xDS configuration is not implemented"},
	{env: "GRPC_CLIENT_TLS_SAN", reason: "client certificates are checked against -grpc-client-ca only, not a SAN"},
	{env: "EXPIRATION_JITTER_MAX_SECONDS", ok: []string{"300"}, warn: true, reason: "sluice's stores expire keys at the end of their window"},
	{env: "REDIS_POOL_SIZE", ok: []string{"10"}, warn: true, reason: "sluice's Redis client pipelines over few connections and sizes itself"},
	{env: "REDIS_PERSECOND_POOL_SIZE", ok: []string{"10"}, warn: true, reason: "sluice's Redis client pipelines over few connections and sizes itself"},
	{env: "REDIS_PIPELINE_WINDOW", ok: []string{"0"}, warn: true, reason: "sluice's Redis client pipelines by itself"},
	{env: "REDIS_PIPELINE_LIMIT", ok: []string{"0"}, warn: true, reason: "sluice's Redis client pipelines by itself"},
	{env: "REDIS_POOL_ON_EMPTY_BEHAVIOR", ok: []string{"WAIT"}, warn: true, reason: "sluice's Redis client has no pool to run empty"},
	{env: "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", ok: []string{"false"}, warn: true, reason: "a Redis outage falls back to local counters instead of failing health"},
	{env: "XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", warn: true, reason: "xDS configuration is not implemented"},
}

func lookup(getenv func(string) (string, bool), name string) (string, bool) {
	v, ok := getenv(name)
	if !ok || v == "" {
		return "", false
	}
	return v, true
}

// applyEnv sets, from the environment, every flag not given on the
// command line.
func applyEnv(f *flags, fs *flag.FlagSet, set map[string]bool, getenv func(string) (string, bool)) error {
	for _, e := range envFlags {
		v, ok := lookup(getenv, e.env)
		if !ok || set[e.flag] {
			continue
		}
		if e.flag == "log-format" {
			v = strings.ToLower(v)
		}
		if err := fs.Set(e.flag, v); err != nil {
			return fmt.Errorf("%s=%q: %v", e.env, v, err)
		}
	}
	if v, ok := lookup(getenv, "LOG_LEVEL"); ok && !set["log-level"] {
		lv := strings.ToLower(v)
		switch lv {
		case "warning":
			lv = "warn"
		case "trace":
			lv = "debug"
		case "fatal", "panic":
			lv = "error"
		case "debug", "info", "warn", "error":
		default:
			return fmt.Errorf("LOG_LEVEL=%q: unknown level (want debug, info, warn or error)", v)
		}
		f.logLevel = lv
	}
	if !set["grpc"] {
		if v, ok := lookup(getenv, "GRPC_UDS"); ok {
			f.grpcListen = "unix:" + v
		} else if addr, err := hostPort(getenv, "GRPC_HOST", "GRPC_PORT", f.grpcListen, &f.warnings); err != nil {
			return err
		} else {
			f.grpcListen = addr
		}
	}
	if !set["http"] {
		addr, err := hostPort(getenv, "HOST", "PORT", f.httpListen, &f.warnings)
		if err != nil {
			return err
		}
		f.httpListen = addr
	}
	for _, u := range unsupportedEnv {
		v, ok := lookup(getenv, u.env)
		if !ok || u.accepts(v) {
			continue
		}
		msg := fmt.Sprintf("%s=%q is not supported: %s", u.env, v, u.reason)
		if !u.warn {
			return fmt.Errorf("%s", msg)
		}
		f.warnings = append(f.warnings, msg+"; ignored")
	}
	return nil
}

func (u unsupported) accepts(v string) bool {
	for _, ok := range u.ok {
		if strings.EqualFold(v, ok) {
			return true
		}
	}
	return false
}

// hostPort combines a host and a port variable with the flag's default
// address. The peer binds 0.0.0.0 when only the port is given; sluice
// keeps the default host (loopback) and says so.
func hostPort(getenv func(string) (string, bool), hostEnv, portEnv, def string, warnings *[]string) (string, error) {
	host, hasHost := lookup(getenv, hostEnv)
	port, hasPort := lookup(getenv, portEnv)
	if !hasHost && !hasPort {
		return def, nil
	}
	dh, dp, err := net.SplitHostPort(def)
	if err != nil {
		dh, dp = "127.0.0.1", ""
	}
	if hasPort {
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return "", fmt.Errorf("%s=%q: expected a port number", portEnv, port)
		}
	} else {
		port = dp
	}
	if !hasHost {
		host = dh
		*warnings = append(*warnings, fmt.Sprintf("%s is set and %s is not: listening on %s, loopback only (envoyproxy/ratelimit would listen on 0.0.0.0); set %s=0.0.0.0 to serve other machines", portEnv, hostEnv, net.JoinHostPort(host, port), hostEnv))
	}
	return net.JoinHostPort(host, port), nil
}
