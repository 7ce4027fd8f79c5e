package configsource

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// EtcdOptions configure an Etcd source. Key and one of Client or
// Endpoints are required; zero durations mean the documented defaults.
type EtcdOptions struct {
	Handlers
	// Client is used when not nil; Close leaves it open.
	Client *clientv3.Client
	// Endpoints are dialled, when Client is nil, into a client that Close
	// closes ("http://127.0.0.1:2379").
	Endpoints []string
	// DialTimeout bounds the first connection of an owned client. Zero
	// means 5 s.
	DialTimeout time.Duration
	// Key is the watched key, or with Prefix the watched prefix.
	Key string
	// Prefix watches every key that starts with Key; a Document then
	// carries all of them in Entries.
	Prefix bool
	// RequestTimeout bounds each Get. Zero means 5 s.
	RequestTimeout time.Duration
	// RetryMin and RetryMax bound the wait between attempts to re-establish
	// a lost watch; the wait doubles from RetryMin up to RetryMax. Zero
	// means 100 ms and 5 s.
	RetryMin, RetryMax time.Duration
}

// Etcd watches one etcd key, or every key under a prefix, and delivers
// the value (or the whole set of keys and values) after every change.
//
// It reads the current value with a Get, then watches from the revision
// after it, so no change is missed between the two. The client reconnects
// by itself when etcd restarts; when the watch is lost anyway (the member
// lost its leader, the revision was compacted, the stream closed), the
// source reports it to Handlers.Error, waits with backoff, reads the key
// again, delivers it if it changed, and watches from there. A snapshot
// equal to the last one delivered, or to the one in force, is not
// delivered again. A deleted single key is reported
// (wrapping ErrNotFound) and the previous configuration stays in force.
type Etcd struct {
	o      EtcdOptions
	cli    *clientv3.Client
	owned  bool
	source string

	rev    int64
	value  []byte // single key
	exists bool
	kvs    map[string][]byte // prefix
	seen   dedup

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// OpenEtcd reads the key, delivers it to opts.Apply, and watches it until
// ctx is done or Close is called. It returns an error when the first Get
// fails or Apply rejects the first document (wrapping ErrRejected). A
// missing single key is not an error: it is reported to Handlers.Error and
// delivered once it is created.
func OpenEtcd(ctx context.Context, opts EtcdOptions) (*Etcd, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Key == "" {
		return nil, errors.New("configsource: EtcdOptions.Key is required")
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 5 * time.Second
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = 5 * time.Second
	}
	if opts.RetryMin <= 0 {
		opts.RetryMin = 100 * time.Millisecond
	}
	if opts.RetryMax < opts.RetryMin {
		opts.RetryMax = max(5*time.Second, opts.RetryMin)
	}
	e := &Etcd{o: opts, cli: opts.Client, done: make(chan struct{})}
	e.source = "etcd:" + opts.Key
	if opts.Prefix {
		e.source = "etcd-prefix:" + opts.Key
	}
	if e.cli == nil {
		if len(opts.Endpoints) == 0 {
			return nil, errors.New("configsource: EtcdOptions needs a Client or Endpoints")
		}
		cli, err := clientv3.New(clientv3.Config{Endpoints: opts.Endpoints, DialTimeout: opts.DialTimeout})
		if err != nil {
			return nil, fmt.Errorf("configsource: connecting to etcd %v: %w", opts.Endpoints, err)
		}
		e.cli, e.owned = cli, true
	}
	if err := e.sync(ctx); err != nil {
		e.closeClient()
		return nil, err
	}
	if err := e.publish(); err != nil {
		e.closeClient()
		return nil, err
	}
	ctx, e.cancel = context.WithCancel(ctx)
	go e.run(ctx)
	return e, nil
}

func (e *Etcd) closeClient() {
	if e.owned {
		e.closeErr = e.cli.Close()
	}
}

// Close stops watching, waits for the goroutine to end, and closes the
// client if the source dialled it. It is safe to call more than once.
func (e *Etcd) Close() error {
	e.closeOnce.Do(func() {
		e.cancel()
		<-e.done
		e.closeClient()
	})
	return e.closeErr
}

// sync replaces the local state with a fresh Get and remembers its
// revision.
func (e *Etcd) sync(ctx context.Context) error {
	gctx, cancel := context.WithTimeout(ctx, e.o.RequestTimeout)
	defer cancel()
	var opts []clientv3.OpOption
	if e.o.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	resp, err := e.cli.Get(gctx, e.o.Key, opts...)
	if err != nil {
		return fmt.Errorf("configsource: reading etcd %s: %w", e.source, err)
	}
	e.rev = resp.Header.Revision
	if e.o.Prefix {
		e.kvs = make(map[string][]byte, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			e.kvs[string(kv.Key)] = kv.Value
		}
		return nil
	}
	e.value, e.exists = nil, len(resp.Kvs) > 0
	if e.exists {
		e.value = resp.Kvs[0].Value
	}
	return nil
}

// publish delivers the local state unless it equals the last document.
func (e *Etcd) publish() error {
	doc := Document{Source: e.source, Revision: e.rev}
	if e.o.Prefix {
		doc.Entries = make([]Entry, 0, len(e.kvs))
		for k, v := range e.kvs {
			doc.Entries = append(doc.Entries, Entry{Key: k, Value: v})
		}
		sort.Slice(doc.Entries, func(i, j int) bool { return doc.Entries[i].Key < doc.Entries[j].Key })
	} else {
		if !e.exists {
			e.o.report(fmt.Errorf("%w: %s", ErrNotFound, e.source))
			return nil
		}
		doc.Data = e.value
		if doc.Data == nil {
			doc.Data = []byte{}
		}
	}
	return e.seen.deliver(&e.o.Handlers, doc)
}

// errWatchClosed is reported when etcd ends a watch without an error.
var errWatchClosed = errors.New("watch closed")

// run is the owner goroutine: watch, and after a lost watch, back off,
// re-read and watch again.
func (e *Etcd) run(ctx context.Context) {
	defer close(e.done)
	wait := e.o.RetryMin
	for {
		err := e.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		e.o.report(fmt.Errorf("configsource: watching %s: %w", e.source, err))
		for {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			wait = min(2*wait, e.o.RetryMax)
			if err := e.sync(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				e.o.report(err)
				continue
			}
			wait = e.o.RetryMin
			e.publish() // a rejection was reported to Handlers.Rejected
			break
		}
	}
}

// watch follows changes after e.rev until the watch ends.
func (e *Etcd) watch(ctx context.Context) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	opts := []clientv3.OpOption{clientv3.WithRev(e.rev + 1)}
	if e.o.Prefix {
		opts = append(opts, clientv3.WithPrefix())
	}
	for resp := range e.cli.Watch(wctx, e.o.Key, opts...) {
		if err := resp.Err(); err != nil {
			return err
		}
		if len(resp.Events) == 0 {
			continue
		}
		for _, ev := range resp.Events {
			k := string(ev.Kv.Key)
			put := ev.Type == clientv3.EventTypePut
			switch {
			case e.o.Prefix && put:
				e.kvs[k] = ev.Kv.Value
			case e.o.Prefix:
				delete(e.kvs, k)
			case put:
				e.value, e.exists = ev.Kv.Value, true
			default:
				e.value, e.exists = nil, false
			}
		}
		e.rev = resp.Header.Revision
		e.publish() // a rejection was reported to Handlers.Rejected
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errWatchClosed
}
