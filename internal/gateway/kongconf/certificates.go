package kongconf

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"net/netip"
	"strings"
)

// A Certificate is a TLS certificate with its key, served to clients whose
// SNI matches one of its SNIs (Kong's certificates entity).
type Certificate struct {
	ID string
	// Cert and Key are PEM; CertAlt and KeyAlt are the optional second pair
	// of another key type (RSA beside ECDSA), offered to clients that
	// support it.
	Cert, Key       string
	CertAlt, KeyAlt string
	// Pairs are the parsed pairs: Cert/Key first, then CertAlt/KeyAlt.
	Pairs []tls.Certificate
	SNIs  []*SNI
	Tags  []string
	Where string
}

// An SNI maps a server name, exact or with one wildcard label ("*.example.com",
// "example.*"), to a Certificate. The name "*" is the default certificate.
type SNI struct {
	ID          string
	Name        string
	Certificate *Certificate
	Tags        []string
	Where       string
}

// A CACertificate is a trusted CA certificate (Kong's ca_certificates).
type CACertificate struct {
	ID         string
	Cert       string
	CertDigest string
	X509       *x509.Certificate
	Tags       []string
}

type pendingServiceTLS struct {
	svc     *Service
	cas     []string
	caPaths []string
	client  string
	cPath   string
}

type pendingSNI struct {
	sni  *SNI
	ref  string
	path string
}

// tlsEntities reads certificates, snis and ca_certificates.
func (p *parser) tlsEntities(root *obj) {
	for i, v := range root.list("certificates") {
		p.certificate(v, index("certificates", i))
	}
	for i, v := range root.list("snis") {
		p.sni(v, index("snis", i), nil)
	}
	for i, v := range root.list("ca_certificates") {
		p.caCertificate(v, index("ca_certificates", i))
	}
}

func (p *parser) certificate(v any, path string) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	c := &Certificate{
		ID:      o.str("id"),
		Cert:    o.str("cert"),
		Key:     o.str("key"),
		CertAlt: o.str("cert_alt"),
		KeyAlt:  o.str("key_alt"),
		Tags:    o.strList("tags"),
		Where:   path,
	}
	o.get("created_at")
	o.get("updated_at")
	pair := func(certField, keyField, cert, key string, required bool) {
		switch {
		case cert == "" && key == "":
			if required {
				p.errs.add(o.field(certField), "required field missing")
				p.errs.add(o.field(keyField), "required field missing")
			}
			return
		case cert == "":
			p.errs.add(o.field(certField), "required field missing (%s is set)", keyField)
			return
		case key == "":
			p.errs.add(o.field(keyField), "required field missing (%s is set)", certField)
			return
		}
		if msg := checkPEM(cert, "CERTIFICATE"); msg != "" {
			p.errs.add(o.field(certField), "invalid certificate: %s", msg)
			return
		}
		if msg := checkPEM(key, "PRIVATE KEY"); msg != "" {
			p.errs.add(o.field(keyField), "invalid key: %s", msg)
			return
		}
		kp, err := tls.X509KeyPair([]byte(cert), []byte(key))
		if err != nil {
			p.errs.add(o.field(keyField), "invalid key: %s", strings.TrimPrefix(err.Error(), "tls: "))
			return
		}
		c.Pairs = append(c.Pairs, kp)
	}
	pair("cert", "key", c.Cert, c.Key, true)
	pair("cert_alt", "key_alt", c.CertAlt, c.KeyAlt, false)
	if len(c.Pairs) == 2 && keyType(c.Pairs[0]) == keyType(c.Pairs[1]) {
		p.errs.add(o.field("cert_alt"), "certificate and alternative certificate need to have different type (e.g. RSA and ECDSA), the provided certificates were both of the same type")
	}
	if c.ID == "" {
		c.ID = p.genID("certificate", c.Cert)
	}
	p.cfg.Certificates = append(p.cfg.Certificates, c)
	for i, s := range o.list("snis") {
		p.sni(s, index(o.field("snis"), i), c)
	}
	o.finish()
}

func keyType(c tls.Certificate) string {
	if c.Leaf == nil {
		return ""
	}
	return c.Leaf.PublicKeyAlgorithm.String()
}

// checkPEM returns why s is not one PEM block of the given kind (any
// "... PRIVATE KEY" for keys), or "".
func checkPEM(s, kind string) string {
	b, _ := pem.Decode([]byte(strings.TrimSpace(s)))
	switch {
	case b == nil:
		return "not a PEM block"
	case kind == "CERTIFICATE" && b.Type != "CERTIFICATE":
		return "PEM block is " + b.Type + ", want CERTIFICATE"
	case kind == "PRIVATE KEY" && !strings.HasSuffix(b.Type, "PRIVATE KEY"):
		return "PEM block is " + b.Type + ", want a PRIVATE KEY"
	}
	if kind == "CERTIFICATE" {
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return strings.TrimPrefix(err.Error(), "x509: ")
		}
	}
	return ""
}

// sni reads one SNI, nested under cert or top level (then with a
// certificate reference).
func (p *parser) sni(v any, path string, cert *Certificate) {
	if s, ok := v.(string); ok && cert != nil {
		// decK writes nested snis as names or as mappings.
		v = map[string]any{"name": s}
	}
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	s := &SNI{ID: o.str("id"), Name: strings.ToLower(o.str("name")), Tags: o.strList("tags"), Where: path, Certificate: cert}
	o.get("created_at")
	o.get("updated_at")
	if s.Name == "" {
		p.errs.add(o.field("name"), "required field missing")
	} else if msg := checkSNIName(s.Name); msg != "" {
		p.errs.add(o.field("name"), "%s", msg)
	}
	if cert != nil {
		if o.has("certificate") {
			p.errs.add(o.field("certificate"), "a nested sni belongs to its certificate already")
		}
		o.get("certificate")
		cert.SNIs = append(cert.SNIs, s)
	} else if ref := o.ref("certificate"); ref != "" {
		p.sniRefs = append(p.sniRefs, pendingSNI{s, ref, o.field("certificate")})
	} else if !o.has("certificate") {
		p.errs.add(o.field("certificate"), "required field missing")
	}
	if s.ID == "" {
		s.ID = p.genID("sni", s.Name)
	}
	p.cfg.SNIs = append(p.cfg.SNIs, s)
	o.finish()
}

// checkSNIName returns why name is not a valid SNI (Kong's wildcard_host),
// or "".
func checkSNIName(name string) string {
	if name == "*" {
		return ""
	}
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return "must not be an IP"
	}
	if strings.Count(name, "*") > 1 {
		return "invalid wildcard: must have at most one wildcard"
	}
	if strings.Contains(name, "*") && !strings.HasPrefix(name, "*.") && !strings.HasSuffix(name, ".*") {
		return "invalid wildcard: must be placed at leftmost or rightmost label"
	}
	if strings.Contains(name, ":") {
		return "must not have a port"
	}
	for _, c := range strings.ReplaceAll(name, "*", "x") {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "invalid value: " + name
		}
	}
	return ""
}

func (p *parser) caCertificate(v any, path string) {
	o := asObj(v, path, p.errs)
	if o == nil {
		return
	}
	c := &CACertificate{ID: o.str("id"), Cert: o.str("cert"), CertDigest: o.str("cert_digest"), Tags: o.strList("tags")}
	o.get("created_at")
	o.get("updated_at")
	switch {
	case c.Cert == "":
		p.errs.add(o.field("cert"), "required field missing")
	default:
		if msg := checkPEM(c.Cert, "CERTIFICATE"); msg != "" {
			p.errs.add(o.field("cert"), "invalid certificate: %s", msg)
			break
		}
		b, _ := pem.Decode([]byte(strings.TrimSpace(c.Cert)))
		x, _ := x509.ParseCertificate(b.Bytes)
		c.X509 = x
		if !x.IsCA {
			p.errs.add(o.field("cert"), "certificate does not appear to be a CA because it is missing the \"CA\" basic constraint")
		}
		sum := sha256.Sum256(x.Raw)
		digest := hex.EncodeToString(sum[:])
		if c.CertDigest != "" && c.CertDigest != digest {
			p.errs.add(o.field("cert_digest"), "does not match the certificate (sha256 %s)", digest)
		}
		c.CertDigest = digest
	}
	if c.ID == "" {
		c.ID = p.genID("ca_certificate", c.CertDigest)
	}
	p.cfg.CACertificates = append(p.cfg.CACertificates, c)
	o.finish()
}

// serviceTLS reads a service's ca_certificates, client_certificate and
// tls_verify_depth.
func (p *parser) serviceTLS(s *Service, o *obj) {
	pt := pendingServiceTLS{svc: s}
	for i, v := range o.list("ca_certificates") {
		fp := index(o.field("ca_certificates"), i)
		if ref := refValue(v, fp, p.errs); ref != "" {
			pt.cas, pt.caPaths = append(pt.cas, ref), append(pt.caPaths, fp)
		}
	}
	pt.client, pt.cPath = o.ref("client_certificate"), o.field("client_certificate")
	if o.has("tls_verify_depth") {
		p.errs.add(o.field("tls_verify_depth"), "not supported by sluice: the chain depth of upstream certificates is not limited (remove it or set it to null)")
	}
	o.get("tls_verify_depth")
	if (len(pt.cas) > 0 || pt.client != "") && s.Protocol != "https" {
		p.errs.add(o.path, "ca_certificates and client_certificate apply to protocol https only (protocol is %s)", s.Protocol)
	}
	if len(pt.cas) > 0 || pt.client != "" {
		p.serviceTLSRefs = append(p.serviceTLSRefs, pt)
	}
}

// resolveTLS links top-level snis to their certificates and checks that
// every SNI name is used once.
func (p *parser) resolveTLS() {
	certs := byRef(p.cfg.Certificates, func(c *Certificate) (string, string) { return c.ID, "" })
	cas := byRef(p.cfg.CACertificates, func(c *CACertificate) (string, string) { return c.ID, "" })
	for _, pt := range p.serviceTLSRefs {
		for i, ref := range pt.cas {
			c, ok := cas[ref]
			if !ok {
				p.errs.add(pt.caPaths[i], "no ca_certificate with id %q", ref)
				continue
			}
			pt.svc.CACertificates = append(pt.svc.CACertificates, c)
		}
		if pt.client != "" {
			c, ok := certs[pt.client]
			if !ok {
				p.errs.add(pt.cPath, "no certificate with id %q", pt.client)
				continue
			}
			pt.svc.ClientCertificate = c
		}
	}
	for _, r := range p.sniRefs {
		c, ok := certs[r.ref]
		if !ok {
			p.errs.add(r.path, "no certificate with id %q", r.ref)
			continue
		}
		r.sni.Certificate = c
		c.SNIs = append(c.SNIs, r.sni)
	}
	seen := map[string]string{}
	for _, s := range p.cfg.SNIs {
		if s.Name == "" {
			continue
		}
		if prev, ok := seen[s.Name]; ok {
			p.errs.add(s.Where+".name", "duplicate sni %q (also at %s)", s.Name, prev)
			continue
		}
		seen[s.Name] = s.Where
	}
	ids := map[string]string{}
	for _, c := range p.cfg.Certificates {
		if p.generated[c.ID] {
			continue
		}
		if prev, ok := ids[c.ID]; ok {
			p.errs.add(c.Where+".id", "duplicate certificate id %q (also at %s)", c.ID, prev)
		}
		ids[c.ID] = c.Where
	}
}
