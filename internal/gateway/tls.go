package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
)

// certStore maps SNIs to certificates for one configuration generation.
type certStore struct {
	exact map[string][]tls.Certificate // name (wildcards included, "*" too) -> pairs
}

func newCertStore(cfg *kongconf.Config) *certStore {
	cs := &certStore{exact: make(map[string][]tls.Certificate, len(cfg.SNIs))}
	for _, s := range cfg.SNIs {
		if s.Certificate != nil && len(s.Certificate.Pairs) > 0 {
			cs.exact[s.Name] = s.Certificate.Pairs
		}
	}
	return cs
}

// lookup finds the pairs for a server name as Kong does: the exact name,
// then the name with its first label replaced by "*" ("*.example.com"),
// then with its last label replaced ("www.example.*"), then the SNI "*".
func (cs *certStore) lookup(name string) []tls.Certificate {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name != "" {
		if c, ok := cs.exact[name]; ok {
			return c
		}
		if i := strings.IndexByte(name, '.'); i > 0 {
			if c, ok := cs.exact["*"+name[i:]]; ok {
				return c
			}
		}
		if i := strings.LastIndexByte(name, '.'); i > 0 {
			if c, ok := cs.exact[name[:i]+".*"]; ok {
				return c
			}
		}
	}
	return cs.exact["*"]
}

// getCertificate answers a TLS handshake from the configuration serving
// now, so a reload changes the certificate of new connections while open
// ones keep theirs.
func (g *Gateway) getCertificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	var pairs []tls.Certificate
	if gen := g.gen.Load(); gen != nil && gen.certs != nil {
		pairs = gen.certs.lookup(hello.ServerName)
	}
	if len(pairs) == 0 {
		pairs = g.opts.DefaultCertificates
	}
	if len(pairs) == 0 {
		c, err := g.selfSigned()
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	for i := range pairs {
		if hello.SupportsCertificate(&pairs[i]) == nil {
			return &pairs[i], nil
		}
	}
	return &pairs[0], nil
}

// selfSigned is the certificate served when neither the configuration nor
// the options have one for a name, as Kong generates one at start.
func (g *Gateway) selfSigned() (*tls.Certificate, error) {
	g.selfOnce.Do(func() {
		g.selfCert, g.selfErr = selfSignedCertificate("localhost", g.now())
		if g.selfErr == nil {
			g.log.Warn("no certificate for a TLS handshake: serving a self-signed one (configure certificates and snis, or --ssl-cert)")
		}
	})
	return g.selfCert, g.selfErr
}

func selfSignedCertificate(name string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("gateway: generating a default certificate: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 64))
	if err != nil {
		return nil, fmt.Errorf("gateway: generating a default certificate: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name, Organization: []string{"sluice default certificate"}},
		DNSNames:     []string{name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("gateway: generating a default certificate: %w", err)
	}
	leaf, _ := x509.ParseCertificate(der)
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, nil
}

// tlsConfig is the server configuration of a TLS listener.
func (g *Gateway) tlsConfig(http2 bool) *tls.Config {
	protos := []string{"http/1.1"}
	if http2 {
		protos = []string{"h2", "http/1.1"}
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: g.getCertificate, NextProtos: protos}
}

// ServeTLS accepts TLS connections on ln until Shutdown. Certificates are
// chosen by SNI from the serving configuration's certificates and snis,
// else Options.DefaultCertificates, else a generated self-signed one. With
// http2, clients that negotiate "h2" by ALPN get HTTP/2 (served by
// net/http feeding the same request handling); the rest get HTTP/1.1. It
// returns nil after a graceful shutdown.
func (g *Gateway) ServeTLS(ln net.Listener, http2 bool) error {
	cfg := g.tlsConfig(http2)
	h1 := newConnListener(ln)
	var h2 *connListener
	if http2 {
		h2 = newConnListener(ln)
		srv := g.newH2Server()
		g.tlsMu.Lock()
		if g.closed {
			g.tlsMu.Unlock()
			_ = ln.Close()
			return nil
		}
		g.h2servers = append(g.h2servers, srv)
		g.tlsMu.Unlock()
		go func() { _ = srv.Serve(h2) }() // ends with Shutdown
	}
	handshakeTimeout := orDur(g.opts.ReadTimeout, DefaultReadTimeout)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				h1.stop(err)
				if h2 != nil {
					h2.stop(err)
				}
				return
			}
			go func() {
				tc := tls.Server(c, cfg)
				_ = tc.SetDeadline(time.Now().Add(handshakeTimeout)) // a socket deadline: the wall clock, never Options.Now
				if err := tc.Handshake(); err != nil {
					_ = c.Close()
					return
				}
				_ = tc.SetDeadline(time.Time{})
				if h2 != nil && (tlsAllNetHTTP || tc.ConnectionState().NegotiatedProtocol == "h2") {
					h2.push(tc)
					return
				}
				h1.push(tc)
			}()
		}
	}()
	return g.Serve(h1)
}

// connListener hands connections accepted (and handshaken) elsewhere to a
// server's Serve. Closing it closes the listener they came from.
type connListener struct {
	ln    net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error
}

func newConnListener(ln net.Listener) *connListener {
	return &connListener{ln: ln, conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) push(c net.Conn) {
	select {
	case l.conns <- c:
	case <-l.done:
		_ = c.Close()
	}
}

func (l *connListener) stop(err error) {
	l.once.Do(func() {
		l.err = err
		close(l.done)
	})
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		if l.err != nil && !errors.Is(l.err, net.ErrClosed) {
			return nil, l.err
		}
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.stop(net.ErrClosed)
	if err := l.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

func (l *connListener) Addr() net.Addr { return l.ln.Addr() }

// upstreamTrust is what a service's ca_certificates and client_certificate
// give its TLS connections to upstreams.
type upstreamTrust struct {
	roots  *x509.CertPool
	client []tls.Certificate
}

// trustKey names svc's CA and client certificates by their content, and
// keeps them for upstreamTLSConfig: pools keyed by it survive reloads
// that keep the certificates, and a rotated certificate gets new
// connections.
func (g *Gateway) trustKey(svc *kongconf.Service) string {
	return g.trustKeyFor(svc, svc.ClientCertificate)
}

// trustKeyFor is trustKey with the client certificate given: the
// service's, else its upstream's.
func (g *Gateway) trustKeyFor(svc *kongconf.Service, client *kongconf.Certificate) string {
	if len(svc.CACertificates) == 0 && client == nil {
		return ""
	}
	var b strings.Builder
	tr := &upstreamTrust{}
	if len(svc.CACertificates) > 0 {
		tr.roots = x509.NewCertPool()
		for _, c := range svc.CACertificates {
			b.WriteString(c.CertDigest + ",")
			tr.roots.AddCert(c.X509)
		}
	}
	if cc := client; cc != nil && len(cc.Pairs) > 0 {
		sum := sha256.Sum256([]byte(cc.Cert + "\x00" + cc.Key))
		b.WriteString("|" + hex.EncodeToString(sum[:]))
		tr.client = cc.Pairs[:1]
	}
	k := b.String()
	g.trust.LoadOrStore(k, tr)
	return k
}

// upstreamTLSConfig is the client configuration of an https upstream.
func (g *Gateway) upstreamTLSConfig(sni string, verify bool, trust string) *tls.Config {
	cfg := &tls.Config{ServerName: sni, MinVersion: tls.VersionTLS12, InsecureSkipVerify: !verify} //nolint:gosec // the operator's choice (tls_verify: false)
	if v, ok := g.trust.Load(trust); ok && trust != "" {
		tr := v.(*upstreamTrust)
		cfg.RootCAs = tr.roots
		cfg.Certificates = tr.client
	}
	return cfg
}
