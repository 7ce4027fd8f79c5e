package decision

import (
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StatsdOptions configure a StatsdSink.
type StatsdOptions struct {
	// Addr is the statsd server's UDP host:port.
	Addr string
	// Interval is how often counters are sent; zero means 10 s
	// (envoyproxy/ratelimit's STATS_FLUSH_INTERVAL).
	Interval time.Duration
	// Dogstatsd appends Tags to every line in DogStatsD's form
	// (name:1|c|#k:v): envoyproxy/ratelimit's USE_DOG_STATSD with
	// EXTRA_TAGS.
	Dogstatsd bool
	Tags      map[string]string
}

// A StatsdSink sends a Service's envoyproxy/ratelimit statistics (see
// Service.PeerStats) to statsd over UDP: every Interval, each counter that
// grew is sent as "name:delta|c"; every second (or Interval, if shorter),
// each gRPC ShouldRateLimit call since the last send is one timer line,
// "ratelimit_server.ShouldRateLimit.response_time:ms|ms", its duration in
// whole milliseconds. Lines are joined by newlines in datagrams of at most
// 1432 bytes, as gostats sends them. It runs one goroutine, stopped by
// Close.
type StatsdSink struct {
	svc   *Service
	conn  net.Conn
	tags  string
	every time.Duration

	mu        sync.Mutex // serializes flushes
	sent      map[string]uint64
	sentTimes map[uint64]uint64 // response times sent, by ms
	dog       bool

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// maxDatagram keeps a datagram within a 1500-byte Ethernet frame.
const maxDatagram = 1432

// StartStatsd starts sending s's statistics to statsd. s must have been
// opened with Options.PeerStats.
func (s *Service) StartStatsd(opts StatsdOptions) (*StatsdSink, error) {
	if s.peer == nil {
		return nil, errors.New("decision: statsd needs Options.PeerStats")
	}
	if len(opts.Tags) > 0 && !opts.Dogstatsd {
		return nil, errors.New("decision: statsd tags need DogStatsD")
	}
	conn, err := net.Dial("udp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("decision: statsd %s: %w", opts.Addr, err)
	}
	k := &StatsdSink{svc: s, conn: conn, every: opts.Interval, sent: map[string]uint64{}, sentTimes: map[uint64]uint64{}, dog: opts.Dogstatsd, stop: make(chan struct{}), done: make(chan struct{})}
	if k.every <= 0 {
		k.every = 10 * time.Second
	}
	if opts.Dogstatsd && len(opts.Tags) > 0 {
		names := make([]string, 0, len(opts.Tags))
		for n := range opts.Tags {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		b.WriteString("|#")
		for i, n := range names {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(n + ":" + opts.Tags[n])
		}
		k.tags = b.String()
	}
	go k.run()
	return k, nil
}

// timerEvery is how often gostats sends its buffered timer lines.
const timerEvery = time.Second

func (k *StatsdSink) run() {
	defer close(k.done)
	t := time.NewTicker(k.every)
	defer t.Stop()
	tt := time.NewTicker(min(timerEvery, k.every))
	defer tt.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
			_ = k.Flush() // a lost datagram is statsd's usual loss
		case <-tt.C:
			_ = k.flush(false)
		}
	}
}

// Flush sends every counter that grew, and every timer value recorded,
// since the last flush now.
func (k *StatsdSink) Flush() error { return k.flush(true) }

// flush sends the timer values recorded since the last flush and, with
// counters, every counter that grew.
func (k *StatsdSink) flush(counters bool) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	var buf []byte
	var errs []error
	send := func() {
		if len(buf) > 0 {
			if _, err := k.conn.Write(buf); err != nil {
				errs = append(errs, err)
			}
			buf = buf[:0]
		}
	}
	addLine := func(line string) {
		if len(buf)+1+len(line) > maxDatagram {
			send()
		}
		if len(buf) > 0 {
			buf = append(buf, '\n')
		}
		buf = append(buf, line...)
	}
	k.svc.peer.responseTime.each(func(ms, n uint64) {
		d := n - k.sentTimes[ms]
		if d == 0 {
			return
		}
		k.sentTimes[ms] = n
		// gostats writes a whole number of milliseconds as an integer;
		// DogStatsD's client writes six decimals.
		v := strconv.FormatUint(ms, 10)
		if k.dog {
			v += ".000000"
		}
		line := responseTimeName + ":" + v + "|ms" + k.tags
		for range d {
			addLine(line)
		}
	})
	if counters {
		for _, st := range k.svc.PeerStats() {
			d := st.Value - k.sent[st.Name]
			if d == 0 {
				continue
			}
			k.sent[st.Name] = st.Value
			addLine(st.Name + ":" + strconv.FormatUint(d, 10) + "|c" + k.tags)
		}
	}
	send()
	return errors.Join(errs...)
}

// Close stops the goroutine, sends what is left and closes the socket.
func (k *StatsdSink) Close() error {
	var err error
	k.closeOnce.Do(func() {
		close(k.stop)
		<-k.done
		err = errors.Join(k.Flush(), k.conn.Close())
	})
	return err
}
