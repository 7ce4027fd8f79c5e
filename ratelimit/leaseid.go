package ratelimit

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"
)

// NewLeaseID returns an id for a LeaseRequest that no other call, in this
// process or another, returns: a random prefix drawn once per process and
// a sequence number. It is safe for concurrent use.
func NewLeaseID() string {
	return leaseIDPrefix() + strconv.FormatUint(leaseIDSeq.Add(1), 10)
}

var (
	leaseIDPrefix = sync.OnceValue(func() string {
		var b [8]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+).
		return hex.EncodeToString(b[:]) + "-"
	})
	leaseIDSeq atomic.Uint64
)
