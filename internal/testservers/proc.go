// Package testservers starts real servers (redis-server, redis-sentinel,
// a Redis Cluster, etcd) for tests, on free loopback ports in t.TempDir(),
// and stops them with t.Cleanup.
//
// Readiness is polled with a bounded deadline, never waited for with a fixed
// sleep. A missing binary or a server that cannot start fails the test with
// t.Fatal: these tests never skip, so a CI machine without the servers is
// noticed rather than silently passing.
package testservers

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// StartTimeout bounds how long a server may take to become ready.
const StartTimeout = 20 * time.Second

// pollInterval is the pause between two readiness probes. It paces a
// bounded poll; nothing waits for it to pass to be correct.
const pollInterval = 20 * time.Millisecond

// freePort returns a loopback port that was free a moment ago, below the
// kernel's ephemeral range: servers are restarted on their port (failover
// and outage tests), and a port the kernel may hand to any outgoing
// connection in the meantime would make the restart fail with "address
// already in use". When busOffset is non-zero, port+busOffset must be free
// too (Redis Cluster's bus port), and below the range as well.
func freePort(busOffset int) (int, error) {
	hi := ephemeralLow() - busOffset
	if hi <= minPort {
		return 0, fmt.Errorf("testservers: no port below the ephemeral range (%d) for a bus offset of %d", ephemeralLow(), busOffset)
	}
	for range 200 {
		port := minPort + rand.IntN(hi-minPort)
		if !canListen(port) || busOffset != 0 && !canListen(port+busOffset) {
			continue
		}
		return port, nil
	}
	return 0, errors.New("testservers: no free port found")
}

// minPort is the lowest port freePort hands out.
const minPort = 10000

// ephemeralLow returns the first port of the kernel's ephemeral range
// (Linux's net.ipv4.ip_local_port_range; its default when unreadable).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if lo, err := strconv.Atoi(f[0]); err == nil && lo > minPort {
				return lo
			}
		}
	}
	return 32768
}

// canListen reports whether a listener can bind 127.0.0.1:port now.
func canListen(port int) bool {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// A proc is one server process that can be stopped and started again on
// the same port.
type proc struct {
	t    testing.TB
	name string
	bin  string
	dir  string
	args func(port int) []string
	// ready probes the server on port; pid is the process started, so a
	// probe can tell our server from another test's that took the port.
	ready   func(port, pid int) error
	busOff  int
	port    int
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// lookBin returns the path of bin or fails the test.
func lookBin(t testing.TB, bin string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Fatalf("testservers: %s not found in PATH (install it: apt-get install redis-server redis-sentinel etcd-server): %v", bin, err)
	}
	return p
}

// startProc starts p on a fresh free port, retrying with another port when
// the first one was taken in the meantime, and registers its cleanup.
func startProc(t testing.TB, p *proc) {
	t.Helper()
	p.t = t
	p.bin = lookBin(t, p.bin)
	t.Cleanup(p.kill)
	var lastErr error
	for range 5 {
		port, err := freePort(p.busOff)
		if err != nil {
			t.Fatalf("testservers: %s: %v", p.name, err)
		}
		p.port = port
		err = p.launch()
		if err == nil {
			return
		}
		lastErr = err
		if !strings.Contains(err.Error(), "in use") {
			break
		}
	}
	t.Fatalf("testservers: starting %s: %v", p.name, lastErr)
}

// launch starts the process on p.port and polls until it is ready, it
// exits, or StartTimeout passes.
func (p *proc) launch() error {
	p.logPath = filepath.Join(p.dir, p.name+"."+strconv.Itoa(p.port)+".log")
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args(p.port)...)
	cmd.Dir = p.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()

	deadline := time.Now().Add(StartTimeout)
	var probeErr error
	for {
		select {
		case <-done:
			return fmt.Errorf("%s exited during start-up: %s", p.name, p.logTail())
		default:
		}
		if probeErr = p.ready(p.port, cmd.Process.Pid); probeErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			p.kill()
			return fmt.Errorf("%s not ready after %s: %v; log: %s", p.name, StartTimeout, probeErr, p.logTail())
		}
		time.Sleep(pollInterval)
	}
}

// logTail returns the end of the process log, for error messages.
func (p *proc) logTail() string {
	b, _ := os.ReadFile(p.logPath)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// kill stops the process, if running, and waits for it to exit.
func (p *proc) kill() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}

// running reports whether the process is alive.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// addr returns the process's loopback address.
func (p *proc) addr() string { return "127.0.0.1:" + strconv.Itoa(p.port) }

// waitFor polls cond until it returns nil or timeout passes, then fails t
// with the last error.
func waitFor(t testing.TB, what string, timeout time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("testservers: %s not reached after %s: %v", what, timeout, err)
		}
		time.Sleep(pollInterval)
	}
}
