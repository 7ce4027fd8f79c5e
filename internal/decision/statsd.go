package decision

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// StatsdOptions configure a StatsdSink.
type StatsdOptions struct {
	// Addr is the statsd server's host:port.
	Addr string
	// Protocol is "udp" (when empty) or "tcp", as gostats' STATSD_PROTOCOL.
	// Over TCP, a server that is down is dialled again at the next send;
	// what it missed is lost, as a datagram would be.
	Protocol string
	// Interval is how often counters are sent; zero means 10 s
	// (envoyproxy/ratelimit's STATS_FLUSH_INTERVAL).
	Interval time.Duration
	// Dogstatsd appends Tags to every line in DogStatsD's form
	// (name:1|c|#k:v): envoyproxy/ratelimit's USE_DOG_STATSD with
	// EXTRA_TAGS.
	Dogstatsd bool
	Tags      map[string]string
	// Mogrifiers rename statistics for DogStatsD and tag them:
	// envoyproxy/ratelimit's USE_DOG_STATSD_MOGRIFIERS. Each statistic
	// takes the first one whose Pattern matches its name; the rest are
	// sent as named. They need Dogstatsd.
	Mogrifiers []Mogrifier
}

// A Mogrifier rewrites the name of each statistic that Pattern matches
// and tags it, as envoyproxy/ratelimit's DOG_STATSD_MOGRIFIER_<NAME>_PATTERN,
// _NAME and _TAGS do. In Name and in the values of Tags, $N stands for the
// match's Nth group ($0 the whole match, an unmatched group the empty
// string); a $N past the last group stays as written. The tags follow
// StatsdOptions.Tags, in key order.
type Mogrifier struct {
	// Pattern is searched for anywhere in the name; anchor it with ^ and $
	// to match the whole name.
	Pattern *regexp.Regexp
	Name    string
	Tags    map[string]string
}

// mogrify returns name rewritten by the first of ms that matches, and its
// tags as DogStatsD's k:v items; name itself and no tags when none does.
func mogrify(ms []Mogrifier, name string) (string, []string) {
	for _, m := range ms {
		match := m.Pattern.FindStringSubmatch(name)
		if match == nil {
			continue
		}
		keys := make([]string, 0, len(m.Tags))
		for k := range m.Tags {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tags := make([]string, len(keys))
		for i, k := range keys {
			tags[i] = k + ":" + expandGroups(m.Tags[k], match)
		}
		return expandGroups(m.Name, match), tags
	}
	return name, nil
}

// expandGroups replaces each $N in tmpl (N all the digits that follow the
// $) with match[N], leaving it as written when there is no group N. Unlike
// regexp.Expand, "$1a" is group 1 followed by "a", and ${1} is literal.
func expandGroups(tmpl string, match []string) string {
	if !strings.Contains(tmpl, "$") {
		return tmpl
	}
	var b strings.Builder
	for i := 0; i < len(tmpl); {
		j := i + 1
		for tmpl[i] == '$' && j < len(tmpl) && tmpl[j] >= '0' && tmpl[j] <= '9' {
			j++
		}
		if j == i+1 {
			b.WriteByte(tmpl[i])
			i++
			continue
		}
		if n, err := strconv.Atoi(tmpl[i+1 : j]); err == nil && n < len(match) {
			b.WriteString(match[n])
		} else {
			b.WriteString(tmpl[i:j])
		}
		i = j
	}
	return b.String()
}

// A StatsdSink sends a Service's envoyproxy/ratelimit statistics (see
// Service.PeerStats) to statsd over UDP or TCP: every Interval, each counter that
// grew is sent as "name:delta|c"; every second (or Interval, if shorter),
// each gRPC ShouldRateLimit call since the last send is one timer line,
// "ratelimit_server.ShouldRateLimit.response_time:ms|ms", its duration in
// whole milliseconds. Lines are joined by newlines in datagrams of at most
// 1432 bytes, as gostats sends them. It runs one goroutine, stopped by
// Close.
type StatsdSink struct {
	svc        *Service
	addr       string
	tcp        bool
	conn       net.Conn // nil over TCP until dialled, and after a failed write
	extraTags  []string // EXTRA_TAGS as k:v, sorted
	mogrifiers []Mogrifier
	every      time.Duration

	mu        sync.Mutex // serializes flushes
	sent      map[string]uint64
	sentTimes map[string]map[uint64]uint64 // timer values sent, by timer and ms
	dog       bool
	names     map[string]sentName // by statistic name

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
	if len(opts.Mogrifiers) > 0 && !opts.Dogstatsd {
		return nil, errors.New("decision: statsd mogrifiers need DogStatsD")
	}
	for i, m := range opts.Mogrifiers {
		if m.Pattern == nil {
			return nil, fmt.Errorf("decision: statsd mogrifier %d has no pattern", i)
		}
	}
	var conn net.Conn
	tcp := false
	switch opts.Protocol {
	case "", "udp":
		c, err := net.Dial("udp", opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("decision: statsd %s: %w", opts.Addr, err)
		}
		conn = c
	case "tcp":
		// Dialled at the first send: a statsd server that starts after
		// the service is no reason not to start.
		if _, _, err := net.SplitHostPort(opts.Addr); err != nil {
			return nil, fmt.Errorf("decision: statsd %s: %w", opts.Addr, err)
		}
		tcp = true
	default:
		return nil, fmt.Errorf("decision: statsd protocol %q: want udp or tcp", opts.Protocol)
	}
	k := &StatsdSink{svc: s, addr: opts.Addr, tcp: tcp, conn: conn, every: opts.Interval, sent: map[string]uint64{}, sentTimes: map[string]map[uint64]uint64{}, names: map[string]sentName{}, dog: opts.Dogstatsd, stop: make(chan struct{}), done: make(chan struct{})}
	if k.every <= 0 {
		k.every = 10 * time.Second
	}
	if opts.Dogstatsd && len(opts.Tags) > 0 {
		names := make([]string, 0, len(opts.Tags))
		for n := range opts.Tags {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			k.extraTags = append(k.extraTags, n+":"+opts.Tags[n])
		}
	}
	k.mogrifiers = opts.Mogrifiers
	go k.run()
	return k, nil
}

// A sentName is how a statistic is written: its name as sent and the
// DogStatsD tags that follow its type ("|#k:v,..." or "").
type sentName struct{ name, tags string }

// sendAs returns how the statistic name is written, mogrified and tagged.
// Calls hold k.mu.
func (k *StatsdSink) sendAs(name string) sentName {
	if sn, ok := k.names[name]; ok {
		return sn
	}
	out, tags := mogrify(k.mogrifiers, name)
	sn := sentName{name: out}
	if all := append(slices.Clip(k.extraTags), tags...); len(all) > 0 {
		sn.tags = "|#" + strings.Join(all, ",")
	}
	k.names[name] = sn
	return sn
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
	down := false // a TCP server that failed this flush is not tried again in it
	send := func() {
		if len(buf) == 0 || down {
			buf = buf[:0]
			return
		}
		if k.tcp {
			buf = append(buf, '\n')
		}
		if err := k.write(buf); err != nil {
			errs = append(errs, err)
			down = k.tcp
		}
		buf = buf[:0]
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
	for _, tm := range k.svc.peer.timers() {
		sent := k.sentTimes[tm.name]
		if sent == nil {
			sent = map[uint64]uint64{}
			k.sentTimes[tm.name] = sent
		}
		sn := k.sendAs(tm.name)
		tm.c.each(func(ms, n uint64) {
			d := n - sent[ms]
			if d == 0 {
				return
			}
			sent[ms] = n
			// gostats writes a whole number of milliseconds as an integer;
			// DogStatsD's client writes six decimals.
			v := strconv.FormatUint(ms, 10)
			if k.dog {
				v += ".000000"
			}
			line := sn.name + ":" + v + "|ms" + sn.tags
			for range d {
				addLine(line)
			}
		})
	}
	if counters {
		for _, st := range k.svc.PeerStats() {
			d := st.Value - k.sent[st.Name]
			if d == 0 {
				continue
			}
			k.sent[st.Name] = st.Value
			sn := k.sendAs(st.Name)
			addLine(sn.name + ":" + strconv.FormatUint(d, 10) + "|c" + sn.tags)
		}
	}
	send()
	return errors.Join(errs...)
}

// statsdDialTimeout bounds a TCP dial to the statsd server.
const statsdDialTimeout = time.Second

// write sends b, dialling the TCP server first when there is no
// connection; a TCP connection that fails a write is closed, to be
// dialled again at the next send. Calls hold k.mu.
func (k *StatsdSink) write(b []byte) error {
	if k.conn == nil {
		c, err := net.DialTimeout("tcp", k.addr, statsdDialTimeout)
		if err != nil {
			return fmt.Errorf("decision: statsd %s: %w", k.addr, err)
		}
		k.conn = c
	}
	if k.tcp {
		_ = k.conn.SetWriteDeadline(time.Now().Add(statsdDialTimeout))
	}
	_, err := k.conn.Write(b)
	if err != nil && k.tcp {
		_ = k.conn.Close()
		k.conn = nil
	}
	return err
}

// Close stops the goroutine, sends what is left and closes the socket.
func (k *StatsdSink) Close() error {
	var err error
	k.closeOnce.Do(func() {
		close(k.stop)
		<-k.done
		err = k.Flush()
		k.mu.Lock()
		if k.conn != nil {
			err = errors.Join(err, k.conn.Close())
		}
		k.mu.Unlock()
	})
	return err
}
