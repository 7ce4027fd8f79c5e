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
	FormatVersion  string
	Services       []*Service
	Routes         []*Route
	Consumers      []*Consumer
	ConsumerGroups []*ConsumerGroup
	Plugins        []*Plugin
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
	Enabled   bool
	Tags      []string

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
	// Headers maps lower-case header names to the values (any case) one of
	// which the request must send.
	Headers       map[string][]string
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
	// Groups are the consumer groups it belongs to, sorted by name.
	Groups []*ConsumerGroup
	Tags   []string
}

// A Credential is one key-auth key.
type Credential struct {
	ID  string
	Key string
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
