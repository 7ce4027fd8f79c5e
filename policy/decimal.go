package policy

import (
	"strconv"
	"sync/atomic"
)

// Header values are mostly counts and seconds below a quarter million:
// remaining requests, seconds to reset. Their decimal forms are cached in
// chunks of 256 consecutive numbers, each built on first use and never
// changed, so a check formats and allocates nothing for them. A chunk
// takes about 6 KB; a configuration touches only the chunks its limits
// reach (all of them, 6 MB, only with limits of a quarter million or
// more).
const (
	chunkBits     = 8
	chunkLen      = 1 << chunkBits
	decimalCached = 1 << 18
)

type decimalChunk [chunkLen]string

var decimalChunks [decimalCached / chunkLen]atomic.Pointer[decimalChunk]

// decimal returns the decimal form of n, which must be in the cache's
// range (0 <= n < decimalCached).
func decimal(n int64) string {
	c := decimalChunks[n>>chunkBits].Load()
	if c == nil {
		c = newDecimalChunk(n >> chunkBits)
	}
	return c[n&(chunkLen-1)]
}

// newDecimalChunk builds chunk i and installs it, unless another goroutine
// was first.
func newDecimalChunk(i int64) *decimalChunk {
	var ends [chunkLen + 1]int
	b := make([]byte, 0, chunkLen*7)
	for j := range chunkLen {
		b = strconv.AppendInt(b, i<<chunkBits+int64(j), 10)
		ends[j+1] = len(b)
	}
	digits := string(b)
	c := new(decimalChunk)
	for j := range c {
		c[j] = digits[ends[j]:ends[j+1]]
	}
	if !decimalChunks[i].CompareAndSwap(nil, c) {
		return decimalChunks[i].Load()
	}
	return c
}
