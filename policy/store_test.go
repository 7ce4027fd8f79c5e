package policy

import (
	"context"
	"errors"

	"github.com/seed-008287da/sluice/ratelimit"
)

type ratelimitStore = Store

var errBroken = errors.New("broken store")

// brokenStore fails every call, like an unreachable backend.
type brokenStore struct{}

func (brokenStore) Take(context.Context, ratelimit.Request) (ratelimit.Decision, error) {
	return ratelimit.Decision{}, errBroken
}
func (brokenStore) Acquire(context.Context, ratelimit.LeaseRequest) (ratelimit.Lease, error) {
	return ratelimit.Lease{}, errBroken
}
func (brokenStore) Release(context.Context, string, string) error { return errBroken }
func (brokenStore) Close() error                                  { return nil }
