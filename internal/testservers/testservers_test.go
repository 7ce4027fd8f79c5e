package testservers

import (
	"fmt"
	"strings"
	"testing"
)

func TestRedisStopRestart(t *testing.T) {
	r := Redis(t, RedisOptions{})
	if v := r.Do(t, "SET", "k", "v"); v != "OK" {
		t.Fatalf("SET = %v", v)
	}
	port := r.Port()
	r.Stop()
	if r.Running() {
		t.Fatal("running after Stop")
	}
	if err := pingRedis(r.Addr(), nil, nil, 0); err == nil {
		t.Fatal("PING answered after Stop")
	}
	r.Restart(t)
	if r.Port() != port {
		t.Fatalf("port %d after restart, want %d", r.Port(), port)
	}
	if v := r.Do(t, "GET", "k"); v != nil {
		t.Fatalf("GET after restart = %v, want nil (data lost)", v)
	}
}

func TestRedisAuthAndTLS(t *testing.T) {
	r := Redis(t, RedisOptions{Password: "pw", Username: "app", UserPassword: "secret", TLS: true})
	if r.TLSConfig() == nil {
		t.Fatal("no TLS config")
	}
	c, err := dialRESP(r.Addr(), r.TLSConfig(), StartTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Do("PING"); err == nil || !strings.HasPrefix(err.Error(), "NOAUTH") {
		t.Fatalf("PING without auth: %v", err)
	}
	if _, err := c.Do("AUTH", "app", "secret"); err != nil {
		t.Fatalf("AUTH as ACL user: %v", err)
	}
	if v, err := c.Do("WHOAMI"); err == nil {
		t.Fatalf("WHOAMI = %v, want an unknown-command error", v)
	}
	if v, _ := c.Do("ACL", "WHOAMI"); v != "app" {
		t.Fatalf("ACL WHOAMI = %v", v)
	}
	if _, err := dialRESP(r.Addr(), nil, StartTimeout); err == nil {
		// A plain connection is accepted by TCP but must fail the handshake
		// on the first command.
		c2, _ := dialRESP(r.Addr(), nil, StartTimeout)
		if _, err := c2.Do("PING"); err == nil {
			t.Fatal("plain-text PING answered by a TLS server")
		}
		c2.Close()
	}
}

func TestCluster(t *testing.T) {
	c := Cluster(t)
	if n := len(c.Addrs()); n != 3 {
		t.Fatalf("%d nodes", n)
	}
	info := fmt.Sprint(c.Do(t, 1, "CLUSTER", "INFO"))
	if infoField(info, "cluster_state") != "ok" {
		t.Fatalf("cluster info: %s", info)
	}
}

func TestSentinelFailover(t *testing.T) {
	s := Sentinel(t)
	old := s.MasterAddr(t)
	if old != s.Master.Addr() {
		t.Fatalf("master %s, want %s", old, s.Master.Addr())
	}
	s.KillMaster(t)
	if got := s.WaitFailover(t, old); got != s.Replica.Addr() {
		t.Fatalf("new master %s, want %s", got, s.Replica.Addr())
	}
}

func TestEtcd(t *testing.T) {
	e := Etcd(t)
	if !strings.HasPrefix(e.Endpoint(), "http://127.0.0.1:") {
		t.Fatal(e.Endpoint())
	}
}
