package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"regexp"
	"regexp/syntax"
	"strconv"
	"strings"
	"time"

	"github.com/seed-008287da/sluice/internal/decision"
	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit/redisstore"
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
	{"STATS_FLUSH_INTERVAL", "statsd-interval"},
	{"STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", "stop-increment-when-over-limit"},
	{"USE_DOG_STATSD", "dogstatsd"},
	{"STATSD_PROTOCOL", "statsd-protocol"},
	{"EXTRA_TAGS", "statsd-tags"},
	{"GRPC_SERVER_TLS_CERT", "grpc-tls-cert"},
	{"GRPC_SERVER_TLS_KEY", "grpc-tls-key"},
	{"GRPC_CLIENT_TLS_CACERT", "grpc-client-ca"},
	{"GRPC_MAX_CONNECTION_AGE", "grpc-max-connection-age"},
	{"GRPC_MAX_CONNECTION_AGE_GRACE", "grpc-max-connection-age-grace"},
	{"SLUICE_ADMIN_TOKEN", "admin-token"},
	{"SLUICE_ADMIN_TOKEN_FILE", "admin-token-file"},
	{"SLUICE_GRPC_STREAM_WORKERS", "grpc-stream-workers"},
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
	{env: "DOG_STATSD_MOGRIFIERS", warn: true, reason: "envoyproxy/ratelimit reads its list of mogrifiers from USE_DOG_STATSD_MOGRIFIERS, and so does sluice"},
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
	if !set["debug"] {
		if _, hasPort := lookup(getenv, "DEBUG_PORT"); hasPort {
			addr, err := hostPort(getenv, "DEBUG_HOST", "DEBUG_PORT", "127.0.0.1:6070", &f.warnings)
			if err != nil {
				return err
			}
			f.debugListen = addr
		} else if h, hasHost := lookup(getenv, "DEBUG_HOST"); hasHost {
			f.debugListen = net.JoinHostPort(h, "6070")
		}
	}
	if _, ok := lookup(getenv, "USE_DOG_STATSD_MOGRIFIERS"); ok && !f.dogstatsd {
		f.warnings = append(f.warnings, "USE_DOG_STATSD_MOGRIFIERS is set without USE_DOG_STATSD=true: ignored, as envoyproxy/ratelimit ignores it (plain statsd has no tags)")
	} else if ok {
		ms, err := mogrifiersEnv(getenv)
		if err != nil {
			return err
		}
		f.mogrifiers = ms
	}
	if !set["statsd"] {
		addr, err := statsdEnv(getenv)
		if err != nil {
			return err
		}
		f.statsd = addr
		// envoyproxy/ratelimit's plain statsd (gostats) sends over TCP
		// unless STATSD_PROTOCOL says otherwise; its DogStatsD client
		// over UDP.
		if addr != "" && f.statsdProtocol == "" && !f.dogstatsd {
			f.statsdProtocol = "tcp"
		}
	}
	if v, ok := lookup(getenv, "GRPC_SERVER_USE_TLS"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("GRPC_SERVER_USE_TLS=%q: expected true or false", v)
		}
		if b && f.grpcCert == "" {
			return errors.New("GRPC_SERVER_USE_TLS=true needs GRPC_SERVER_TLS_CERT and GRPC_SERVER_TLS_KEY")
		}
		if !b && !set["grpc-tls-cert"] {
			f.grpcCert, f.grpcKey, f.grpcClientCA = "", "", ""
		}
	} else if f.grpcCert != "" && !set["grpc-tls-cert"] {
		// As envoyproxy/ratelimit: the files alone do not turn TLS on.
		f.grpcCert, f.grpcKey, f.grpcClientCA = "", "", ""
		f.warnings = append(f.warnings, "GRPC_SERVER_TLS_CERT is set without GRPC_SERVER_USE_TLS=true: gRPC is served in plaintext, as envoyproxy/ratelimit does")
	}
	st, err := redisEnv(getenv)
	if err != nil {
		return err
	}
	f.store = st
	prefix, hasPrefix := lookup(getenv, "CACHE_KEY_PREFIX")
	switch {
	case f.envoyKeys && st == nil:
		return errors.New("-envoy-key-layout needs REDIS_URL (in a file, set key_layout: envoy under store.redis)")
	case hasPrefix && (st == nil || !f.envoyKeys):
		return fmt.Errorf("CACHE_KEY_PREFIX=%q is used only with -envoy-key-layout and REDIS_URL (sluice's own keys are namespaced)", prefix)
	case st != nil && f.envoyKeys:
		st.Redis.EnvoyLayout = true
		st.Redis.KeyPrefix = prefix
	}
	for _, u := range unsupportedEnv {
		v, ok := lookup(getenv, u.env)
		if !ok || u.accepts(v) {
			continue
		}
		msg := fmt.Sprintf("%s=%q is not supported: %s", u.env, field.RedactURL(v), u.reason)
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

// redisEnv builds the store from envoyproxy/ratelimit's REDIS_* variables;
// nil when REDIS_URL is not set (the file's store is used).
func redisEnv(getenv func(string) (string, bool)) (*decision.StoreConfig, error) {
	if v, ok := lookup(getenv, "BACKEND_TYPE"); ok && !strings.EqualFold(v, "redis") {
		return nil, fmt.Errorf("BACKEND_TYPE=%q is not supported: only redis (or sluice's memory store, in the file)", v)
	}
	// As in envoyproxy/ratelimit, the REDIS_PERSECOND_* settings are read
	// only with REDIS_PERSECOND on.
	if v, ok := lookup(getenv, "REDIS_PERSECOND"); ok && !strings.EqualFold(v, "false") {
		return nil, fmt.Errorf("REDIS_PERSECOND=%q is not supported: sluice uses one Redis for every limit", v)
	}
	url, ok := lookup(getenv, "REDIS_URL")
	if !ok {
		for _, name := range []string{"REDIS_TYPE", "REDIS_AUTH", "REDIS_TLS", "REDIS_SOCKET_TYPE"} {
			if _, set := lookup(getenv, name); set {
				return nil, fmt.Errorf("%s is set but REDIS_URL is not", name)
			}
		}
		return nil, nil
	}
	if strings.Contains(url, "@") {
		// The value is never quoted: the user info may hold a password.
		return nil, fmt.Errorf("REDIS_URL: user info (user:password@) is not supported: give host:port and set the password in REDIS_AUTH")
	}
	if st, _ := lookup(getenv, "REDIS_SOCKET_TYPE"); !strings.EqualFold(st, "tcp") {
		return nil, fmt.Errorf("REDIS_SOCKET_TYPE=%q is not supported: sluice reaches Redis over tcp only (envoyproxy/ratelimit's default is unix); set REDIS_SOCKET_TYPE=tcp", st)
	}
	rc := decision.RedisConfig{Namespace: "decision", SettingNames: map[string]string{
		"password": "REDIS_AUTH", "username": "REDIS_AUTH", "host": "REDIS_URL",
		"server_name": "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "ssl_verify": "REDIS_TLS_CACERT",
	}}
	addrs := func(list []string) ([]redisstore.Addr, error) {
		var out []redisstore.Addr
		for _, a := range list {
			host, port, err := net.SplitHostPort(strings.TrimSpace(a))
			n, perr := strconv.Atoi(port)
			if err != nil || perr != nil || n <= 0 || n > 65535 {
				return nil, fmt.Errorf("REDIS_URL=%q: %q is not host:port", field.RedactURL(url), field.RedactURL(a))
			}
			if msg := field.HostProblem(host); msg != "" {
				return nil, fmt.Errorf("REDIS_URL=%q: %q: host: %s", field.RedactURL(url), field.RedactURL(a), msg)
			}
			out = append(out, redisstore.Addr{Host: host, Port: n})
		}
		return out, nil
	}
	typ, _ := lookup(getenv, "REDIS_TYPE")
	parts := strings.Split(url, ",")
	switch strings.ToLower(typ) {
	case "", "single":
		a, err := addrs(parts[:1])
		if err != nil {
			return nil, err
		}
		if len(parts) > 1 {
			return nil, fmt.Errorf("REDIS_URL=%q: one host:port for REDIS_TYPE single", field.RedactURL(url))
		}
		rc.Host, rc.Port = a[0].Host, a[0].Port
	case "sentinel":
		if len(parts) < 2 {
			return nil, fmt.Errorf("REDIS_URL=%q: want master-name,host:port[,host:port...] for REDIS_TYPE sentinel", field.RedactURL(url))
		}
		rc.SentinelMaster = parts[0]
		a, err := addrs(parts[1:])
		if err != nil {
			return nil, err
		}
		rc.SentinelNodes = a
		if v, ok := lookup(getenv, "REDIS_SENTINEL_AUTH"); ok {
			rc.SentinelUsername, rc.SentinelPassword = splitAuth(v)
		}
	case "cluster":
		a, err := addrs(parts)
		if err != nil {
			return nil, err
		}
		rc.ClusterNodes = a
	default:
		return nil, fmt.Errorf("REDIS_TYPE=%q: want single, sentinel or cluster", typ)
	}
	if v, ok := lookup(getenv, "REDIS_AUTH"); ok {
		rc.Username, rc.Password = splitAuth(v)
	}
	if v, ok := lookup(getenv, "REDIS_TLS"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return nil, fmt.Errorf("REDIS_TLS=%q: expected true or false", v)
		}
		rc.SSL = b
		rc.SSLVerify = b
	}
	if v, ok := lookup(getenv, "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION"); ok && strings.EqualFold(v, "true") {
		rc.SSLVerify = false
	}
	if rc.SSL {
		tc, err := tlsFiles("REDIS_TLS", getenv)
		if err != nil {
			return nil, err
		}
		rc.TLSConfig = tc
	}
	if v, ok := lookup(getenv, "REDIS_TIMEOUT"); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("REDIS_TIMEOUT=%q: expected a duration such as 200ms", v)
		}
		rc.Timeout = d
	}
	return &decision.StoreConfig{Type: "redis", Redis: rc}, nil
}

// statsdEnv returns the statsd address from USE_STATSD, STATSD_HOST and
// STATSD_PORT. envoyproxy/ratelimit sends statistics to localhost:8125
// unless USE_STATSD=false; sluice sends them only when USE_STATSD=true or
// one of STATSD_HOST, STATSD_PORT, USE_DOG_STATSD is set, and not when
// DISABLE_STATS=true.
func statsdEnv(getenv func(string) (string, bool)) (string, error) {
	flag := func(name string) (bool, bool, error) {
		v, ok := lookup(getenv, name)
		if !ok {
			return false, false, nil
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, true, fmt.Errorf("%s=%q: expected true or false", name, v)
		}
		return b, true, nil
	}
	disabled, _, err := flag("DISABLE_STATS")
	if err != nil || disabled {
		return "", err
	}
	use, useSet, err := flag("USE_STATSD")
	if err != nil {
		return "", err
	}
	dog, _, err := flag("USE_DOG_STATSD")
	if err != nil {
		return "", err
	}
	host, hasHost := lookup(getenv, "STATSD_HOST")
	port, hasPort := lookup(getenv, "STATSD_PORT")
	if useSet && !use && !dog {
		return "", nil
	}
	if !use && !dog && !hasHost && !hasPort {
		return "", nil
	}
	if !hasHost {
		host = "localhost"
	}
	if !hasPort {
		port = "8125"
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("STATSD_PORT=%q: expected a port number", port)
	}
	return net.JoinHostPort(host, port), nil
}

// mogrifiersEnv reads envoyproxy/ratelimit's DogStatsD mogrifiers:
// USE_DOG_STATSD_MOGRIFIERS lists their names, comma-separated, in the
// order they are tried; for each NAME (upper-cased),
// DOG_STATSD_MOGRIFIER_NAME_PATTERN is a regular expression,
// DOG_STATSD_MOGRIFIER_NAME_NAME the name sent and
// DOG_STATSD_MOGRIFIER_NAME_TAGS optional k1:v1,k2:v2 tags
// (docs/decision-service.md, "DogStatsD mogrifiers").
func mogrifiersEnv(getenv func(string) (string, bool)) ([]decision.Mogrifier, error) {
	list, _ := lookup(getenv, "USE_DOG_STATSD_MOGRIFIERS")
	names := strings.Split(list, ",")
	for i, name := range names {
		if names[i] = strings.TrimSpace(name); names[i] == "" {
			return nil, fmt.Errorf("USE_DOG_STATSD_MOGRIFIERS=%q: empty mogrifier name; want NAME1,NAME2", list)
		}
	}
	var out []decision.Mogrifier
	for _, name := range names {
		prefix := "DOG_STATSD_MOGRIFIER_" + strings.ToUpper(name)
		pattern, ok := lookup(getenv, prefix+"_PATTERN")
		if !ok {
			return nil, fmt.Errorf("%s_PATTERN is not set: USE_DOG_STATSD_MOGRIFIERS names %s, which needs a pattern", prefix, name)
		}
		re, err := regexp.Compile(pattern)
		if err != nil {
			var se *syntax.Error
			if errors.As(err, &se) {
				err = fmt.Errorf("%s in %q", se.Code, se.Expr)
			}
			return nil, fmt.Errorf("%s_PATTERN=%q: not a regular expression (Go RE2 syntax): %v", prefix, pattern, err)
		}
		m := decision.Mogrifier{Pattern: re}
		if m.Name, ok = lookup(getenv, prefix+"_NAME"); !ok {
			return nil, fmt.Errorf("%s_NAME is not set: USE_DOG_STATSD_MOGRIFIERS names %s, which needs the name to send", prefix, name)
		}
		if tags, ok := lookup(getenv, prefix+"_TAGS"); ok {
			m.Tags = map[string]string{}
			for _, kv := range strings.Split(tags, ",") {
				parts := strings.Split(strings.TrimSpace(kv), ":")
				if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
					return nil, fmt.Errorf("%s_TAGS=%q: %q is not key:value (each tag is one key and one value, neither empty, without ':' or ',' inside)", prefix, tags, kv)
				}
				m.Tags[parts[0]] = parts[1]
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// splitAuth reads "password" or "user:password".
func splitAuth(v string) (user, password string) {
	if u, p, ok := strings.Cut(v, ":"); ok {
		return u, p
	}
	return "", v
}

// tlsFiles reads PREFIX_CACERT, PREFIX_CLIENT_CERT and PREFIX_CLIENT_KEY
// into a TLS configuration.
func tlsFiles(prefix string, getenv func(string) (string, bool)) (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if ca, ok := lookup(getenv, prefix+"_CACERT"); ok {
		pem, err := os.ReadFile(ca)
		if err != nil {
			return nil, fmt.Errorf("%s_CACERT: %w", prefix, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s_CACERT=%q: no PEM certificate in it", prefix, ca)
		}
		tc.RootCAs = pool
	}
	cert, hasCert := lookup(getenv, prefix+"_CLIENT_CERT")
	key, hasKey := lookup(getenv, prefix+"_CLIENT_KEY")
	if hasCert != hasKey {
		return nil, fmt.Errorf("%s_CLIENT_CERT and %s_CLIENT_KEY go together", prefix, prefix)
	}
	if hasCert {
		c, err := tls.LoadX509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("%s_CLIENT_CERT/%s_CLIENT_KEY: %w", prefix, prefix, err)
		}
		tc.Certificates = []tls.Certificate{c}
	}
	return tc, nil
}
