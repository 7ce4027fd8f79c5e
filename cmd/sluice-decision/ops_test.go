package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-008287da/sluice/internal/testservers"
)

// envoyproxy/ratelimit's statsd and debug settings: the statistics reach
// a real UDP listener under the peer's names, and the debug port shows
// /rlconfig and /stats.
func TestStatsdAndDebugFromEnv(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	port := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
	s := startWith(t, []string{"USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT=" + port, "STATSD_PROTOCOL=udp", "STATS_FLUSH_INTERVAL=20ms",
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT=0"}, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	rls, _ := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 {
		if _, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{"ratelimit.service.rate_limit.d.k.total_hits:3|c": false, "ratelimit.service.rate_limit.d.k.over_limit:1|c": false,
		"ratelimit.service.rate_limit.d.k.within_limit:2|c": false, "ratelimit.service.config_load_success:1|c": false}
	// Counters may arrive split over flushes; sum them by name.
	sums := map[string]int{}
	buf := make([]byte, 65536)
	_ = udp.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		done := true
		for line := range want {
			name, v, _ := strings.Cut(strings.TrimSuffix(line, "|c"), ":")
			n, _ := strconv.Atoi(v)
			if sums[name] != n {
				done = false
			}
		}
		if done {
			break
		}
		n, _, err := udp.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("statsd: %v; sums %v", err, sums)
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			name, v, _ := strings.Cut(strings.TrimSuffix(line, "|c"), ":")
			c, _ := strconv.Atoi(v)
			sums[name] += c
		}
	}
	if s.debug == "" {
		t.Fatal("no debug listener")
	}
	s.http = s.debug
	if code, body := s.get(t, "/rlconfig"); code != 200 || !strings.Contains(body, "d.k: unit=HOUR requests_per_unit=2") {
		t.Errorf("/rlconfig: %d %s", code, body)
	}
	if code, body := s.get(t, "/stats"); code != 200 || !strings.Contains(body, "ratelimit.service.rate_limit.d.k.total_hits: 3") {
		t.Errorf("/stats: %d %s", code, body)
	}
}

// envoyproxy/ratelimit's plain statsd sends over TCP unless
// STATSD_PROTOCOL says udp (its gostats default): the same variables
// without STATSD_PROTOCOL reach a real TCP listener, newline-terminated
// lines, and a listener that starts after the service still gets them.
func TestStatsdTCPFromEnv(t *testing.T) {
	reserve, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := reserve.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	reserve.Close() // not listening yet: the first sends fail and are dialled again
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := startWith(t, []string{"USE_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT=" + port, "STATS_FLUSH_INTERVAL=20ms"},
		"-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	rls, _ := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	_ = ln.(*net.TCPListener).SetDeadline(time.Now().Add(20 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("no TCP connection from the statsd sink: %v", err)
	}
	defer conn.Close()
	if _, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	sc := bufio.NewScanner(conn)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "ratelimit.service.rate_limit.d.k.total_hits:") && strings.HasSuffix(line, "|c") {
			return
		}
	}
	t.Fatalf("no total_hits line over TCP: %v", sc.Err())
}

// certs writes a CA, a server certificate for 127.0.0.1 and a client
// certificate, all signed by the CA, and returns their paths.
func certs(t *testing.T) (ca, cert, key, clientCert, clientKey string) {
	t.Helper()
	dir := t.TempDir()
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test ca"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := func(serial int64, usage x509.ExtKeyUsage) ([]byte, []byte) {
		k, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, _ := x509.MarshalECPrivateKey(k)
		return der, kd
	}
	sd, sk := leaf(2, x509.ExtKeyUsageServerAuth)
	cd, ck := leaf(3, x509.ExtKeyUsageClientAuth)
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", sd), write("server.key", "EC PRIVATE KEY", sk),
		write("client.pem", "CERTIFICATE", cd), write("client.key", "EC PRIVATE KEY", ck)
}

// gRPC over TLS and mTLS with envoyproxy/ratelimit's settings: a client
// with a certificate signed by the CA is served, one without is refused.
func TestGRPCTLS(t *testing.T) {
	ca, cert, key, clientCert, clientKey := certs(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := startWith(t, []string{"GRPC_SERVER_USE_TLS=true", "GRPC_SERVER_TLS_CERT=" + cert, "GRPC_SERVER_TLS_KEY=" + key, "GRPC_CLIENT_TLS_CACERT=" + ca},
		"-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	pool := x509.NewCertPool()
	pemCA, _ := os.ReadFile(ca)
	pool.AppendCertsFromPEM(pemCA)
	pair, err := tls.LoadX509KeyPair(clientCert, clientKey)
	if err != nil {
		t.Fatal(err)
	}
	try := func(tc *tls.Config) error {
		conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = decideOnce(ctx, rlspb.NewRateLimitServiceClient(conn), "d", "k", "v")
		return err
	}
	if err := try(&tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}}); err != nil {
		t.Fatalf("mTLS client: %v", err)
	}
	if err := try(&tls.Config{RootCAs: pool}); err == nil {
		t.Error("a client without a certificate was served")
	}
	conn, err := grpc.NewClient(s.grpc, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := decideOnce(ctx, rlspb.NewRateLimitServiceClient(conn), "d", "k", "v"); err == nil {
		t.Error("a plaintext client was served")
	}
}

// GRPC_UDS: gRPC on a Unix socket.
func TestGRPCUnixSocket(t *testing.T) {
	dir, err := os.MkdirTemp("", "rls") // short: a socket path is limited to ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "rls.sock")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	s := startWith(t, []string{"GRPC_UDS=" + sock}, "-c", cfg, "-http", "127.0.0.1:0")
	if s.grpc != sock {
		t.Fatalf("grpc listening on %q, want %q", s.grpc, sock)
	}
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if c, err := decideOnce(ctx, rlspb.NewRateLimitServiceClient(conn), "d", "k", "v"); err != nil || c != rlspb.RateLimitResponse_OK {
		t.Fatalf("over the socket: %v %v", c, err)
	}
}

// REDIS_SOCKET_TYPE, REDIS_URL and REDIS_TYPE select the store: two
// processes share one real redis-server's counters. A file with its own
// store section is then rejected, naming the conflict.
func TestRedisFromEnv(t *testing.T) {
	r := testservers.Redis(t, testservers.RedisOptions{})
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	env := []string{"REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=single", "REDIS_URL=" + net.JoinHostPort(r.Host(), strconv.Itoa(r.Port()))}
	a := startWith(t, env, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	b := startWith(t, env, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	ca, _ := a.client(t)
	cb, _ := b.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i, c := range []rlspb.RateLimitServiceClient{ca, cb, ca} {
		want := rlspb.RateLimitResponse_OK
		if i == 2 {
			want = rlspb.RateLimitResponse_OVER_LIMIT
		}
		if got, err := decideOnce(ctx, c, "d", "k", "shared"); err != nil || got != want {
			t.Fatalf("call %d: %v %v, want %v", i+1, got, err, want)
		}
	}
	if code, body := a.get(t, "/status"); code != 200 || !strings.Contains(body, `"store":"redis"`) {
		t.Errorf("/status: %s", body)
	}
	writeFile(t, cfg, "store: {type: memory}\n"+config)
	waitFor(t, a, "the conflicting file is rejected", func() bool {
		return strings.Contains(a.stderr.String(), "the store is set by the environment")
	})
}

// envoyproxy/ratelimit's DogStatsD mogrifiers, from its README's HITS
// example: the per-limit statistics reach a real UDP listener renamed and
// tagged, after EXTRA_TAGS; the rest keep their names.
func TestDogstatsdMogrifiersFromEnv(t *testing.T) {
	udp, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udp.Close()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	port := strconv.Itoa(udp.LocalAddr().(*net.UDPAddr).Port)
	s := startWith(t, []string{"USE_DOG_STATSD=true", "STATSD_HOST=127.0.0.1", "STATSD_PORT=" + port, "STATS_FLUSH_INTERVAL=20ms",
		"EXTRA_TAGS=env:test", "USE_DOG_STATSD_MOGRIFIERS=hits, TIMER",
		`DOG_STATSD_MOGRIFIER_HITS_PATTERN=^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$`,
		"DOG_STATSD_MOGRIFIER_HITS_NAME=ratelimit.service.rate_limit.$3",
		"DOG_STATSD_MOGRIFIER_HITS_TAGS=domain:$1,descriptor:$2",
		`DOG_STATSD_MOGRIFIER_TIMER_PATTERN=^ratelimit_server\.(\w+)\.response_time$`,
		"DOG_STATSD_MOGRIFIER_TIMER_NAME=ratelimit_server.response_time",
		"DOG_STATSD_MOGRIFIER_TIMER_TAGS=method:$1",
	}, "-c", cfg, "-grpc", "127.0.0.1:0", "-http", "127.0.0.1:0")
	rls, _ := s.client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 {
		if _, err := decideOnce(ctx, rls, "d", "k", "v"); err != nil {
			t.Fatal(err)
		}
	}
	// Counters may arrive split over flushes; sum them by name and tags.
	want := map[string]int{
		"ratelimit.service.rate_limit.total_hits|c|#env:test,descriptor:k,domain:d":   3,
		"ratelimit.service.rate_limit.within_limit|c|#env:test,descriptor:k,domain:d": 2,
		"ratelimit.service.rate_limit.over_limit|c|#env:test,descriptor:k,domain:d":   1,
		"ratelimit_server.ShouldRateLimit.total_requests|c|#env:test":                 3,
		"ratelimit_server.response_time|ms|#env:test,method:ShouldRateLimit":          3,
	}
	timer := regexp.MustCompile(`^ratelimit_server\.response_time:\d+\.000000\|ms\|#env:test,method:ShouldRateLimit$`)
	sums := map[string]int{}
	buf := make([]byte, 65536)
	_ = udp.SetReadDeadline(time.Now().Add(20 * time.Second))
	for !reached(want, sums) {
		n, _, err := udp.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("statsd: %v; sums %v", err, sums)
		}
		for _, line := range strings.Split(string(buf[:n]), "\n") {
			name, rest, _ := strings.Cut(line, ":")
			v, kind, _ := strings.Cut(rest, "|")
			if strings.HasPrefix(name, "ratelimit.service.rate_limit.d") {
				t.Fatalf("not mogrified: %q", line)
			}
			if strings.HasPrefix(kind, "ms") {
				if !timer.MatchString(line) {
					t.Fatalf("timer line %q", line)
				}
				v = "1"
			}
			c, _ := strconv.Atoi(v)
			if _, ok := want[name+"|"+kind]; ok {
				sums[name+"|"+kind] += c
			}
		}
	}
}

// reached reports whether every count in want has been reached in got.
func reached(want, got map[string]int) bool {
	for k, w := range want {
		if got[k] < w {
			return false
		}
	}
	return true
}

// A mogrifier that cannot be built stops the service at start, naming the
// variable; one without DogStatsD is ignored with a warning, as the peer
// ignores it.
func TestMogrifierEnvErrors(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	writeFile(t, cfg, config)
	dog := []string{"USE_DOG_STATSD=true", "STATSD_PORT=9"}
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=A,"}, `USE_DOG_STATSD_MOGRIFIERS="A,": empty mogrifier name`},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=a"}, "DOG_STATSD_MOGRIFIER_A_PATTERN is not set: USE_DOG_STATSD_MOGRIFIERS names a"},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=A", "DOG_STATSD_MOGRIFIER_A_PATTERN=^(ratelimit"},
			`DOG_STATSD_MOGRIFIER_A_PATTERN="^(ratelimit": not a regular expression (Go RE2 syntax): missing closing ) in "^(ratelimit"`},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=A", "DOG_STATSD_MOGRIFIER_A_PATTERN=(?<=x)y", "DOG_STATSD_MOGRIFIER_A_NAME=n"},
			`DOG_STATSD_MOGRIFIER_A_PATTERN="(?<=x)y": not a regular expression (Go RE2 syntax)`},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=A", "DOG_STATSD_MOGRIFIER_A_PATTERN=x"}, "DOG_STATSD_MOGRIFIER_A_NAME is not set"},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=A", "DOG_STATSD_MOGRIFIER_A_PATTERN=x", "DOG_STATSD_MOGRIFIER_A_NAME=n", "DOG_STATSD_MOGRIFIER_A_TAGS=url:http://x"},
			`DOG_STATSD_MOGRIFIER_A_TAGS="url:http://x": "url:http://x" is not key:value`},
		{[]string{"USE_DOG_STATSD_MOGRIFIERS=A", "DOG_STATSD_MOGRIFIER_A_PATTERN=x", "DOG_STATSD_MOGRIFIER_A_NAME=n", "DOG_STATSD_MOGRIFIER_A_TAGS=domain:"},
			`DOG_STATSD_MOGRIFIER_A_TAGS="domain:": "domain:" is not key:value`},
	} {
		cmd := command(t, "-c", cfg, "-check")
		cmd.Env = append(append(cmd.Env, dog...), tc.env...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), tc.want) {
			t.Errorf("%q: %v\n%s\nwant %s", tc.env, err, out, tc.want)
		}
	}
	cmd := command(t, "-c", cfg, "-check")
	cmd.Env = append(cmd.Env, "USE_DOG_STATSD_MOGRIFIERS=A", "DOG_STATSD_MOGRIFIERS=A")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "USE_DOG_STATSD_MOGRIFIERS is set without USE_DOG_STATSD=true: ignored") ||
		!strings.Contains(string(out), `DOG_STATSD_MOGRIFIERS=\"A\" is not supported: envoyproxy/ratelimit reads its list of mogrifiers from USE_DOG_STATSD_MOGRIFIERS`) {
		t.Errorf("mogrifiers without DogStatsD: %v\n%s", err, out)
	}
}
