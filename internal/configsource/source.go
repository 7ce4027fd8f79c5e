// Package configsource delivers whole configuration documents to a
// consumer whenever they change: from a watched file (File) or from etcd
// (Etcd).
//
// A source never swaps a configuration itself. It hands each new document
// to Handlers.Apply, which parses and validates the whole document and
// swaps it in only when it is valid. A document Apply rejects is reported
// to Handlers.Rejected (for logs and metrics) and the previous
// configuration stays in force; the source keeps watching, and the next
// change is delivered as usual.
//
// File and Etcd each run one goroutine that delivers documents one at a
// time; it stops when the context given to Open is done or when Close is
// called, and Close waits for it.
package configsource

import (
	"bytes"
	"errors"
	"fmt"
)

// Sentinel errors.
var (
	// ErrClosed is returned by a source used after Close.
	ErrClosed = errors.New("configsource: closed")
	// ErrRejected wraps the error of a document that Handlers.Apply
	// rejected, when the source returns it to a caller.
	ErrRejected = errors.New("configsource: document rejected")
	// ErrNotFound is reported when a watched file or etcd key does not
	// exist; the previous configuration stays in force.
	ErrNotFound = errors.New("configsource: not found")
)

// A Document is one complete configuration as a source saw it.
type Document struct {
	// Source names where the document came from: "file:/etc/sluice/kong.yml",
	// "etcd:/sluice/config", "etcd-prefix:/sluice/quotas/".
	Source string
	// Data is the document's bytes. It is nil for an etcd prefix, whose
	// keys are in Entries.
	Data []byte
	// Entries holds, for an etcd prefix, every key under the prefix and its
	// value, sorted by key. An empty prefix gives an empty, non-nil list.
	Entries []Entry
	// Revision orders the documents of one source: the etcd revision of
	// the snapshot, or a count of deliveries for other sources.
	Revision int64
}

// An Entry is one etcd key and its value.
type Entry struct {
	Key   string
	Value []byte
}

// Values returns the document as a list of documents: Data alone, or the
// values of Entries in key order.
func (d Document) Values() [][]byte {
	if d.Entries == nil {
		if d.Data == nil {
			return nil
		}
		return [][]byte{d.Data}
	}
	vs := make([][]byte, len(d.Entries))
	for i, e := range d.Entries {
		vs[i] = e.Value
	}
	return vs
}

func (d Document) same(o Document) bool {
	if (d.Entries == nil) != (o.Entries == nil) || len(d.Entries) != len(o.Entries) {
		return false
	}
	for i := range d.Entries {
		if d.Entries[i].Key != o.Entries[i].Key || !bytes.Equal(d.Entries[i].Value, o.Entries[i].Value) {
			return false
		}
	}
	return bytes.Equal(d.Data, o.Data)
}

// dedup skips documents that would change nothing: equal to the last one
// delivered (applied or rejected), or to the one in force.
type dedup struct {
	last, applied *Document
}

func (d *dedup) deliver(h *Handlers, doc Document) error {
	if (d.last != nil && d.last.same(doc)) || (d.applied != nil && d.applied.same(doc)) {
		return nil
	}
	d.last = &doc
	if err := h.deliver(doc); err != nil {
		return err
	}
	d.applied = &doc
	return nil
}

// Handlers receive a source's documents and problems. Each source calls
// them from one goroutine at a time.
type Handlers struct {
	// Apply validates doc and swaps it in. A non-nil error rejects doc:
	// the consumer keeps its previous configuration. Required.
	Apply func(doc Document) error
	// Rejected is told about every document Apply rejected. Nil ignores
	// rejections.
	Rejected func(doc Document, err error)
	// Error is told about a source's own failures (an unreadable file, a
	// lost etcd watch); the source retries by itself. Nil ignores them.
	Error func(err error)
}

// A Source is stopped by Close, which waits for its goroutine to end.
type Source interface {
	Close() error
}

var (
	_ Source = (*File)(nil)
	_ Source = (*Etcd)(nil)
)

// deliver hands doc to Apply and reports a rejection. The returned error
// wraps ErrRejected and Apply's error.
func (h *Handlers) deliver(doc Document) error {
	if err := h.Apply(doc); err != nil {
		if h.Rejected != nil {
			h.Rejected(doc, err)
		}
		return fmt.Errorf("%w: %s: %w", ErrRejected, doc.Source, err)
	}
	return nil
}

func (h *Handlers) report(err error) {
	if h.Error != nil {
		h.Error(err)
	}
}

func (h *Handlers) check() error {
	if h.Apply == nil {
		return errors.New("configsource: Handlers.Apply is required")
	}
	return nil
}
