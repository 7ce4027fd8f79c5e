package ratelimit

import (
	"strings"
	"sync"
	"testing"
)

func TestNewLeaseIDUnique(t *testing.T) {
	const goroutines, each = 8, 1000
	ids := make(chan string, goroutines*each)
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				ids <- NewLeaseID()
			}
		})
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %q returned twice", id)
		}
		seen[id] = true
	}
	// A random per-process prefix keeps the ids of two processes apart.
	if p := leaseIDPrefix(); len(p) != 17 || !strings.HasPrefix(NewLeaseID(), p) {
		t.Errorf("prefix %q", p)
	}
}
