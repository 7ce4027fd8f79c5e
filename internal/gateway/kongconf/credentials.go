package kongconf

import (
	"crypto/sha1"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"strings"
)

// credentialLists are the credential entities of the auth plugins, by
// their declarative names.
var credentialLists = []string{"keyauth_credentials", "basicauth_credentials", "jwt_secrets", "acls"}

// jwtAlgorithms are the algorithms of Kong's jwt_secrets schema.
var jwtAlgorithms = []string{"HS256", "HS384", "HS512", "RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512", "EdDSA"}

// credentials reads the credential lists nested in a consumer.
func (p *parser) credentials(c *Consumer, o *obj) {
	for _, list := range credentialLists {
		for i, v := range o.list(list) {
			path := index(o.field(list), i)
			co := asObj(v, path, p.errs)
			if co == nil {
				continue
			}
			if co.has("consumer") {
				p.errs.add(co.field("consumer"), "a nested credential belongs to its consumer already")
			}
			co.get("consumer")
			p.credential(c, list, co)
		}
	}
}

// topCredentials reads credential lists at the top level of the file,
// each entry naming its consumer.
func (p *parser) topCredentials(root *obj) {
	var consumers map[string]*Consumer
	for _, list := range credentialLists {
		for i, v := range root.list(list) {
			path := index(list, i)
			co := asObj(v, path, p.errs)
			if co == nil {
				continue
			}
			if consumers == nil {
				consumers = byRef(p.cfg.Consumers, func(c *Consumer) (string, string) { return c.ID, c.Username })
			}
			ref := co.ref("consumer")
			c := consumers[ref]
			switch {
			case ref == "" && !co.has("consumer"):
				p.errs.add(co.field("consumer"), "required field missing")
			case ref != "" && c == nil:
				p.errs.add(co.field("consumer"), "no consumer named %q", ref)
			}
			if c == nil {
				c = &Consumer{} // read the rest for its errors
			}
			p.credential(c, list, co)
		}
	}
}

// credential reads one credential of kind list into c.
func (p *parser) credential(c *Consumer, list string, o *obj) {
	id := o.str("id")
	tags := o.strList("tags")
	timestamps(o)
	switch list {
	case "keyauth_credentials":
		// A missing key is one Kong would generate: nobody knows it, so
		// the credential matches nothing.
		cr := Credential{ID: id, Key: o.str("key"), Tags: tags, where: o.path}
		cr.TTL = int(o.integer("ttl", 0, 0, 100000000))
		if cr.ID == "" && cr.Key != "" {
			cr.ID = p.genID("keyauth_credential", cr.Key)
		}
		c.KeyAuthKeys = append(c.KeyAuthKeys, cr)
	case "basicauth_credentials":
		b := BasicAuthCredential{ID: id, Username: o.str("username"), Tags: tags, where: o.path}
		password := o.str("password")
		if b.Username == "" {
			p.errs.add(o.field("username"), "required field missing")
		}
		if !o.has("password") {
			p.errs.add(o.field("password"), "required field missing")
		}
		if p.cfg.Info.Transform {
			b.PasswordHash = BasicAuthHash(c.ID, password)
		} else {
			b.PasswordHash = strings.ToLower(password)
		}
		if b.ID == "" {
			b.ID = p.genID("basicauth_credential", b.Username)
		}
		c.BasicAuth = append(c.BasicAuth, b)
	case "jwt_secrets":
		s := JWTSecret{ID: id, Key: o.str("key"), Secret: o.str("secret"), RSAPublicKey: o.str("rsa_public_key"), Algorithm: o.str("algorithm"), Tags: tags, where: o.path}
		if s.Algorithm == "" {
			s.Algorithm = "HS256"
		}
		if !contains(jwtAlgorithms, s.Algorithm) {
			p.errs.add(o.field("algorithm"), "expected one of: %s", strings.Join(jwtAlgorithms, ", "))
		}
		switch s.Algorithm {
		case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA":
			if s.RSAPublicKey == "" {
				p.errs.add(o.field("rsa_public_key"), "required field missing")
			}
		}
		if s.RSAPublicKey != "" {
			if _, err := ParsePublicKey(s.RSAPublicKey); err != nil {
				p.errs.add(o.field("rsa_public_key"), "invalid key")
			}
		}
		if s.ID == "" && s.Key != "" {
			s.ID = p.genID("jwt_secret", s.Key)
		}
		c.JWTSecrets = append(c.JWTSecrets, s)
	case "acls":
		a := ACL{ID: id, Group: o.str("group"), Tags: tags, where: o.path}
		if a.Group == "" {
			p.errs.add(o.field("group"), "required field missing")
		}
		if a.ID == "" {
			a.ID = p.genID("acl", c.ID+"\x00"+a.Group)
		}
		c.ACLs = append(c.ACLs, a)
	}
	o.finish()
}

// BasicAuthHash is Kong's stored form of a basic-auth password: the hex
// SHA-1 of the password followed by the consumer id.
func BasicAuthHash(consumerID, password string) string {
	h := sha1.Sum([]byte(password + consumerID))
	return hex.EncodeToString(h[:])
}

// ParsePublicKey reads a PEM public key as jwt_secrets' rsa_public_key
// holds it: a PKIX public key (RSA, ECDSA or Ed25519), a PKCS #1 RSA
// public key, or a certificate whose key is used.
func ParsePublicKey(s string) (any, error) {
	block, _ := pem.Decode([]byte(strings.TrimSpace(s)))
	if block == nil {
		return nil, errInvalidKey
	}
	switch block.Type {
	case "RSA PUBLIC KEY":
		return x509.ParsePKCS1PublicKey(block.Bytes)
	case "CERTIFICATE":
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, err
		}
		return cert.PublicKey, nil
	}
	return x509.ParsePKIXPublicKey(block.Bytes)
}

type keyError struct{}

func (keyError) Error() string { return "kongconf: invalid key" }

var errInvalidKey error = keyError{}
