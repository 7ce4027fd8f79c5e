package gateway

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testCA issues certificates for tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	c, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(c)
	return &testCA{cert: c, key: key, pool: pool}
}

// issue returns PEM certificate and key for cn with the DNS names given.
func (ca *testCA) issue(t *testing.T, cn string, names ...string) (certPEM, keyPEM string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn}, DNSNames: names,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: kder}))
}

// indent indents a PEM block for a YAML block scalar.
func indent(s, pad string) string {
	return pad + strings.ReplaceAll(strings.TrimSpace(s), "\n", "\n"+pad)
}

func certEntry(cert, key string, snis ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "- cert: |\n%s\n  key: |\n%s\n  snis:\n", indent(cert, "    "), indent(key, "    "))
	for _, s := range snis {
		fmt.Fprintf(&b, "  - name: %q\n", s)
	}
	return b.String()
}

// startTLSGateway serves config on a TLS listener (HTTP/2 offered) and a
// plain one, returning the gateway and both addresses.
func startTLSGateway(t *testing.T, config string, opts Options) (g *Gateway, tlsAddr, plainAddr string) {
	t.Helper()
	g, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Load([]byte(config), "test"); err != nil {
		t.Fatalf("loading config: %v", err)
	}
	tln, err := Listen(context.Background(), ListenSpec{Addr: "127.0.0.1:0", SSL: true, HTTP2: true, ReusePort: true, Backlog: 128})
	if err != nil {
		t.Fatal(err)
	}
	pln, err := Listen(context.Background(), ListenSpec{Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 2)
	go func() { done <- g.ServeTLS(tln, true) }()
	go func() { done <- g.Serve(pln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("serve: %v", err)
			}
		}
	})
	return g, tln.Addr().String(), pln.Addr().String()
}

func tlsConfig(t *testing.T, upstreamURL string, certs ...string) string {
	t.Helper()
	return fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  url: %s
  routes:
  - name: r
    paths: ["/"]
certificates:
%s`, upstreamURL, strings.Join(certs, ""))
}

func servedCN(t *testing.T, addr, serverName string, pool *x509.CertPool) string {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: serverName, RootCAs: pool, InsecureSkipVerify: serverName == ""})
	if err != nil {
		t.Fatalf("handshake for %q: %v", serverName, err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].Subject.CommonName
}

func TestTLSCertificateBySNI(t *testing.T) {
	up := echoUpstream(t)
	ca := newTestCA(t)
	aC, aK := ca.issue(t, "exact", "a.example.test")
	wC, wK := ca.issue(t, "prefix-wildcard", "x.wild.test", "y.wild.test")
	sC, sK := ca.issue(t, "suffix-wildcard", "shop.example.org")
	dC, dK := ca.issue(t, "star-default", "other.test")
	fC, fK := ca.issue(t, "flag-default", "flag.test")
	flagPair, err := tls.X509KeyPair([]byte(fC), []byte(fK))
	if err != nil {
		t.Fatal(err)
	}
	cfg := tlsConfig(t, up.URL, certEntry(aC, aK, "a.example.test"), certEntry(wC, wK, "*.wild.test"), certEntry(sC, sK, "shop.example.*"))
	_, addr, _ := startTLSGateway(t, cfg, Options{DefaultCertificates: []tls.Certificate{flagPair}})
	for name, want := range map[string]string{
		"a.example.test":   "exact",
		"A.Example.Test":   "exact",
		"x.wild.test":      "prefix-wildcard",
		"shop.example.org": "suffix-wildcard",
		"flag.test":        "flag-default", // no SNI matches: the --ssl-cert certificate
	} {
		if got := servedCN(t, addr, name, ca.pool); got != want {
			t.Errorf("SNI %q: served %q, want %q", name, got, want)
		}
	}
	// With an SNI "*", it is the default instead of the flag's certificate.
	cfg = tlsConfig(t, up.URL, certEntry(aC, aK, "a.example.test"), certEntry(dC, dK, "*"))
	_, addr, _ = startTLSGateway(t, cfg, Options{DefaultCertificates: []tls.Certificate{flagPair}})
	if got := servedCN(t, addr, "other.test", ca.pool); got != "star-default" {
		t.Errorf("unmatched SNI: served %q, want the \"*\" certificate", got)
	}
	if got := servedCN(t, addr, "", ca.pool); got != "star-default" {
		t.Errorf("no SNI: served %q, want the \"*\" certificate", got)
	}
	// Neither: a generated self-signed certificate.
	_, addr, _ = startTLSGateway(t, tlsConfig(t, up.URL, certEntry(aC, aK, "a.example.test")), Options{})
	if got := servedCN(t, addr, "", nil); got != "localhost" {
		t.Errorf("no certificate configured: served %q, want the generated localhost one", got)
	}
}

func h2Client(pool *x509.CertPool, name string) *http.Client {
	return &http.Client{Transport: &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: name},
		ForceAttemptHTTP2: true,
	}, Timeout: 10 * time.Second}
}

func TestHTTP2GoClient(t *testing.T) {
	up := echoUpstream(t)
	ca := newTestCA(t)
	c, k := ca.issue(t, "h2", "h2.test")
	_, addr, plain := startTLSGateway(t, tlsConfig(t, up.URL, certEntry(c, k, "h2.test")), Options{})
	cl := h2Client(ca.pool, "h2.test")
	res, err := cl.Post("https://"+addr+"/echo?q=1", "text/plain", strings.NewReader(strings.Repeat("x", 100000)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.Proto != "HTTP/2.0" || res.StatusCode != 200 {
		t.Fatalf("got %s %d, want HTTP/2.0 200: %s", res.Proto, res.StatusCode, body)
	}
	if res.Header.Get("X-Upstream") != "echo" || res.Header.Get("X-Kong-Request-Id") == "" {
		t.Errorf("response headers %v lack the upstream's or sluice's", res.Header)
	}
	var e echoed
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	if e.Method != "POST" || e.Path != "/echo" || e.Query != "q=1" || e.Headers["x-forwarded-proto"] != "https" {
		t.Errorf("upstream saw %+v", e)
	}
	// A client that offers only HTTP/1.1 gets HTTP/1.1 on the same listener.
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: "h2.test"}, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	res, err = h1.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.Proto != "HTTP/1.1" || res.StatusCode != 200 {
		t.Errorf("HTTP/1.1 over TLS: got %s %d", res.Proto, res.StatusCode)
	}
	// The plain listener is unchanged: HTTP/1.1, X-Forwarded-Proto http.
	r := do(t, "GET", "http://"+plain+"/", nil)
	if r.status != 200 || r.echoed(t).Headers["x-forwarded-proto"] != "http" {
		t.Errorf("plain HTTP: %d %+v", r.status, r.echoed(t))
	}
}

func TestHTTP2Curl(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatal("curl is needed: ", err)
	}
	up := echoUpstream(t)
	ca := newTestCA(t)
	c, k := ca.issue(t, "curl", "curl.test")
	_, addr, _ := startTLSGateway(t, tlsConfig(t, up.URL, certEntry(c, k, "curl.test")), Options{})
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command(curl, "-sS", "--http2", "--cacert", caFile, "--resolve", "curl.test:"+port+":127.0.0.1",
		"-o", "/dev/null", "-w", "%{http_version} %{http_code}", "https://curl.test:"+port+"/x").CombinedOutput()
	if err != nil {
		t.Fatalf("curl: %v: %s", err, out)
	}
	if string(out) != "2 200" {
		t.Errorf("curl --http2: got %q, want \"2 200\"", out)
	}
}

func TestCertificateRotationByReload(t *testing.T) {
	up := echoUpstream(t)
	ca := newTestCA(t)
	oldC, oldK := ca.issue(t, "old", "rot.test")
	newC, newK := ca.issue(t, "new", "rot.test")
	g, addr, _ := startTLSGateway(t, tlsConfig(t, up.URL, certEntry(oldC, oldK, "rot.test")), Options{})
	// An HTTP/1.1 keep-alive connection opened before the reload.
	c, err := tls.Dial("tcp", addr, &tls.Config{ServerName: "rot.test", RootCAs: ca.pool, NextProtos: []string{"http/1.1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	get := func() int {
		t.Helper()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: rot.test\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	if st := get(); st != 200 {
		t.Fatalf("before reload: %d", st)
	}
	// And an HTTP/2 connection.
	h2 := h2Client(ca.pool, "rot.test")
	res, err := h2.Get("https://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.TLS.PeerCertificates[0].Subject.CommonName != "old" {
		t.Fatal("h2 connection did not get the old certificate")
	}
	if err := g.Load([]byte(tlsConfig(t, up.URL, certEntry(newC, newK, "rot.test"))), "test"); err != nil {
		t.Fatal(err)
	}
	if got := servedCN(t, addr, "rot.test", ca.pool); got != "new" {
		t.Errorf("new connection after reload: served %q, want new", got)
	}
	if st := get(); st != 200 {
		t.Errorf("old HTTP/1.1 connection after reload: %d", st)
	}
	if got := c.ConnectionState().PeerCertificates[0].Subject.CommonName; got != "old" {
		t.Errorf("old connection's certificate is %q", got)
	}
	res, err = h2.Get("https://" + addr + "/")
	if err != nil {
		t.Fatalf("old HTTP/2 connection after reload: %v", err)
	}
	res.Body.Close()
	if res.StatusCode != 200 || res.TLS.PeerCertificates[0].Subject.CommonName != "old" {
		t.Errorf("old HTTP/2 connection after reload: %d, certificate %q (want the reused old connection)", res.StatusCode, res.TLS.PeerCertificates[0].Subject.CommonName)
	}
}

func TestParseListen(t *testing.T) {
	got, err := ParseListen("0.0.0.0:8000 reuseport backlog=16384, 0.0.0.0:8443 http2 ssl reuseport backlog=16384, [::]:8444 ssl proxy_protocol deferred bind ipv6only=on so_keepalive=30m:10:3")
	if err != nil {
		t.Fatal(err)
	}
	want := []ListenSpec{
		{Addr: "0.0.0.0:8000", ReusePort: true, Backlog: 16384},
		{Addr: "0.0.0.0:8443", SSL: true, HTTP2: true, ReusePort: true, Backlog: 16384},
		{Addr: "[::]:8444", SSL: true, ProxyProtocol: true, Deferred: true, IPv6Only: "on", KeepAlive: "30m:10:3"},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
	if got, err := ParseListen("off"); err != nil || got != nil {
		t.Errorf("off: %v %v", got, err)
	}
	for in, msg := range map[string]string{
		"8000":                    `"8000": want host:port (e.g. 0.0.0.0:8000)`,
		"0.0.0.0:8000 http2":      "0.0.0.0:8000: http2 without ssl (cleartext HTTP/2) is not supported; add ssl",
		"0.0.0.0:8000 quic":       `0.0.0.0:8000: unknown listen flag "quic"`,
		"0.0.0.0:8000 backlog=x":  `0.0.0.0:8000: backlog must be a positive integer, got "x"`,
		"0.0.0.0:8000,":           `empty entry in "0.0.0.0:8000,"`,
		"0.0.0.0:99999":           `"0.0.0.0:99999": invalid port "99999"`,
		"0.0.0.0:1 ipv6only=yes":  `0.0.0.0:1: ipv6only must be on or off, got "yes"`,
		"0.0.0.0:1 so_keepalive=": `0.0.0.0:1: so_keepalive: want on, off or idle:interval:count, got ""`,
	} {
		_, err := ParseListen(in)
		if err == nil || !strings.HasPrefix(err.Error(), msg) {
			t.Errorf("%q: got %v, want %s", in, err, msg)
		}
	}
}

// TestRouteSNIsOverTLS: a route's snis match the TLS server name, over
// HTTP/1.1 and HTTP/2 alike.
func TestRouteSNIsOverTLS(t *testing.T) {
	one, other := newIDServer(t, "one"), newIDServer(t, "other")
	ca := newTestCA(t)
	c, k := ca.issue(t, "multi", "one.test", "two.test")
	cfg := fmt.Sprintf(`_format_version: "3.0"
services:
- name: one
  url: http://%s
  routes:
  - {name: by-sni, snis: [one.test], protocols: [https], paths: ["/"]}
- name: other
  url: http://%s
  routes:
  - {name: rest, paths: ["/"]}
certificates:
%s`, one.addr, other.addr, certEntry(c, k, "one.test", "two.test"))
	_, addr, _ := startTLSGateway(t, cfg, Options{})
	for _, h2 := range []bool{false, true} {
		for name, want := range map[string]string{"one.test": "one", "two.test": "other"} {
			tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.pool, ServerName: name}, ForceAttemptHTTP2: h2}
			if !h2 {
				tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			}
			res, body, err := get(t, &http.Client{Transport: tr, Timeout: 10 * time.Second}, "https://"+addr+"/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if body != want || (res.ProtoMajor == 2) != h2 {
				t.Errorf("SNI %s (h2 %v): served by %q over %s, want %q", name, h2, body, res.Proto, want)
			}
		}
	}
}

// TestServiceCACertificatesAndClientCertificate: an https upstream that
// requires a client certificate, verified against the service's
// ca_certificates; without them the system roots reject it (502).
func TestServiceCACertificatesAndClientCertificate(t *testing.T) {
	ca := newTestCA(t)
	sC, sK := ca.issue(t, "upstream", "up.test")
	cC, cK := ca.issue(t, "sluice-client", "client.test")
	pair, err := tls.X509KeyPair([]byte(sC), []byte(sK))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: ca.pool})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "client "+r.TLS.PeerCertificates[0].Subject.CommonName)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}))
	cfg := func(trust, upTrust string) string {
		return fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  host: secure.up
  protocol: https
%s  routes: [{name: r, paths: ["/"]}]
upstreams:
- name: secure.up
  host_header: up.test
%s  targets: [{target: "%s"}]
ca_certificates:
- id: 3b6a2cc4-0a4f-4bd1-9a38-4a53cf7a1b9e
  cert: |
%s
certificates:
- id: 7d3f6f8e-3c1b-4c53-8f0e-1f2a3b4c5d6e
  cert: |
%s
  key: |
%s
`, trust, upTrust, ln.Addr().String(), indent(caPEM, "    "), indent(cC, "    "), indent(cK, "    "))
	}
	const cas, client = "  ca_certificates: [3b6a2cc4-0a4f-4bd1-9a38-4a53cf7a1b9e]\n", "  client_certificate: {id: 7d3f6f8e-3c1b-4c53-8f0e-1f2a3b4c5d6e}\n"
	_, base := startGateway(t, cfg(cas+client, ""), Options{})
	if r := do(t, "GET", base+"/", nil); r.status != 200 || r.body != "client sluice-client" {
		t.Errorf("with ca_certificates and client_certificate: %d %q", r.status, r.body)
	}
	_, base = startGateway(t, cfg(cas, client), Options{})
	if r := do(t, "GET", base+"/", nil); r.status != 200 || r.body != "client sluice-client" {
		t.Errorf("with the upstream's client_certificate: %d %q", r.status, r.body)
	}
	_, base = startGateway(t, cfg(cas, ""), Options{})
	if r := do(t, "GET", base+"/", nil); r.status != 502 {
		t.Errorf("without a client certificate: %d %q, want 502", r.status, r.body)
	}
	_, base = startGateway(t, cfg("", ""), Options{})
	if r := do(t, "GET", base+"/", nil); r.status != 502 {
		t.Errorf("without ca_certificates (system roots): %d %q, want 502", r.status, r.body)
	}
}

// TestHTTP2Plugins: plugins read HTTP/2 requests as HTTP/1.1 ones (header
// names arrive lower case): key-auth finds its key, rate-limiting headers
// go out.
func TestHTTP2Plugins(t *testing.T) {
	up := echoUpstream(t)
	ca := newTestCA(t)
	c, k := ca.issue(t, "h2", "h2.test")
	cfg := fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  url: %s
  routes:
  - name: r
    paths: ["/"]
    plugins:
    - name: key-auth
consumers:
- username: alice
  keyauth_credentials: [{key: alice-key}]
certificates:
%s`, up.URL, certEntry(c, k, "h2.test"))
	_, addr, _ := startTLSGateway(t, cfg, Options{})
	cl := h2Client(ca.pool, "h2.test")
	res, body, err := get(t, cl, "https://"+addr+"/", map[string]string{"apikey": "alice-key"})
	if err != nil {
		t.Fatal(err)
	}
	if res.ProtoMajor != 2 || res.StatusCode != 200 {
		t.Fatalf("with the key over HTTP/2: %s %d %s", res.Proto, res.StatusCode, body)
	}
	var e echoed
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Headers["x-consumer-username"] != "alice" {
		t.Errorf("upstream saw %+v (%v)", e, err)
	}
	res, body, err = get(t, cl, "https://"+addr+"/", map[string]string{"apikey": "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != 401 {
		t.Errorf("a wrong key over HTTP/2: %d %s", res.StatusCode, body)
	}
}

// A streamed HTTP/2 request body (no Content-Length) reaches the upstream
// whole, and request-size-limiting still cuts one that is too large.
func TestHTTP2StreamedBody(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := io.Copy(io.Discard, r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		fmt.Fprintf(w, "%d", n)
	}))
	t.Cleanup(up.Close)
	ca := newTestCA(t)
	c, k := ca.issue(t, "h2", "h2.test")
	config := fmt.Sprintf(`_format_version: "3.0"
services:
- name: s
  url: %s
  routes:
  - name: r
    paths: ["/open"]
  - name: limited
    paths: ["/limited"]
    plugins: [{name: request-size-limiting, config: {allowed_payload_size: 1, size_unit: kilobytes}}]
certificates:
%s`, up.URL, certEntry(c, k, "h2.test"))
	_, addr, _ := startTLSGateway(t, config, Options{})
	cl := h2Client(ca.pool, "h2.test")
	post := func(path string, size int) (int, string) {
		t.Helper()
		pr, pw := io.Pipe()
		go func() {
			chunk := []byte(strings.Repeat("x", 1000))
			for left := size; left > 0; left -= len(chunk) {
				if _, err := pw.Write(chunk[:min(len(chunk), left)]); err != nil {
					return
				}
			}
			pw.Close()
		}()
		defer pr.Close()
		res, err := cl.Post("https://"+addr+path, "text/plain", pr)
		if err != nil {
			t.Fatalf("POST %s: %v", path, err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.Proto != "HTTP/2.0" {
			t.Fatalf("POST %s: got %s, want HTTP/2.0", path, res.Proto)
		}
		return res.StatusCode, string(body)
	}
	if st, body := post("/open", 100000); st != 200 || body != "100000" {
		t.Errorf("streamed body: got %d %q, want 200 \"100000\"", st, body)
	}
	if st, body := post("/limited", 1000); st != 200 || body != "1000" {
		t.Errorf("streamed body within the limit: got %d %q, want 200 \"1000\"", st, body)
	}
	if st, _ := post("/limited", 5000); st != 413 {
		t.Errorf("streamed body over the limit: got %d, want 413", st)
	}
}
