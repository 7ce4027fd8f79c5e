package memorystore

import (
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
	"github.com/seed-008287da/sluice/ratelimit/storekit"
)

// polyHash is a counter's hash of hash.go computed with big integers:
// the message (chunks, id + L·2^44), with L leading for a long key,
// evaluated by Horner's rule at k, modulo 2^61-1.
func polyHash(key string, id, k uint64) uint64 {
	p := new(big.Int).SetUint64(prime)
	bk := new(big.Int).SetUint64(k)
	var msg []uint64
	l := uint64(len(key))
	if l >= longKey {
		msg = append(msg, l)
		l = longKey
	}
	for i := 0; i < len(key); i += 7 {
		var c uint64
		for j := min(i+7, len(key)) - 1; j >= i; j-- {
			c = c<<8 | uint64(key[j])
		}
		msg = append(msg, c)
	}
	h := new(big.Int)
	for _, x := range msg {
		h.Add(h, new(big.Int).SetUint64(x))
		h.Mul(h, bk)
		h.Mod(h, p)
	}
	h.Add(h, new(big.Int).SetUint64(id+l<<44))
	return h.Mod(h, p).Uint64()
}

// keyHash computes the polynomial of hash.go, for every key length around
// the chunk and load boundaries and for extreme points.
func TestKeyHashIsThePolynomial(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	points := []uint64{0, 1, 2, maxPoint - 1, maxPoint - 2, 1 << 59}
	for range 20 {
		points = append(points, r.Uint64N(maxPoint))
	}
	var keys []string
	for n := range 70 {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		keys = append(keys, string(b), strings.Repeat("\xff", n), strings.Repeat("\x00", n))
	}
	keys = append(keys, strings.Repeat("\xff", longKey-1), strings.Repeat("\xff", longKey), strings.Repeat("\x01", longKey+10))
	ids := []uint64{2, 3, storekit.CounterID(ratelimit.Limit{Count: 1, Window: 100 * 365 * 24 * time.Hour}.TokenBucket(0))}
	if ids[2] >= 1<<43 {
		t.Fatalf("CounterID of the longest window is %d, want below 2^43 (hash.go)", ids[2])
	}
	for i, k1 := range points {
		s := &Store{k1: k1, k2: points[(i+1)%len(points)]}
		for _, key := range keys {
			h1, h2 := s.keyHash(key)
			for _, id := range ids {
				f := fingerprintOf(h1, h2, id)
				if f.a == 0 || f.a > 1<<63 || h2+id >= 1<<63 {
					t.Fatalf("key of %d bytes, id %d: fingerprint {%d, %d} out of range", len(key), id, f.a, f.b)
				}
				if got, want := (f.a-1)%prime, polyHash(key, id, s.k1); got != want {
					t.Fatalf("key of %d bytes, id %d, k=%d: %d, want %d (mod 2^61-1)", len(key), id, s.k1, got, want)
				}
				if got, want := (h2+id)%prime, polyHash(key, id, s.k2); got != want || f.b != mix(h2+id) {
					t.Fatalf("key of %d bytes, id %d, k=%d: second half %d, want %d (mod 2^61-1)", len(key), id, s.k2, got, want)
				}
			}
		}
	}
}

// mulmod is exact at the ends of its domain.
func TestMulmod(t *testing.T) {
	p := new(big.Int).SetUint64(prime)
	r := rand.New(rand.NewPCG(3, 4))
	vals := []uint64{0, 1, prime - 1, prime, prime + 1, 1<<63 - 1}
	for range 1000 {
		vals = append(vals, r.Uint64N(1<<63))
	}
	for _, s := range vals {
		for _, k := range []uint64{0, 1, maxPoint - 1, r.Uint64N(maxPoint)} {
			got := mulmod(s, k)
			want := new(big.Int).Mul(new(big.Int).SetUint64(s), new(big.Int).SetUint64(k))
			want.Mod(want, p)
			if got >= 1<<62+1<<61 || got%prime != want.Uint64() {
				t.Fatalf("mulmod(%d, %d) = %d, want %d (mod 2^61-1), below 2^62+2^61", s, k, got, want)
			}
		}
	}
}

// Keys that a careless encoding would confuse (trailing zero bytes, the
// same bytes at another length) and the windows of one key all get
// distinct fingerprints, none with a zero first half.
func TestFingerprintsDistinct(t *testing.T) {
	s := New(Options{SweepInterval: -1})
	defer s.Close()
	ids := []uint64{
		storekit.CounterID(ratelimit.PerSecond(1)),
		storekit.CounterID(ratelimit.PerMinute(1)),
		storekit.CounterID(ratelimit.PerMinute(1).TokenBucket(0)),
		storekit.CounterID(ratelimit.PerDay(1)),
	}
	var keys []string
	for n := range 30 {
		keys = append(keys, strings.Repeat("\x00", n), "a"+strings.Repeat("\x00", n), strings.Repeat("a", n))
	}
	for i := range 1 << 16 {
		keys = append(keys, "10.0."+strconv.Itoa(i>>8)+"."+strconv.Itoa(i&0xff))
	}
	seen := make(map[fingerprint]string)
	for _, key := range keys {
		h1, h2 := s.keyHash(key)
		for _, id := range ids {
			f := fingerprintOf(h1, h2, id)
			if f.a == 0 {
				t.Fatalf("fingerprint of %q, id %d, has a zero first half", key, id)
			}
			tag := strconv.Quote(key) + " id " + strconv.FormatUint(id, 10)
			if prev, dup := seen[f]; dup && prev != tag {
				t.Fatalf("fingerprints of %s and %s collide", prev, tag)
			}
			seen[f] = tag
		}
	}
}
