package redisstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/rueidis"
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
// config.redis (spec §1.3), so the policy layer maps Kong's configuration
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
// (namespace) that uses it. It is safe for concurrent use.
type Client struct {
	rc      rueidis.Client
	cluster bool
}

// Dial connects to Redis as cfg says. It returns an error wrapping
// ErrConfig for an unusable config, and the connection error when no node
// answers: a gateway that starts while Redis is down should log it and
// run with local-only limits, or retry Dial.
func Dial(cfg Config) (*Client, error) {
	opt, cluster, err := clientOption(cfg)
	if err != nil {
		return nil, err
	}
	rc, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("redisstore: connecting: %w", err)
	}
	return &Client{rc: rc, cluster: cluster}, nil
}

// NewClient wraps an existing rueidis client. Close closes it.
func NewClient(rc rueidis.Client) *Client {
	return &Client{rc: rc, cluster: rc.Mode() == rueidis.ClientModeCluster}
}

// Close closes every connection. Stores using c must be closed first.
func (c *Client) Close() { c.rc.Close() }

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
