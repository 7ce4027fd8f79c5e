package memorystore

import (
	"encoding/binary"
	"math/bits"
	"unsafe"
)

// A counter's fingerprint is two polynomial hashes modulo the prime
// p = 2^61-1 of the key and the limit's CounterID, at two secret points
// k1 and k2 drawn uniformly from [0, 2^60) by New, computed in one pass
// over the key.
//
// The key, of length L, is read in m = ceil(L/7) chunks of 7 bytes,
// little-endian, the last padded with zeros. With a CounterID id (below
// 2^43: windows are at most a hundred years of milliseconds) the message
// is (c1, ..., cm, e) where e = id + L·2^44, and a key of 2^16-1 bytes or
// more has e = id + (2^16-1)·2^44 and L itself as a leading element. Every
// element is below 2^60 < p, and the message gives back the key and id:
// e gives id and the chunk count (or says that L leads). Its polynomial,
// evaluated by Horner's rule at k, is
//
//	F(k) = c1·k^m + ... + cm·k + e  (mod p)
//
// Two different messages give different polynomials (a longer one leads
// with a non-zero coefficient), so F_x - F_y is a non-zero polynomial of
// degree d at most m (m+1 for a long key) and has at most d roots: for two
// different (key, id) pairs chosen without knowledge of the points, each
// half collides with probability at most d/2^60, and both with at most
// (d/2^60)^2, d from the longer key: below 2^-116 for keys of up to 21
// bytes, 2^-105 for keys of up to 1 KiB. The values are kept below 2^63, not fully reduced: equal
// values are equal modulo p, so the bound holds for the values compared.
//
// keyHash computes F(k) - id for both points; fingerprintOf adds id. The
// first half is F(k1)+1, never zero (the empty slot and the tombstone have
// a zero first half); the second is F(k2) through mix, a bijection, so
// that the low bits which index a shard's table are well spread. The
// shard is chosen by the low bits of F(k1) - id, the same for every
// counter of a key.

const (
	// prime is the Mersenne prime 2^61-1.
	prime = 1<<61 - 1
	// maxPoint bounds the points k1 and k2.
	maxPoint = 1 << 60
	// longKey is the length from which a key's length leads its message.
	longKey = 1<<16 - 1
)

// mulmod returns a value below 2^62+2^61 congruent to s·k modulo prime,
// for s < 2^63 and k < 2^60.
func mulmod(s, k uint64) uint64 {
	hi, lo := bits.Mul64(s, k)         // s·k < 2^123
	return lo&prime + (lo>>61 | hi<<3) // 2^61 = 1 (mod prime)
}

// keyHash returns F(k1) - id and F(k2) - id for key; see above.
func (s *Store) keyHash(key string) (h1, h2 uint64) {
	k1, k2 := s.k1, s.k2
	b := unsafe.Slice(unsafe.StringData(key), len(key)) // read only
	l := uint64(len(b))
	if l < 8 {
		if l == 0 {
			return 0, 0
		}
		var c uint64 // the key's 1 to 7 bytes
		if l >= 4 {  // two overlapping 4-byte loads
			c = uint64(binary.LittleEndian.Uint32(b)) | uint64(binary.LittleEndian.Uint32(b[l-4:]))<<(8*(l-4))
		} else {
			c = uint64(b[0]) | uint64(b[l/2])<<(8*(l/2)) | uint64(b[l-1])<<(8*(l-1))
		}
		return mulmod(c, k1) + l<<44, mulmod(c, k2) + l<<44
	}
	if l >= longKey {
		h1, h2 = mulmod(l, k1), mulmod(l, k2)
		l = longKey
	}
	rest := b
	for ; len(rest) > 7; rest = rest[7:] { // every chunk but the last
		c := binary.LittleEndian.Uint64(rest) & (1<<56 - 1)
		h1, h2 = mulmod(h1+c, k1), mulmod(h2+c, k2)
	}
	// The last chunk, the last 1 to 7 bytes: the key's last 8 shifted down.
	last := binary.LittleEndian.Uint64(b[len(b)-8:]) >> ((64 - 8*len(rest)) & 63)
	return mulmod(h1+last, k1) + l<<44, mulmod(h2+last, k2) + l<<44
}

// fingerprintOf returns the fingerprint of the counter id of the key whose
// hashes are h1 and h2.
func fingerprintOf(h1, h2, id uint64) fingerprint {
	return fingerprint{h1 + id + 1, mix(h2 + id)}
}

// mix is a bijection of uint64 that spreads every input bit over the low
// bits (the finaliser of MurmurHash3).
func mix(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	return x
}
