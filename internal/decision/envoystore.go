package decision

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/redis/rueidis"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// envoyStore keeps fixed-window counters in envoyproxy/ratelimit's Redis
// layout, so that sluice and envoyproxy/ratelimit nodes on one Redis
// continue each other's counters: the key is
// <prefix><domain>_<key>_<value>_..._<window start in Unix seconds>, a
// plain integer incremented with INCRBY and expired with EXPIRE after one
// window, as envoyproxy/ratelimit writes it. As there, every call is
// counted, a denied one too, and the two commands are pipelined, not
// atomic.
type envoyStore struct {
	c rueidis.Client
}

var _ ratelimit.Store = (*envoyStore)(nil)

func openEnvoyStore(rc RedisConfig) (*envoyStore, error) {
	opt := rueidis.ClientOption{Username: rc.Username, Password: rc.Password, SelectDB: rc.Database, DisableCache: true}
	addr := func(h string, p int) string {
		if h == "" {
			h = "127.0.0.1"
		}
		if p == 0 {
			p = 6379
		}
		return net.JoinHostPort(h, strconv.Itoa(p))
	}
	switch {
	case len(rc.ClusterNodes) > 0:
		for _, a := range rc.ClusterNodes {
			opt.InitAddress = append(opt.InitAddress, addr(a.Host, a.Port))
		}
	case rc.SentinelMaster != "":
		for _, a := range rc.SentinelNodes {
			opt.InitAddress = append(opt.InitAddress, addr(a.Host, a.Port))
		}
		opt.Sentinel = rueidis.SentinelOption{MasterSet: rc.SentinelMaster, Username: rc.SentinelUsername, Password: rc.SentinelPassword}
	default:
		opt.InitAddress = []string{addr(rc.Host, rc.Port)}
		opt.ForceSingleClient = true
	}
	if rc.SSL {
		tc := rc.TLSConfig
		if tc == nil {
			tc = &tls.Config{}
		}
		tc = tc.Clone()
		tc.InsecureSkipVerify = !rc.SSLVerify
		opt.TLSConfig = tc
	}
	c, err := rueidis.NewClient(opt)
	if err != nil {
		return nil, fmt.Errorf("decision: opening the redis store (envoy key layout): %w", err)
	}
	return &envoyStore{c: c}, nil
}

// envoyKey is the key of d without its window start, in
// envoyproxy/ratelimit's layout: <prefix><domain>_<key>_<value>_...;
// a share_threshold entry counts under its pattern.
func envoyKey(prefix, domain string, d *rlpb.RateLimitDescriptor, n *node) string {
	var b strings.Builder
	b.WriteString(prefix)
	b.WriteString(domain)
	b.WriteByte('_')
	for i, e := range d.GetEntries() {
		v := e.GetValue()
		if n != nil && n.shared && i < len(n.path) && n.path[i].share {
			v = n.path[i].value
		}
		b.WriteString(e.GetKey())
		b.WriteByte('_')
		b.WriteString(v)
		b.WriteByte('_')
	}
	return b.String()
}

// errEnvoyLayout is wrapped by limits the layout cannot hold.
var errEnvoyLayout = errors.New("the envoy key layout holds one fixed-window limit of a whole unit per descriptor")

func (s *envoyStore) Take(ctx context.Context, r ratelimit.Request) (ratelimit.Decision, error) {
	if len(r.Limits) != 1 || r.Limits[0].Algorithm != ratelimit.FixedWindow || r.Limits[0].Window%time.Second != 0 {
		return ratelimit.Decision{}, fmt.Errorf("%w: %w", ratelimit.ErrInvalidLimit, errEnvoyLayout)
	}
	if r.Now.IsZero() {
		r.Now = time.Now()
	}
	if r.Cost <= 0 {
		r.Cost = 1
	}
	div := int64(r.Limits[0].Window / time.Second)
	start := r.Now.Unix() / div * div
	key := r.Key + strconv.FormatInt(start, 10)
	var before int64
	if r.Peek {
		v, err := s.c.Do(ctx, s.c.B().Get().Key(key).Build()).AsInt64()
		if err != nil && !rueidis.IsRedisNil(err) {
			return ratelimit.Decision{}, fmt.Errorf("decision: reading %s: %w", key, err)
		}
		before = v
	} else {
		res := s.c.DoMulti(ctx,
			s.c.B().Incrby().Key(key).Increment(r.Cost).Build(),
			s.c.B().Expire().Key(key).Seconds(div).Build())
		after, err := res[0].AsInt64()
		if err != nil {
			return ratelimit.Decision{}, fmt.Errorf("decision: incrementing %s: %w", key, err)
		}
		before = after - r.Cost
	}
	// The decision as envoyproxy/ratelimit makes it: the hits are in the
	// counter whether or not they fit.
	r.Penalty = true
	return storekit.Apply(&r, []storekit.Counter{{Start: start * 1000, Cur: before}}), nil
}

func (s *envoyStore) Close() error {
	s.c.Close()
	return nil
}
