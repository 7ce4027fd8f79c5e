package bench

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startRedis starts a redis-server on a free loopback port in a temporary
// directory, without persistence, and stops it when tb ends. It fails tb
// when the binary is missing or the server does not answer PING within 10 s.
func startRedis(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("redis-server not found (apt-get install redis-server): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := tb.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "no", "--maxclients", "10000")
	if err := cmd.Start(); err != nil {
		tb.Fatalf("starting redis-server: %v", err)
	}
	tb.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redis-server on %s did not answer PING within 10s: %v", addr, err)
		}
		// Poll again: the deadline bounds the loop; the PING's own timeout
		// paces it.
		<-time.After(10 * time.Millisecond)
	}
}

// redisCounters is what INFO says about the work a server has done.
type redisCounters struct {
	calls   int64 // commands executed, those run inside scripts included, INFO excluded
	scripts int64 // EVAL, EVALSHA and FCALL calls
	reads   int64 // read events processed on client sockets
}

var scriptCommands = []string{"cmdstat_eval", "cmdstat_evalsha", "cmdstat_eval_ro", "cmdstat_evalsha_ro", "cmdstat_fcall", "cmdstat_fcall_ro"}

// readRedisCounters reads INFO commandstats and stats.
func readRedisCounters(ctx context.Context, rdb *redis.Client) (redisCounters, error) {
	s, err := rdb.Info(ctx, "commandstats", "stats").Result()
	if err != nil {
		return redisCounters{}, fmt.Errorf("bench: reading INFO: %w", err)
	}
	var c redisCounters
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case strings.HasPrefix(line, "cmdstat_") && !strings.HasPrefix(line, "cmdstat_info:"):
			// cmdstat_evalsha:calls=12,usec=...
			_, rest, _ := strings.Cut(line, ":calls=")
			num, _, _ := strings.Cut(rest, ",")
			n, err := strconv.ParseInt(num, 10, 64)
			if err != nil {
				return redisCounters{}, fmt.Errorf("bench: parsing INFO line %q: %w", line, err)
			}
			c.calls += n
			if name, _, _ := strings.Cut(line, ":"); slices.Contains(scriptCommands, name) {
				c.scripts += n
			}
		case strings.HasPrefix(line, "total_reads_processed:"):
			n, err := strconv.ParseInt(strings.TrimPrefix(line, "total_reads_processed:"), 10, 64)
			if err != nil {
				return redisCounters{}, fmt.Errorf("bench: parsing INFO line %q: %w", line, err)
			}
			c.reads = n
		}
	}
	return c, nil
}
