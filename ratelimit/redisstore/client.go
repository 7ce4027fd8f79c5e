package redisstore

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/rueidis"
	"github.com/seed-008287da/sluice/ratelimit"
)

// Addr is a Redis or Sentinel node address. The zero Host means
// "127.0.0.1" and the zero Port 6379, Kong's defaults.
type Addr struct {
	Host string
	Port int
}

func (a Addr) String() string {
	h, p := a.Host, a.Port
	if h == "" {
		h = "127.0.0.1"
	}
	if p == 0 {
		p = 6379
	}
	return net.JoinHostPort(h, strconv.Itoa(p))
}

// Config says how to reach Redis. Its fields are those of Kong's
// config.redis (see docs/redis.md), so the policy layer maps Kong's configuration
// onto it field by field. Exactly one topology is used: Cluster when
// ClusterNodes is set, else Sentinel when SentinelMaster is set, else the
// standalone server at Host:Port.
//
// The zero value connects to a standalone server at 127.0.0.1:6379,
// database 0, without authentication or TLS.
type Config struct {
	// Host and Port address a standalone server; "" and 0 mean 127.0.0.1
	// and 6379.
	Host string
	Port int
	// Database is the logical database (SELECT); it must be 0 on Cluster.
	Database int
	// Username and Password authenticate with AUTH; an empty Password sends
	// no AUTH, an empty Username with a Password authenticates the default
	// user. They apply to the data nodes of every topology.
	Username string
	Password string

	// SSL connects with TLS. SSLVerify verifies the server certificate
	// against TLSConfig.RootCAs (the system pool when nil); without it any
	// certificate is accepted, as Kong does by default before 3.14.
	// ServerName is the SNI name and the name verified; empty means the
	// host dialled.
	SSL        bool
	SSLVerify  bool
	ServerName string
	// TLSConfig is the base TLS configuration (root CAs, client
	// certificates); nil means an empty one. It is cloned, never modified.
	TLSConfig *tls.Config

	// ConnectTimeout bounds a TCP (and TLS) connect; SendTimeout and
	// ReadTimeout bound how long a connection may wait on a write or for a
	// reply before it is considered broken. Zero means 2 s each, Kong's
	// default. A store bounds each call further with Options.Timeout.
	ConnectTimeout time.Duration
	SendTimeout    time.Duration
	ReadTimeout    time.Duration
	// PoolSize is the number of connections kept for commands that cannot
	// be pipelined; zero means 256 (Kong's keepalive_pool_size). Decisions
	// never use them: they are pipelined on a few shared connections per
	// node.
	PoolSize int

	// SentinelMaster names the master set the sentinels monitor; setting
	// it selects Sentinel. SentinelRole is "master" (the default when
	// empty), "slave" (read from a replica; writes then fail and decisions
	// fall back to local counters) or "any" (treated as "master", since a
	// rate limiter must write).
	SentinelMaster string
	SentinelRole   string
	// SentinelNodes are the sentinels to ask for the master's address.
	SentinelNodes []Addr
	// SentinelUsername and SentinelPassword authenticate with the sentinels
	// themselves.
	SentinelUsername string
	SentinelPassword string

	// ClusterNodes are seed nodes of a Redis Cluster; setting them selects
	// Cluster. The client discovers the other nodes and follows slot
	// moves.
	ClusterNodes []Addr
	// ClusterMaxRedirections caps the MOVED/ASK redirections of one
	// command; zero means 5 (Kong's default).
	ClusterMaxRedirections int

	// CloudAuth, when set, authenticates with short-lived cloud tokens
	// instead of Password; see CloudAuth.
	CloudAuth *CloudAuth
}

// ErrConfig wraps every error about an unusable Config.
var ErrConfig = errors.New("redisstore: invalid config")

// Client is a connection to one Redis deployment, shared by every Store
// (namespace) that uses it. It connects on first use, not when it is
// created, so that stores can be built while Redis is down: they decide
// with local counters until it answers. It is safe for concurrent use.
type Client struct {
	opt     rueidis.ClientOption
	cluster bool
	cloud   bool // the password is a cloud token (Config.CloudAuth)

	rc atomic.Pointer[rueidis.Client] // nil until connected

	// life ends with Close; it cancels connects under way.
	life    context.Context
	endLife context.CancelFunc

	mu      sync.Mutex
	dialing chan struct{} // closed when the dial under way ends; nil when none is
	dialErr error         // the outcome of the last dial, while not connected
	pending map[net.Conn]struct{}
	closed  bool
	wg      sync.WaitGroup
}

// NewClient returns a client for the Redis deployment cfg describes. It
// fails only for an unusable config (an error wrapping ErrConfig); it
// does not connect. The first call of a Store connects, within that call's
// deadline (Options.Timeout): a Redis that is down or does not answer
// makes the call fall back to local counters, and the connection is tried
// again by the store's next probe. Close the client when its stores are
// closed.
func NewClient(cfg Config) (*Client, error) {
	opt, cluster, err := clientOption(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{opt: opt, cluster: cluster, cloud: cfg.CloudAuth != nil}
	c.life, c.endLife = context.WithCancel(context.Background())
	c.opt.DialCtxFn = c.dialConn
	return c, nil
}

// Ping connects if the client is not connected yet and sends PING, within
// ctx. It reports why Redis cannot be used (see Classify for the errors of
// configuration), or nil.
func (c *Client) Ping(ctx context.Context) error {
	rc, err := c.conn(ctx)
	if err != nil {
		return c.fault(err)
	}
	return c.fault(rc.Do(ctx, rc.B().Ping().Build()).Error())
}

// conn returns the connected client, connecting first when needed. A dial
// goes on in the background when ctx ends first: the next call uses its
// result, or starts another when it failed.
func (c *Client) conn(ctx context.Context) (rueidis.Client, error) {
	if p := c.rc.Load(); p != nil {
		return *p, nil
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ratelimit.ErrClosed
	}
	if p := c.rc.Load(); p != nil {
		c.mu.Unlock()
		return *p, nil
	}
	done := c.dialing
	if done == nil {
		done = make(chan struct{})
		c.dialing = done
		c.wg.Add(1)
		go c.dial(done)
	}
	c.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("redisstore: connecting to %s: %w", c.addrs(), ctx.Err())
	}
	if p := c.rc.Load(); p != nil {
		return *p, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ratelimit.ErrClosed
	}
	return nil, c.dialErr
}

// dial connects once, bounded by the connect timeout, and closes done.
func (c *Client) dial(done chan struct{}) {
	defer c.wg.Done()
	rc, err := rueidis.NewClient(c.opt)
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.pending) // rueidis owns the connections now, or closed them
	c.dialing = nil
	switch {
	case c.closed:
		if err == nil {
			rc.Close()
		}
		c.dialErr = ratelimit.ErrClosed
	case err != nil:
		c.dialErr = fmt.Errorf("redisstore: connecting to %s: %w", c.addrs(), err)
	default:
		c.dialErr = nil
		c.rc.Store(&rc)
	}
	close(done)
}

// dialConn opens one connection for the client. A connection opened while
// the client first connects is closed by Close, so that Close need not
// wait for a server that accepts and never answers.
func (c *Client) dialConn(ctx context.Context, dst string, d *net.Dialer, tc *tls.Config) (net.Conn, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.life, cancel)()
	var conn net.Conn
	var err error
	if tc != nil {
		conn, err = (&tls.Dialer{NetDialer: d, Config: tc}).DialContext(ctx, "tcp", dst)
	} else {
		conn, err = d.DialContext(ctx, "tcp", dst)
	}
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, ratelimit.ErrClosed
	}
	if c.rc.Load() == nil {
		if c.pending == nil {
			c.pending = make(map[net.Conn]struct{})
		}
		c.pending[conn] = struct{}{}
	}
	return conn, nil
}

// addrs names the nodes the client connects to first.
func (c *Client) addrs() string { return strings.Join(c.opt.InitAddress, ",") }

// fault returns err as a *Fault when it is one (see Classify), naming the
// setting in use: with cloud authentication, the token stands for the
// password. Other errors are returned as they are.
func (c *Client) fault(err error) error {
	f := Classify(err)
	if f == nil {
		return err
	}
	if c.cloud && (f.Reason == "wrongpass" || f.Reason == "noauth") && f.Setting == "password" {
		f = &Fault{Reason: f.Reason, Setting: "cloud_authentication", Err: f.Err}
	}
	return f
}

// Close closes every connection, and ends a first connection under way.
// Stores using c must be closed first. Later calls of its stores that need
// Redis return an error wrapping ratelimit.ErrClosed; with LocalOnly, or
// while the breaker keeps Redis away, they are still decided locally.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.endLife()
	for conn := range c.pending {
		conn.Close()
	}
	c.mu.Unlock()
	c.wg.Wait()
	if p := c.rc.Swap(nil); p != nil {
		(*p).Close()
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

func clientOption(cfg Config) (rueidis.ClientOption, bool, error) {
	var opt rueidis.ClientOption
	opt.DisableCache = true
	opt.Username = cfg.Username
	opt.Password = cfg.Password
	opt.SelectDB = cfg.Database
	opt.Dialer = net.Dialer{Timeout: orDefault(cfg.ConnectTimeout, 2*time.Second), KeepAlive: time.Second}
	opt.ConnWriteTimeout = max(orDefault(cfg.SendTimeout, 2*time.Second), orDefault(cfg.ReadTimeout, 2*time.Second))
	opt.BlockingPoolSize = cfg.PoolSize
	if opt.BlockingPoolSize <= 0 {
		opt.BlockingPoolSize = 256
	}
	if cfg.Database < 0 {
		return opt, false, fmt.Errorf("%w: database must not be negative, got %d", ErrConfig, cfg.Database)
	}
	if cfg.CloudAuth != nil {
		ts, err := newTokenSource(cfg.CloudAuth, cfg.Username)
		if err != nil {
			return opt, false, err
		}
		opt.Username, opt.Password = "", ""
		opt.AuthCredentialsFn = ts.authFn(cfg.Username)
	}
	if cfg.SSL {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.TLSConfig != nil {
			tc = cfg.TLSConfig.Clone()
		}
		if cfg.ServerName != "" {
			tc.ServerName = cfg.ServerName
		}
		tc.InsecureSkipVerify = !cfg.SSLVerify
		opt.TLSConfig = tc
	}
	switch {
	case len(cfg.ClusterNodes) > 0:
		if cfg.Database != 0 {
			return opt, false, fmt.Errorf("%w: database must be 0 on Redis Cluster, got %d", ErrConfig, cfg.Database)
		}
		for _, a := range cfg.ClusterNodes {
			opt.InitAddress = append(opt.InitAddress, a.String())
		}
		opt.ClusterOption.MaxMovedRedirections = cfg.ClusterMaxRedirections
		if opt.ClusterOption.MaxMovedRedirections <= 0 {
			opt.ClusterOption.MaxMovedRedirections = 5
		}
		opt.ClusterOption.ShardsRefreshInterval = 10 * time.Second
		return opt, true, nil
	case cfg.SentinelMaster != "":
		if len(cfg.SentinelNodes) == 0 {
			return opt, false, fmt.Errorf("%w: sentinel_nodes must be set with sentinel_master", ErrConfig)
		}
		for _, a := range cfg.SentinelNodes {
			opt.InitAddress = append(opt.InitAddress, a.String())
		}
		opt.Sentinel = rueidis.SentinelOption{
			MasterSet: cfg.SentinelMaster,
			Username:  cfg.SentinelUsername,
			Password:  cfg.SentinelPassword,
			Dialer:    opt.Dialer,
			TLSConfig: opt.TLSConfig,
		}
		switch cfg.SentinelRole {
		case "", "master", "any":
		case "slave":
			opt.ReplicaOnly = true
		default:
			return opt, false, fmt.Errorf("%w: sentinel_role must be master, slave or any, got %q", ErrConfig, cfg.SentinelRole)
		}
		return opt, false, nil
	}
	opt.InitAddress = []string{Addr{cfg.Host, cfg.Port}.String()}
	opt.ForceSingleClient = true
	return opt, false, nil
}
