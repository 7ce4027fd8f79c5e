package dimensions

import (
	"fmt"
	"strings"
	"time"
)

// Input is the plain-data view of one request that a Builder reads. An
// adapter fills only what Needs lists, either directly or through Fill. An
// empty string is a missing value. Reset it and reuse it between requests
// to keep the header and query slices' capacity.
type Input struct {
	// Now is the request time, used to check a token's exp and nbf. Zero
	// means the Builder's clock (Options.Now).
	Now      time.Time
	Method   string
	Path     string // without the query string
	ClientIP string
	Consumer ConsumerInfo
	Route    Entity
	Service  Entity
	// Headers holds the needed request headers (first value each); names
	// match case-insensitively.
	Headers []Field
	// Query holds the needed query arguments (first value each); names
	// match exactly.
	Query []Field
}

// A Field is one name and value.
type Field struct {
	Name  string
	Value string
}

// ConsumerInfo is the authenticated consumer, zero when there is none.
type ConsumerInfo struct {
	ID       string
	Username string
	CustomID string
}

// An Entity is a matched route or service, zero when there is none.
type Entity struct {
	ID   string
	Name string
}

// Reset clears in, keeping the capacity of its slices.
func (in *Input) Reset() {
	h, q := in.Headers[:0], in.Query[:0]
	*in = Input{Headers: h, Query: q}
}

// SetHeader records the value of header name.
func (in *Input) SetHeader(name, value string) {
	in.Headers = append(in.Headers, Field{Name: name, Value: value})
}

// SetQuery records the value of query argument name.
func (in *Input) SetQuery(name, value string) {
	in.Query = append(in.Query, Field{Name: name, Value: value})
}

func (in *Input) header(name string) string {
	for _, f := range in.Headers {
		if strings.EqualFold(f.Name, name) {
			return f.Value
		}
	}
	return ""
}

func (in *Input) query(name string) string {
	for _, f := range in.Query {
		if f.Name == name {
			return f.Value
		}
	}
	return ""
}

// Needs lists the request attributes a Builder reads.
type Needs struct {
	Method   bool
	Path     bool
	ClientIP bool
	Consumer bool
	Route    bool
	Service  bool
	// Headers are lower-case header names, each once.
	Headers []string
	// Query are query argument names, each once.
	Query []string
}

func (n *Needs) addHeader(name string) {
	if !contains(n.Headers, name) {
		n.Headers = append(n.Headers, name)
	}
}

func (n *Needs) addQuery(name string) {
	if !contains(n.Query, name) {
		n.Query = append(n.Query, name)
	}
}

func (n Needs) clone() Needs {
	n.Headers = append([]string(nil), n.Headers...)
	n.Query = append([]string(nil), n.Query...)
	return n
}

// Calls returns the number of Accessor calls Fill makes: one per flag set
// and one per header and query argument.
func (n Needs) Calls() int {
	c := len(n.Headers) + len(n.Query)
	for _, b := range []bool{n.Method, n.Path, n.ClientIP, n.Consumer, n.Route, n.Service} {
		if b {
			c++
		}
	}
	return c
}

// An Accessor reads request attributes for Fill; each method is called at
// most once per Fill and only when the Builder needs it. The Kong plugin
// implements it over the PDK, one round trip per call. A missing value is
// "" with a nil error.
type Accessor interface {
	Method() (string, error)
	Path() (string, error)
	ClientIP() (string, error)
	Consumer() (ConsumerInfo, error)
	Route() (Entity, error)
	Service() (Entity, error)
	Header(name string) (string, error)
	QueryArg(name string) (string, error)
}

// Fill resets in and sets every attribute the Builder needs, reading each
// from a once. It stops at the first error, wrapped with the attribute.
func (b *Builder) Fill(in *Input, a Accessor) error {
	in.Reset()
	n := &b.needs
	var err error
	if n.Method {
		if in.Method, err = a.Method(); err != nil {
			return fmt.Errorf("dimensions: reading method: %w", err)
		}
	}
	if n.Path {
		if in.Path, err = a.Path(); err != nil {
			return fmt.Errorf("dimensions: reading path: %w", err)
		}
	}
	if n.ClientIP {
		if in.ClientIP, err = a.ClientIP(); err != nil {
			return fmt.Errorf("dimensions: reading client ip: %w", err)
		}
	}
	if n.Consumer {
		if in.Consumer, err = a.Consumer(); err != nil {
			return fmt.Errorf("dimensions: reading consumer: %w", err)
		}
	}
	if n.Route {
		if in.Route, err = a.Route(); err != nil {
			return fmt.Errorf("dimensions: reading route: %w", err)
		}
	}
	if n.Service {
		if in.Service, err = a.Service(); err != nil {
			return fmt.Errorf("dimensions: reading service: %w", err)
		}
	}
	for _, h := range n.Headers {
		v, err := a.Header(h)
		if err != nil {
			return fmt.Errorf("dimensions: reading header %q: %w", h, err)
		}
		in.SetHeader(h, v)
	}
	for _, q := range n.Query {
		v, err := a.QueryArg(q)
		if err != nil {
			return fmt.Errorf("dimensions: reading query argument %q: %w", q, err)
		}
		in.SetQuery(q, v)
	}
	return nil
}
