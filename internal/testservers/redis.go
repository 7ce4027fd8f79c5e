package testservers

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisOptions configures a standalone redis-server. The zero value is a
// server without authentication or TLS.
type RedisOptions struct {
	// Password, when set, is required from the default user (requirepass).
	Password string
	// Username and UserPassword, when both set, add an ACL user with every
	// permission on every key and channel.
	Username     string
	UserPassword string
	// TLS serves TLS only, with a certificate for 127.0.0.1 and "localhost"
	// signed by a CA generated for this server (see Redis.TLSConfig).
	TLS bool
	// Args are extra redis-server arguments ("--maxmemory", "10mb").
	Args []string
}

// RedisServer is a running redis-server.
type RedisServer struct {
	opts RedisOptions
	p    *proc
	// CAFile is the PEM file of the CA that signed the server certificate
	// when TLS is on.
	CAFile string
	tlsCfg *tls.Config
}

// Redis starts a standalone redis-server in t.TempDir() and stops it when
// the test ends. It fails t if redis-server is missing or does not start.
func Redis(t testing.TB, opts RedisOptions) *RedisServer {
	t.Helper()
	dir := t.TempDir()
	r := &RedisServer{opts: opts}
	var tlsArgs []string
	if opts.TLS {
		ca, cert, key, pool := writeCerts(t, dir)
		r.CAFile = ca
		r.tlsCfg = &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
		tlsArgs = []string{"--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"}
	}
	r.p = &proc{
		name: "redis",
		bin:  "redis-server",
		dir:  dir,
		args: func(port int) []string {
			a := []string{"--bind", "127.0.0.1", "--dir", dir, "--save", "", "--appendonly", "no",
				"--protected-mode", "no", "--logfile", ""}
			if opts.TLS {
				a = append(a, "--port", "0", "--tls-port", strconv.Itoa(port))
				a = append(a, tlsArgs...)
			} else {
				a = append(a, "--port", strconv.Itoa(port))
			}
			if opts.Password != "" {
				a = append(a, "--requirepass", opts.Password)
			}
			if opts.Username != "" && opts.UserPassword != "" {
				// ACL users cannot be given as a command-line argument.
				conf := filepath.Join(dir, "acl.conf")
				line := "user " + opts.Username + " on >" + opts.UserPassword + " ~* &* +@all\n"
				os.WriteFile(conf, []byte(line), 0o600)
				a = append([]string{conf}, a...)
			}
			return append(a, opts.Args...)
		},
		ready: func(port, pid int) error {
			return pingRedis("127.0.0.1:"+strconv.Itoa(port), r.tlsCfg, r.auth(), pid)
		},
	}
	startProc(t, r.p)
	return r
}

// Addr returns "127.0.0.1:port".
func (r *RedisServer) Addr() string { return r.p.addr() }

// Host returns "127.0.0.1".
func (r *RedisServer) Host() string { return "127.0.0.1" }

// Port returns the server's port; it stays the same across Restart.
func (r *RedisServer) Port() int { return r.p.port }

// TLSConfig returns a client configuration trusting the server's CA, with
// ServerName "localhost"; nil when TLS is off.
func (r *RedisServer) TLSConfig() *tls.Config {
	if r.tlsCfg == nil {
		return nil
	}
	return r.tlsCfg.Clone()
}

// Stop kills the server (SIGKILL, as a crash would) and waits for it to
// exit. Its data is lost. Stopping a stopped server does nothing.
func (r *RedisServer) Stop() { r.p.kill() }

// Running reports whether the server process is alive.
func (r *RedisServer) Running() bool { return r.p.running() }

// Restart starts a stopped server again on the same port, empty, and waits
// until it is ready. It fails the test if the port was taken meanwhile or
// the server does not start.
func (r *RedisServer) Restart(t testing.TB) {
	t.Helper()
	r.p.kill()
	if err := r.p.launch(); err != nil {
		t.Fatalf("testservers: restarting redis on port %d: %v", r.p.port, err)
	}
}

// SpoilKeys replaces every key on the server by a list, so that a counter
// script or command on it fails with WRONGTYPE; the test fails when there
// is no key to spoil.
func (r *RedisServer) SpoilKeys(t testing.TB) {
	t.Helper()
	keys, _ := r.Do(t, "KEYS", "*").([]any)
	if len(keys) == 0 {
		t.Fatal("testservers: no key to spoil")
	}
	for _, k := range keys {
		r.Do(t, "DEL", k.(string))
		r.Do(t, "LPUSH", k.(string), "x")
	}
}

// Do runs one command on the server (authenticating when needed) and
// returns its reply; see Conn.Do for the reply types.
func (r *RedisServer) Do(t testing.TB, args ...string) any {
	t.Helper()
	c, err := dialRESP(r.Addr(), r.tlsCfg, 5*time.Second)
	if err != nil {
		t.Fatalf("testservers: dialing %s: %v", r.Addr(), err)
	}
	defer c.Close()
	if r.opts.Password != "" {
		if _, err := c.Do("AUTH", r.opts.Password); err != nil {
			t.Fatalf("testservers: AUTH: %v", err)
		}
	} else if r.opts.Username != "" {
		if _, err := c.Do("AUTH", r.opts.Username, r.opts.UserPassword); err != nil {
			t.Fatalf("testservers: AUTH: %v", err)
		}
	}
	v, err := c.Do(args...)
	if err != nil {
		t.Fatalf("testservers: %s: %v", args[0], err)
	}
	return v
}

// pingRedis reports nil when the server on addr answers and is the
// process pid: on a machine where many tests start servers, the port picked
// may have been taken by another test's server between the probe for a free
// port and our server's bind, and a PONG from that one must not count.
// auth, when set, is sent first (AUTH arguments).
func pingRedis(addr string, tc *tls.Config, auth []string, pid int) error {
	c, err := dialRESP(addr, tc, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if len(auth) > 0 {
		if _, err := c.Do(append([]string{"AUTH"}, auth...)...); err != nil {
			return err
		}
	}
	v, err := c.Do("INFO", "server")
	if err != nil {
		return err
	}
	got := infoField(fmt.Sprint(v), "process_id")
	if got != strconv.Itoa(pid) {
		return fmt.Errorf("port answered by process %q, not ours (%d)", got, pid)
	}
	return nil
}

// auth returns the AUTH arguments of the server, or nil.
func (r *RedisServer) auth() []string {
	switch {
	case r.opts.Password != "":
		return []string{r.opts.Password}
	case r.opts.Username != "" && r.opts.UserPassword != "":
		return []string{r.opts.Username, r.opts.UserPassword}
	}
	return nil
}

// writeCerts generates a CA and a server certificate for 127.0.0.1 and
// localhost, writes them as PEM files in dir and returns the paths and a
// pool trusting the CA.
func writeCerts(t testing.TB, dir string) (caFile, certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testservers: generating CA key: %v", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testservers: creating CA certificate: %v", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatalf("testservers: parsing CA certificate: %v", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("testservers: generating server key: %v", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "localhost"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatalf("testservers: creating server certificate: %v", err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatalf("testservers: encoding server key: %v", err)
	}
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600); err != nil {
			t.Fatalf("testservers: writing %s: %v", p, err)
		}
		return p
	}
	caFile = write("ca.pem", "CERTIFICATE", caDER)
	certFile = write("server.pem", "CERTIFICATE", der)
	keyFile = write("server.key", "EC PRIVATE KEY", keyDER)
	pool = x509.NewCertPool()
	pool.AddCert(caCert)
	return caFile, certFile, keyFile, pool
}

// SentinelGroup is a monitored master with one replica and three sentinels.
type SentinelGroup struct {
	// MasterName is the name the sentinels monitor ("mymaster").
	MasterName string
	// Master and Replica are the data servers; after a failover their roles
	// are swapped on the servers but not in these fields.
	Master, Replica *RedisServer
	sentinels       []*proc
}

// Sentinel starts a master, a replica of it and three sentinels with a
// quorum of two and a down-after of one second, and waits until every
// sentinel knows the replica and the two other sentinels, so that a
// failover can happen.
func Sentinel(t testing.TB) *SentinelGroup {
	t.Helper()
	lookBin(t, "redis-sentinel")
	s := &SentinelGroup{MasterName: "mymaster"}
	s.Master = Redis(t, RedisOptions{})
	s.Replica = Redis(t, RedisOptions{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port())}})
	waitFor(t, "replica link up", StartTimeout, func() error {
		info, _ := s.Replica.Do(t, "INFO", "replication").(string)
		if v := infoField(info, "master_link_status"); v != "up" {
			return fmt.Errorf("master_link_status %q", v)
		}
		return nil
	})
	for range 3 {
		dir := t.TempDir()
		p := &proc{
			name: "sentinel",
			bin:  "redis-sentinel",
			dir:  dir,
			args: func(port int) []string {
				conf := filepath.Join(dir, "sentinel."+strconv.Itoa(port)+".conf")
				text := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndir %s\n"+
					"sentinel monitor %s 127.0.0.1 %d 2\n"+
					"sentinel down-after-milliseconds %s 1000\n"+
					"sentinel failover-timeout %s 3000\n"+
					"sentinel parallel-syncs %s 1\n",
					port, dir, s.MasterName, s.Master.Port(), s.MasterName, s.MasterName, s.MasterName)
				os.WriteFile(conf, []byte(text), 0o600)
				return []string{conf}
			},
			ready: func(port, pid int) error { return pingRedis("127.0.0.1:"+strconv.Itoa(port), nil, nil, pid) },
		}
		startProc(t, p)
		s.sentinels = append(s.sentinels, p)
	}
	for _, p := range s.sentinels {
		waitFor(t, "sentinel discovery", 3*StartTimeout, func() error {
			c, err := dialRESP(p.addr(), nil, time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			reps, err := c.Do("SENTINEL", "REPLICAS", s.MasterName)
			if err != nil {
				return err
			}
			if l, _ := reps.([]any); len(l) < 1 {
				return errors.New("replica not yet known")
			}
			sens, err := c.Do("SENTINEL", "SENTINELS", s.MasterName)
			if err != nil {
				return err
			}
			if l, _ := sens.([]any); len(l) < 2 {
				return fmt.Errorf("%d other sentinels known, want 2", len(l))
			}
			return nil
		})
	}
	return s
}

// Addrs returns the sentinels' addresses.
func (s *SentinelGroup) Addrs() []string {
	out := make([]string, len(s.sentinels))
	for i, p := range s.sentinels {
		out[i] = p.addr()
	}
	return out
}

// MasterAddr asks the sentinels which address they hold for the master
// and returns the first answer.
func (s *SentinelGroup) MasterAddr(t testing.TB) string {
	t.Helper()
	for _, p := range s.sentinels {
		c, err := dialRESP(p.addr(), nil, time.Second)
		if err != nil {
			continue
		}
		v, err := c.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
		c.Close()
		if l, ok := v.([]any); err == nil && ok && len(l) == 2 {
			return fmt.Sprint(l[0]) + ":" + fmt.Sprint(l[1])
		}
	}
	t.Fatalf("testservers: no sentinel answered for %s", s.MasterName)
	return ""
}

// KillMaster kills the current master process (the one the sentinels
// name), to force a failover.
func (s *SentinelGroup) KillMaster(t testing.TB) {
	t.Helper()
	addr := s.MasterAddr(t)
	for _, r := range []*RedisServer{s.Master, s.Replica} {
		if r.Addr() == addr {
			r.Stop()
			return
		}
	}
	t.Fatalf("testservers: master %s is neither of the group's servers", addr)
}

// WaitFailover waits until every sentinel names a master other than old
// and that master accepts writes, and returns its address.
func (s *SentinelGroup) WaitFailover(t testing.TB, old string) string {
	t.Helper()
	var addr string
	waitFor(t, "sentinel failover", 3*StartTimeout, func() error {
		for _, p := range s.sentinels {
			c, err := dialRESP(p.addr(), nil, time.Second)
			if err != nil {
				return err
			}
			v, err := c.Do("SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
			c.Close()
			if err != nil {
				return err
			}
			l, _ := v.([]any)
			if len(l) != 2 {
				return fmt.Errorf("unexpected reply %v", v)
			}
			addr = fmt.Sprint(l[0]) + ":" + fmt.Sprint(l[1])
			if addr == old {
				return errors.New("master not yet replaced")
			}
		}
		c, err := dialRESP(addr, nil, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		info, err := c.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if role := infoField(fmt.Sprint(info), "role"); role != "master" {
			return fmt.Errorf("new master's role is %q", role)
		}
		return nil
	})
	return addr
}

// RedisCluster is a Redis Cluster of three masters without replicas.
type RedisCluster struct {
	nodes []*proc
}

// Cluster starts three cluster-enabled redis-servers, assigns them
// the 16384 slots in three ranges with CLUSTER ADDSLOTSRANGE, joins them
// with CLUSTER MEET and waits until every node reports cluster_state:ok and
// agrees on the slot map.
func Cluster(t testing.TB) *RedisCluster {
	t.Helper()
	c := &RedisCluster{}
	for range 3 {
		dir := t.TempDir()
		p := &proc{
			name:   "redis-cluster",
			bin:    "redis-server",
			dir:    dir,
			busOff: 10000,
			args: func(port int) []string {
				return []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir,
					"--save", "", "--appendonly", "no", "--protected-mode", "no",
					"--cluster-enabled", "yes", "--cluster-config-file", "nodes." + strconv.Itoa(port) + ".conf",
					"--cluster-node-timeout", "5000"}
			},
			ready: func(port, pid int) error { return pingRedis("127.0.0.1:"+strconv.Itoa(port), nil, nil, pid) },
		}
		startProc(t, p)
		c.nodes = append(c.nodes, p)
	}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i, p := range c.nodes {
		do(t, p.addr(), "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(ranges[i][0]), strconv.Itoa(ranges[i][1]))
	}
	for _, p := range c.nodes[1:] {
		do(t, c.nodes[0].addr(), "CLUSTER", "MEET", "127.0.0.1", strconv.Itoa(p.port))
	}
	for _, p := range c.nodes {
		waitFor(t, "cluster_state:ok", 3*StartTimeout, func() error {
			cn, err := dialRESP(p.addr(), nil, time.Second)
			if err != nil {
				return err
			}
			defer cn.Close()
			v, err := cn.Do("CLUSTER", "INFO")
			if err != nil {
				return err
			}
			info := fmt.Sprint(v)
			if s := infoField(info, "cluster_state"); s != "ok" {
				return fmt.Errorf("cluster_state %q", s)
			}
			if n := infoField(info, "cluster_known_nodes"); n != "3" {
				return fmt.Errorf("cluster_known_nodes %q", n)
			}
			if n := infoField(info, "cluster_slots_ok"); n != "16384" {
				return fmt.Errorf("cluster_slots_ok %q", n)
			}
			slots, err := cn.Do("CLUSTER", "SLOTS")
			if err != nil {
				return err
			}
			if l, _ := slots.([]any); len(l) != 3 {
				return fmt.Errorf("node knows %d slot ranges, want 3", len(l))
			}
			return nil
		})
	}
	return c
}

// Addrs returns the three nodes' addresses.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, p := range c.nodes {
		out[i] = p.addr()
	}
	return out
}

// Do runs one command on node i and returns its reply.
func (c *RedisCluster) Do(t testing.TB, i int, args ...string) any {
	t.Helper()
	return do(t, c.nodes[i].addr(), args...)
}

func do(t testing.TB, addr string, args ...string) any {
	t.Helper()
	c, err := dialRESP(addr, nil, 5*time.Second)
	if err != nil {
		t.Fatalf("testservers: dialing %s: %v", addr, err)
	}
	defer c.Close()
	v, err := c.Do(args...)
	if err != nil {
		t.Fatalf("testservers: %s on %s: %v", strings.Join(args, " "), addr, err)
	}
	return v
}
