package configsource

import "sync"

// Push is an in-memory source: the admin API pushes a document (Kong's
// DB-less POST /config) and learns synchronously whether it was applied.
// It runs no goroutine. It is safe for concurrent use; pushes are
// delivered one at a time, in the order they take the lock.
type Push struct {
	mu     sync.Mutex
	h      Handlers
	rev    int64
	closed bool
}

// NewPush returns a Push delivering to h.
func NewPush(h Handlers) (*Push, error) {
	if err := h.check(); err != nil {
		return nil, err
	}
	return &Push{h: h}, nil
}

// NewStatic returns a Push that has delivered data once: a fixed
// configuration that the admin API may still replace. The error wraps
// ErrRejected when Apply rejected data.
func NewStatic(data []byte, h Handlers) (*Push, error) {
	p, err := NewPush(h)
	if err != nil {
		return nil, err
	}
	if err := p.Push(data); err != nil {
		return nil, err
	}
	return p, nil
}

// Push delivers data to Apply on the caller's goroutine. When Apply
// rejects it, Rejected is told, the previous configuration stays, and the
// returned error wraps ErrRejected and Apply's error (for the admin API's
// 400 response). After Close it returns ErrClosed.
func (p *Push) Push(data []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.rev++
	return p.h.deliver(Document{Source: "push", Data: data, Revision: p.rev})
}

// Close makes later pushes fail with ErrClosed. It always returns nil.
func (p *Push) Close() error {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	return nil
}
