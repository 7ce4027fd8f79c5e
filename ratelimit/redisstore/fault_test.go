package redisstore

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/internal/testservers"
	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/ratelimittest"
)

func TestClassify(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Password: "pw"})
	tlsSrv := testservers.Redis(t, testservers.RedisOptions{TLS: true})
	for _, tc := range []struct {
		name    string
		cfg     Config
		reason  string
		setting string
	}{
		{"wrong password", Config{Host: srv.Host(), Port: srv.Port(), Password: "bad"}, "wrongpass", "password"},
		{"no password", Config{Host: srv.Host(), Port: srv.Port()}, "noauth", "password"},
		{"database out of range", Config{Host: srv.Host(), Port: srv.Port(), Password: "pw", Database: 99}, "database", "database"},
		{"server name", Config{Host: tlsSrv.Host(), Port: tlsSrv.Port(), SSL: true, SSLVerify: true, ServerName: "other", TLSConfig: tlsSrv.TLSConfig()}, "tls_name", "server_name"},
		{"unknown CA", Config{Host: tlsSrv.Host(), Port: tlsSrv.Port(), SSL: true, SSLVerify: true, ServerName: "localhost"}, "tls_certificate", "ssl_verify"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := connect(tc.cfg)
			if err == nil {
				c.Close()
				t.Fatal("connecting succeeded")
			}
			f := Classify(err)
			if f == nil || f.Reason != tc.reason || f.Setting != tc.setting {
				t.Fatalf("Classify(%v) = %+v, want reason %s setting %s", err, f, tc.reason, tc.setting)
			}
			if !strings.Contains(f.Error(), "check "+tc.setting) {
				t.Errorf("error %q does not name the setting", f.Error())
			}
		})
	}

	user := testservers.Redis(t, testservers.RedisOptions{Username: "app", UserPassword: "secret"})
	user.Do(t, "ACL", "SETUSER", "app", "-get")
	c := dial(t, Config{Host: user.Host(), Port: user.Port(), Username: "app", Password: "secret"})
	ctx := context.Background()
	if f := Classify(rcOf(t, c).Do(ctx, rcOf(t, c).B().Get().Key("k").Build()).Error()); f == nil || f.Reason != "noperm" || f.Setting != "username" {
		t.Errorf("GET without permission: %+v", f)
	}
	if f := Classify(rcOf(t, c).Do(ctx, rcOf(t, c).B().Arbitrary("NOSUCHCOMMAND").Build()).Error()); f == nil || f.Reason != "unknown_command" {
		t.Errorf("unknown command: %+v", f)
	}
	for _, err := range []error{nil, errors.New("EOF"), context.DeadlineExceeded, ErrBadReply,
		rcOf(t, c).Do(ctx, rcOf(t, c).B().Arbitrary("SET").Args("k").Build()).Error()} {
		if f := Classify(err); f != nil {
			t.Errorf("Classify(%v) = %+v, want nil", err, f)
		}
	}
}

// faultLog records a store's log lines and the reasons of its switches to
// fallback.
type faultLog struct {
	buf bytes.Buffer

	mu      sync.Mutex
	reasons []string
}

func (l *faultLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&l.buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (l *faultLog) record(_, to State, err error) {
	if to != StateFallback {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	reason := "unavailable"
	if f := Classify(err); f != nil {
		reason = f.Reason
	}
	l.reasons = append(l.reasons, reason)
}

func (l *faultLog) lines() []string {
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

// A password changed under a running store (rotated in Redis but not in
// the config): the store counts locally, logs one error naming the setting,
// and one line when the password works again.
func TestWrongPasswordIsLoud(t *testing.T) {
	srv := testservers.Redis(t, testservers.RedisOptions{Password: "admin", Username: "app", UserPassword: "secret"})
	c := dial(t, Config{Host: srv.Host(), Port: srv.Port(), Username: "app", Password: "secret"})
	var log faultLog
	s := newStore(t, c, Options{Namespace: "pw", CallerClock: true, ManualSync: true, Cooldown: time.Second,
		Logger: log.logger(), OnStateChange: log.record})
	now := ratelimittest.At(time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(10).Fixed()}, Now: now}
	take(t, s, r)

	srv.Do(t, "ACL", "SETUSER", "app", "resetpass", ">rotated")
	srv.Do(t, "CLIENT", "KILL", "USER", "app")
	// Probe once per cool-down until a new connection meets the password;
	// every call is decided locally, none fails.
	for i := 0; ; i++ {
		r.Now = now.Add(time.Duration(i) * time.Second)
		take(t, s, r)
		if strings.Contains(log.buf.String(), "wrongpass") {
			break
		}
		if i == 20 {
			t.Fatalf("no wrongpass after %d probes; log:\n%s", i, log.buf.String())
		}
	}
	// Further probes fail the same way and log nothing.
	before := log.buf.Len()
	for i := range 5 {
		r.Now = r.Now.Add(time.Second + time.Duration(i)*time.Millisecond)
		take(t, s, r)
	}
	if log.buf.Len() != before {
		t.Fatalf("probes failing for the same reason logged again:\n%s", log.buf.String()[before:])
	}
	if st := s.Stats(); st.State != StateFallback {
		t.Fatalf("state %s with a wrong password", st.State)
	}
	var errLine string
	for _, l := range log.lines() {
		if strings.Contains(l, "level=ERROR") {
			if errLine != "" {
				t.Fatalf("two error lines:\n%s", log.buf.String())
			}
			errLine = l
		}
	}
	for _, want := range []string{"reason=wrongpass", "setting=config.redis.password", "namespace=pw"} {
		if !strings.Contains(errLine, want) {
			t.Errorf("error line %q lacks %q", errLine, want)
		}
	}
	if strings.Contains(log.buf.String(), "secret") || strings.Contains(log.buf.String(), "rotated") {
		t.Errorf("a password reached the log:\n%s", log.buf.String())
	}

	srv.Do(t, "ACL", "SETUSER", "app", "resetpass", ">secret")
	r.Now = r.Now.Add(2 * time.Second)
	take(t, s, r)
	if st := s.Stats(); st.State != StateConnected {
		t.Fatalf("state %s once the password works again", st.State)
	}
	lines := log.lines()
	if last := lines[len(lines)-1]; !strings.Contains(last, "available again") {
		t.Fatalf("last line %q, want the return", last)
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if got := log.reasons[len(log.reasons)-1]; got != "wrongpass" {
		t.Fatalf("fallback reasons %v, want the last wrongpass", log.reasons)
	}
}

// An outage of a periodic store (sync_rate 0.1 s probes every cycle) logs
// one line when Redis goes and one when it returns, not one per cycle.
func TestOutageLogsOncePerChange(t *testing.T) {
	srv, c := standalone(t)
	var log faultLog
	s := newStore(t, c, Options{Namespace: "out", CallerClock: true, ManualSync: true, SyncRate: 100 * time.Millisecond,
		Timeout: time.Second, Logger: log.logger()})
	now := ratelimittest.At(time.Second)
	r := ratelimit.Request{Key: "k", Limits: []ratelimit.Limit{ratelimit.PerMinute(1000).Fixed()}, Now: now}
	cycle := func(i int) error {
		r.Now = now.Add(time.Duration(i) * 100 * time.Millisecond)
		take(t, s, r)
		return s.Sync(context.Background(), r.Now)
	}
	if err := cycle(0); err != nil {
		t.Fatalf("first cycle: %v", err)
	}
	srv.Stop()
	failed := 0
	for i := 1; i <= 30; i++ {
		if cycle(i) != nil {
			failed++
		}
	}
	if failed < 10 {
		t.Fatalf("%d of 30 cycles failed with Redis stopped", failed)
	}
	srv.Restart(t)
	if err := cycle(31); err != nil {
		t.Fatalf("cycle after the restart: %v", err)
	}
	for i := 32; i < 40; i++ {
		if err := cycle(i); err != nil {
			t.Fatalf("cycle %d: %v", i, err)
		}
	}
	lines := log.lines()
	if len(lines) != 2 || !strings.Contains(lines[0], "level=WARN") || !strings.Contains(lines[0], "unavailable") ||
		!strings.Contains(lines[1], "available again") {
		t.Fatalf("log after %d failed cycles:\n%s\nwant one line down, one up", failed, log.buf.String())
	}
}

// A Redis out of memory (maxmemory reached, noeviction) cannot serve now:
// the store decides with local counters, still limiting, and logs one
// line, not one per call; the plain-command path (fixed windows) and the
// script path (a token bucket) alike.
func TestOutOfMemoryFallsBack(t *testing.T) {
	srv, c := standalone(t)
	var log faultLog
	s := newStore(t, c, Options{Namespace: "oom", CallerClock: true, ManualSync: true, Cooldown: time.Hour,
		Logger: log.logger(), OnStateChange: log.record})
	now := ratelimittest.At(time.Second)
	srv.Do(t, "CONFIG", "SET", "maxmemory-policy", "noeviction")
	srv.Do(t, "CONFIG", "SET", "maxmemory", "1")
	t.Cleanup(func() { srv.Do(t, "CONFIG", "SET", "maxmemory", "0") })
	for _, l := range []ratelimit.Limit{ratelimit.PerMinute(3).Fixed(), ratelimit.PerMinute(3).TokenBucket(3)} {
		r := ratelimit.Request{Key: "k-" + l.Algorithm.String(), Limits: []ratelimit.Limit{l}, Now: now}
		allowed := 0
		for range 10 {
			if take(t, s, r).Allowed {
				allowed++
			}
		}
		if allowed != 3 {
			t.Errorf("%v: %d of 10 allowed with Redis out of memory, want the limit, 3, on local counters", l, allowed)
		}
	}
	if st := s.Stats(); st.State != StateFallback || st.LocalDecisions != 20 {
		t.Errorf("stats %+v, want fallback and 20 local decisions", st)
	}
	if lines := log.lines(); len(lines) != 1 || !strings.Contains(lines[0], "OOM") || !strings.Contains(lines[0], "level=WARN") {
		t.Errorf("log, want one warning naming OOM:\n%s", log.buf.String())
	}
}
