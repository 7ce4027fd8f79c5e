package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// An RLSLoad is one closed-loop run of envoy.service.ratelimit.v3
// ShouldRateLimit calls against a rate limit service: each caller sends
// its next request when the previous one is answered. Every request's
// descriptor values are drawn uniformly at random from Users distinct
// values, and the limits are meant never to be reached: an answer other
// than OK, with one status per descriptor, is counted as bad.
//
// A zero field means its default.
type RLSLoad struct {
	Addr        string // the server's gRPC address, host:port
	Domain      string // the requests' domain; default "bench"
	Callers     int    // closed-loop callers; default 1
	Conns       int    // gRPC connections the callers share, caller i on connection i mod Conns; default 4
	Users       int    // distinct descriptor values; default 10 000
	Descriptors int    // descriptors per request: 1 ([user]) or 2 ([user], [client]); default 1

	// Requests > 0 makes exactly that many calls, all measured. Otherwise
	// the callers run for Warmup, unmeasured, then for Duration (default
	// 5 s), measured.
	Requests int
	Warmup   time.Duration
	Duration time.Duration

	ServerPID int           // > 0: the CPU time this process spends while measured (/proc/PID/stat)
	RedisPID  int           // > 0: the same for a redis-server
	Redis     *redis.Client // non-nil: the commands that Redis runs while measured (INFO)
	Timeout   time.Duration // of one call; default 10 s
}

// RLSResult is what an RLSLoad measured. The CPU times and RedisCalls are
// -1 when not asked for.
type RLSResult struct {
	Decisions  int64         // calls answered OK while measured
	Elapsed    time.Duration // the measured time
	P50, P99   time.Duration // latency of one measured call
	Errors     int64         // calls that failed (any phase)
	Bad        int64         // calls answered, but not OK with one status per descriptor (any phase)
	FirstError string        // the first failure or bad answer, for the report
	Calls      int64         // every call made, warm-up included
	Distinct   int           // distinct users drawn
	Coverage   error         // non-nil when far fewer distinct users were drawn than Calls uniform draws give

	ServerCPU, RedisCPU, ClientCPU time.Duration // process CPU time (user + system) while measured
	RedisCalls                     int64         // commands Redis ran while measured
}

// OK reports whether every call was answered OK and the draws covered the
// users as they should.
func (r RLSResult) OK() bool { return r.Errors == 0 && r.Bad == 0 && r.Coverage == nil }

// PerDecision returns d per measured decision, in microseconds; -1 when d
// is negative (not measured) or nothing was measured.
func (r RLSResult) PerDecision(d time.Duration) float64 {
	if d < 0 || r.Decisions == 0 {
		return -1
	}
	return float64(d) / 1e3 / float64(r.Decisions)
}

// BenchLine formats r as a Go benchmark result line named name, so that
// benchtable and benchstat read it: decisions/s, p50-us, p99-us, errors
// (failed and bad calls), server-us/op, redis-us/op and client-us/op (CPU
// per decision), redis-cmds/op and users.
func (r RLSResult) BenchLine(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Benchmark%s\t%d", name, r.Decisions)
	add := func(v float64, unit string) { fmt.Fprintf(&b, "\t%s %s", strconv.FormatFloat(v, 'f', -1, 64), unit) }
	round := func(v float64, digits int) float64 {
		f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', digits, 64), 64)
		return f
	}
	rate := 0.0
	if r.Elapsed > 0 {
		rate = float64(r.Decisions) / r.Elapsed.Seconds()
	}
	add(round(rate, 0), "decisions/s")
	add(round(float64(r.P50)/1e3, 1), "p50-us")
	add(round(float64(r.P99)/1e3, 1), "p99-us")
	add(float64(r.Errors+r.Bad), "errors")
	add(round(r.PerDecision(r.ServerCPU), 1), "server-us/op")
	if r.RedisCPU >= 0 {
		add(round(r.PerDecision(r.RedisCPU), 1), "redis-us/op")
	}
	add(round(r.PerDecision(r.ClientCPU), 1), "client-us/op")
	if r.RedisCalls >= 0 && r.Decisions > 0 {
		add(round(float64(r.RedisCalls)/float64(r.Decisions), 2), "redis-cmds/op")
	}
	add(float64(r.Distinct), "users")
	return b.String()
}

func (l RLSLoad) withDefaults() RLSLoad {
	if l.Domain == "" {
		l.Domain = "bench"
	}
	if l.Callers <= 0 {
		l.Callers = 1
	}
	if l.Conns <= 0 {
		l.Conns = 4
	}
	if l.Users <= 0 {
		l.Users = 10_000
	}
	if l.Descriptors <= 0 {
		l.Descriptors = 1
	}
	if l.Duration <= 0 {
		l.Duration = 5 * time.Second
	}
	if l.Timeout <= 0 {
		l.Timeout = 10 * time.Second
	}
	return l
}

// rlsRequests returns one request per user: [user=U] or [user=U], [client=U].
func rlsRequests(domain string, ks *KeySet, descriptors int) ([]*rlspb.RateLimitRequest, error) {
	if descriptors != 1 && descriptors != 2 {
		return nil, fmt.Errorf("bench: descriptors per request must be 1 or 2, got %d", descriptors)
	}
	reqs := make([]*rlspb.RateLimitRequest, ks.Len())
	for i := range reqs {
		v := ks.Key(i)
		d := []*rlcommon.RateLimitDescriptor{{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: v}}}}
		if descriptors == 2 {
			d = append(d, &rlcommon.RateLimitDescriptor{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "client", Value: v}}})
		}
		reqs[i] = &rlspb.RateLimitRequest{Domain: domain, Descriptors: d, HitsAddend: 1}
	}
	return reqs, nil
}

// Run runs the load and returns what it measured. An error means the run
// could not be made (no connection, bad options, a counter that could not
// be read); failed calls are counted in the result.
func (l RLSLoad) Run(ctx context.Context) (RLSResult, error) {
	l = l.withDefaults()
	ks, err := NewKeySet(l.Users)
	if err != nil {
		return RLSResult{}, err
	}
	reqs, err := rlsRequests(l.Domain, ks, l.Descriptors)
	if err != nil {
		return RLSResult{}, err
	}
	clients := make([]rlspb.RateLimitServiceClient, l.Conns)
	for i := range clients {
		conn, err := grpc.NewClient(l.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return RLSResult{}, fmt.Errorf("bench: connecting to %s: %w", l.Addr, err)
		}
		defer conn.Close()
		conn.Connect()
		clients[i] = rlspb.NewRateLimitServiceClient(conn)
	}

	type callerStats struct {
		lat              []time.Duration
		calls, errs, bad int64
		firstErr         string
		cursor           *Cursor
	}
	const (
		warmup = iota
		measuring
		stopped
	)
	var phase atomic.Int32
	var left atomic.Int64
	fixed := l.Requests > 0
	if fixed {
		left.Store(int64(l.Requests))
		phase.Store(measuring)
	}
	stats := make([]*callerStats, l.Callers)
	var wg sync.WaitGroup
	snap := func() (procCPU, error) { return readCPU(ctx, l) }

	var before procCPU
	var start time.Time
	if fixed {
		if before, err = snap(); err != nil {
			return RLSResult{}, err
		}
		start = time.Now()
	}
	for i := range stats {
		st := &callerStats{cursor: ks.Cursor()}
		if fixed {
			st.lat = make([]time.Duration, 0, l.Requests/l.Callers+1)
		}
		stats[i] = st
		client := clients[i%len(clients)]
		wg.Go(func() {
			for {
				if fixed {
					if left.Add(-1) < 0 {
						return
					}
				} else if phase.Load() == stopped {
					return
				}
				req := reqs[st.cursor.NextIndex()]
				cctx, cancel := context.WithTimeout(ctx, l.Timeout)
				t0 := time.Now()
				resp, err := client.ShouldRateLimit(cctx, req)
				d := time.Since(t0)
				cancel()
				st.calls++
				switch {
				case err != nil:
					st.errs++
					if st.firstErr == "" {
						st.firstErr = err.Error()
					}
				case resp.GetOverallCode() != rlspb.RateLimitResponse_OK || len(resp.GetStatuses()) != len(req.Descriptors):
					st.bad++
					if st.firstErr == "" {
						st.firstErr = fmt.Sprintf("answer %v with %d statuses for %d descriptors", resp.GetOverallCode(), len(resp.GetStatuses()), len(req.Descriptors))
					}
				default:
					if phase.Load() == measuring {
						st.lat = append(st.lat, d)
					}
				}
				if ctx.Err() != nil {
					return
				}
			}
		})
	}
	var after procCPU
	var elapsed time.Duration
	if fixed {
		wg.Wait()
		elapsed = time.Since(start)
		after, err = snap()
	} else {
		wait := func(d time.Duration) {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ctx.Done():
			}
		}
		wait(l.Warmup)
		before, err = snap()
		start = time.Now()
		phase.Store(measuring)
		if err == nil {
			wait(l.Duration)
		}
		phase.Store(stopped)
		elapsed = time.Since(start)
		if err == nil {
			after, err = snap()
		}
		wg.Wait()
	}
	if err != nil {
		return RLSResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return RLSResult{}, err
	}

	r := RLSResult{Elapsed: elapsed}
	var lat [][]time.Duration
	for _, st := range stats {
		st.cursor.Done()
		lat = append(lat, st.lat)
		r.Calls += st.calls
		r.Errors += st.errs
		r.Bad += st.bad
		if r.FirstError == "" {
			r.FirstError = st.firstErr
		}
	}
	all := slices.Concat(lat...)
	slices.Sort(all)
	r.Decisions = int64(len(all))
	if len(all) > 0 {
		r.P50, r.P99 = all[len(all)/2], all[len(all)*99/100]
	}
	r.Distinct = ks.Distinct()
	r.Coverage = ks.CheckCoverage(int(r.Calls))
	r.ServerCPU, r.RedisCPU, r.ClientCPU = after.server-before.server, after.redis-before.redis, after.client-before.client
	r.RedisCalls = after.redisCalls - before.redisCalls
	if l.Redis != nil {
		r.RedisCalls-- // the first INFO is counted in the second
	}
	return r, nil
}

// procCPU is a snapshot of the counters an RLSLoad reads; -1 for those not asked for.
type procCPU struct {
	server, redis, client time.Duration
	redisCalls            int64
}

func readCPU(ctx context.Context, l RLSLoad) (procCPU, error) {
	c := procCPU{server: -1, redis: -1, redisCalls: -1}
	var err error
	if l.Redis != nil {
		rc, err := ReadRedisCounters(ctx, l.Redis)
		if err != nil {
			return c, err
		}
		c.redisCalls = rc.Calls
	}
	if l.ServerPID > 0 {
		if c.server, err = ProcessCPU(l.ServerPID); err != nil {
			return c, err
		}
	}
	if l.RedisPID > 0 {
		if c.redis, err = ProcessCPU(l.RedisPID); err != nil {
			return c, err
		}
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, fmt.Errorf("bench: getrusage: %w", err)
	}
	c.client = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	return c, nil
}

// clockTick is Linux's USER_HZ, the unit of /proc/PID/stat's times: 100 on
// every architecture Go supports.
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the user plus system CPU time that process pid (all
// its threads) has used, from /proc/PID/stat, in steps of 10 ms.
func ProcessCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, fmt.Errorf("bench: reading CPU time: %w", err)
	}
	// pid (comm) state ppid ...: comm may hold spaces, so count fields
	// from the last ')'. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if i < 0 || len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("bench: /proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ut+st) * clockTick, nil
}

// WaitRLS calls ShouldRateLimit on addr (one descriptor, user=ready) until
// the answer is OK, and returns nil then; or the last failure when ctx
// ends first. A service that has not loaded its configuration yet answers
// with an error, so an OK means it decides.
func WaitRLS(ctx context.Context, addr, domain string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("bench: connecting to %s: %w", addr, err)
	}
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	req := &rlspb.RateLimitRequest{Domain: domain, Descriptors: []*rlcommon.RateLimitDescriptor{
		{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "user", Value: "ready"}}},
	}}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := client.ShouldRateLimit(cctx, req)
		cancel()
		if err == nil && resp.GetOverallCode() == rlspb.RateLimitResponse_OK {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("answer %v", resp.GetOverallCode())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bench: %s did not answer OK: %w", addr, err)
		case <-tick.C:
		}
	}
}

// ConstantRLS is a RateLimitService that does no work: it answers every
// request OK, with one constant status per descriptor (a limit of 1e9 per
// hour, its remaining count and time to reset), so that its answers are
// the size of a rate limiter's. It is the floor a decision service's gRPC
// layer is measured against. It is safe for concurrent use.
type ConstantRLS struct {
	rlspb.UnimplementedRateLimitServiceServer
	answers []*rlspb.RateLimitResponse // by number of descriptors, up to 8
}

// NewConstantRLS returns a ConstantRLS.
func NewConstantRLS() *ConstantRLS {
	c := &ConstantRLS{}
	for n := range 9 {
		c.answers = append(c.answers, constantAnswer(n))
	}
	return c
}

func constantAnswer(n int) *rlspb.RateLimitResponse {
	resp := &rlspb.RateLimitResponse{OverallCode: rlspb.RateLimitResponse_OK}
	for range n {
		resp.Statuses = append(resp.Statuses, &rlspb.RateLimitResponse_DescriptorStatus{
			Code:               rlspb.RateLimitResponse_OK,
			CurrentLimit:       &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: 1_000_000_000, Unit: rlspb.RateLimitResponse_RateLimit_HOUR},
			LimitRemaining:     999_999_999,
			DurationUntilReset: durationpb.New(30 * time.Minute),
		})
	}
	return resp
}

// ShouldRateLimit answers OK.
func (c *ConstantRLS) ShouldRateLimit(_ context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if n := len(req.GetDescriptors()); n < len(c.answers) {
		return c.answers[n], nil
	}
	return constantAnswer(len(req.GetDescriptors())), nil
}
