// Package kongconf reads Kong declarative configuration (decK files with
// _format_version "3.0") in YAML or JSON into a validated, linked model:
// services, routes, consumers, consumer groups and plugins with their scopes
// resolved to pointers.
//
// Decoding is strict: an unknown field is an error naming it by its path
// (services[0].routes[1].paths[0]), and every problem of a file is reported
// at once. Plugin configurations are not interpreted here; each plugin's
// config is handed on as JSON for its own strict decoder.
package kongconf

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
)

// ErrInvalid is wrapped by the Errors of a configuration Decode rejects.
var ErrInvalid = errors.New("kongconf: invalid configuration")

// Errors is every problem found in one configuration, each at a path such
// as "services[0].routes[1].paths[0]" (empty for the whole document). It
// wraps ErrInvalid.
type Errors []field.Error

func (e Errors) Error() string {
	var b strings.Builder
	b.WriteString(ErrInvalid.Error())
	for _, fe := range e {
		b.WriteString("\n  ")
		b.WriteString(fe.Error())
	}
	return b.String()
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e Errors) Is(target error) bool { return target == ErrInvalid }

// FieldErrors returns e.
func (e Errors) FieldErrors() []field.Error { return e }

// Config is a parsed declarative configuration. Entities keep the order of
// the file; nested routes and plugins are listed with the top-level ones,
// linked to their parents.
type Config struct {
	resolved   *resolvedRefs   // the references DecodeWith resolved
	unresolved map[string]bool // the paths of those it could not resolve

	// FormatVersion is _format_version as written ("1.1", "2.1" or "3.0");
	// the routes of older versions are read as Kong migrates them.
	FormatVersion  string
	Info           Info
	Services       []*Service
	Routes         []*Route
	Consumers      []*Consumer
	ConsumerGroups []*ConsumerGroup
	Plugins        []*Plugin
	Certificates   []*Certificate
	SNIs           []*SNI
	CACertificates []*CACertificate
	Upstreams      []*Upstream
	Targets        []*Target
}

// A Service is an upstream: where matched requests are proxied.
type Service struct {
	// ID is the configured id, or a stable id derived from the name (or
	// the position) so that counters keyed by service survive reloads.
	ID   string
	Name string
	// Protocol is "http" or "https".
	Protocol string
	Host     string
	// Port defaults to 80 for http and 443 for https.
	Port int
	// Path is prefixed to the proxied path; empty means none.
	Path string
	// ConnectTimeout, ReadTimeout and WriteTimeout are Kong's, 60 s each by
	// default.
	ConnectTimeout time.Duration
	ReadTimeout    time.Duration
	WriteTimeout   time.Duration
	Retries        int
	// TLSVerify checks an https upstream's certificate. Kong leaves it
	// off unless configured; sluice defaults to on (tls_verify: false turns
	// it off).
	TLSVerify bool
	// CACertificates, when set, are the only CAs trusted for an https
	// upstream's certificate (Kong's ca_certificates); nil means the
	// system's.
	CACertificates []*CACertificate
	// ClientCertificate is presented to an https upstream (mutual TLS).
	ClientCertificate *Certificate
	Enabled           bool
	Tags              []string
	// Upstream is the upstream named by Host, whose targets requests are
	// balanced over; nil when Host is a plain host name or address.
	Upstream *Upstream

	addr string
}

// Addr returns host:port.
func (s *Service) Addr() string {
	if s.addr == "" {
		return joinHostPort(s.Host, s.Port)
	}
	return s.addr
}

// A Route matches requests and sends them to its Service.
type Route struct {
	ID   string
	Name string
	// Service is nil for a route without a service: requests matching it
	// get 503 unless a plugin answers first.
	Service *Service
	// Paths are prefixes, or regular expressions when they start with "~"
	// (Regexps holds them compiled, same order, nil for prefixes).
	Paths []string
	// Methods are upper case; empty matches every method.
	Methods []string
	// Hosts are lower case, optionally with a leading "*." or trailing ".*"
	// wildcard, and an optional port.
	Hosts []string
	// Headers maps lower-case header names to the values one of which the
	// request must send: compared in any case, or, for a value starting
	// with "~*", a regular expression found in the lower-cased value
	// (Kong lower-cases the expression too).
	Headers map[string][]string
	// SNIs are lower-case TLS server names; on a TLS request one must be
	// the requested name, while plain HTTP requests match without one, as
	// in Kong.
	SNIs          []string
	StripPath     bool
	PreserveHost  bool
	Protocols     []string
	RegexPriority int
	// HTTPSRedirectStatusCode answers plain HTTP to an https-only route:
	// 426 (Kong's default) with a message, or a redirect (301, 302, 307,
	// 308) to the https URL.
	HTTPSRedirectStatusCode int
	Tags                    []string
	// Where is the route's path in the file, for messages.
	Where string
}

// A Consumer is an API client that authentication plugins identify.
type Consumer struct {
	ID       string
	Username string
	CustomID string
	// KeyAuthKeys are the consumer's key-auth credentials.
	KeyAuthKeys []Credential
	// BasicAuth are its basic-auth credentials (basicauth_credentials).
	BasicAuth []BasicAuthCredential
	// JWTSecrets are its jwt credentials (jwt_secrets).
	JWTSecrets []JWTSecret
	// ACLs are the acl plugin's group names of the consumer (acls), in
	// file order. They are not consumer groups.
	ACLs []ACL
	// Groups are the consumer groups it belongs to, sorted by name.
	Groups []*ConsumerGroup
	Tags   []string
}

// A Credential is one key-auth key.
type Credential struct {
	ID  string
	Key string
	// TTL is the credential's ttl in seconds, 0 when unset. Kong does not
	// apply it to a declarative configuration (DB-less), and neither does
	// sluice: the key stays valid.
	TTL  int
	Tags []string

	where string
}

// A BasicAuthCredential is one basic-auth username and password.
type BasicAuthCredential struct {
	ID       string
	Username string
	// PasswordHash is Kong's stored form: the hex SHA-1 of the password
	// followed by the consumer's id. A plain password in the file is
	// hashed so (_transform: true, the default); with _transform: false
	// the file holds the hash.
	PasswordHash string
	Tags         []string

	where string
}

// A JWTSecret is one jwt credential: the key the token's key claim names,
// and the HMAC secret or public key (PEM) that verifies its signature.
type JWTSecret struct {
	ID  string
	Key string
	// Algorithm is the only "alg" accepted, HS256 by default.
	Algorithm string
	// Secret is the HMAC secret (HS256, HS384, HS512), "" when unset.
	Secret string
	// RSAPublicKey is the PEM public key of the other algorithms (Kong's
	// field name, for EC and Ed25519 keys too), "" when unset.
	RSAPublicKey string
	Tags         []string

	where string
}

// An ACL puts a consumer in a group of the acl plugin.
type ACL struct {
	ID    string
	Group string
	Tags  []string

	where string
}

// A ConsumerGroup groups consumers so that plugins can be scoped to them.
type ConsumerGroup struct {
	ID        string
	Name      string
	Consumers []*Consumer
	Tags      []string
}

// A Plugin is one configured plugin instance with its scope. A nil scope
// field means "any".
type Plugin struct {
	ID           string
	Name         string
	InstanceName string
	Enabled      bool
	// Config is the plugin's config as JSON ("{}" when absent); nil when
	// it could not be read, a problem Decode reports.
	Config        json.RawMessage
	Protocols     []string
	Service       *Service
	Route         *Route
	Consumer      *Consumer
	ConsumerGroup *ConsumerGroup
	Tags          []string
	// Where is the plugin's path in the file ("services[0].plugins[1]"),
	// for messages about its config.
	Where string
}
