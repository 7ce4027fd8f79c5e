package configsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DefaultDebounce is File's quiet period when FileOptions.Debounce is zero.
const DefaultDebounce = 100 * time.Millisecond

// FileOptions configure a File source.
type FileOptions struct {
	Handlers
	// Debounce is how long the directory must stay quiet after a change
	// event before the file is read: an editor's save or a ConfigMap update
	// is a burst of events, and reading in the middle of it would see a
	// half-written or missing file. Each event restarts the wait, so a
	// burst gives one read. Zero means DefaultDebounce.
	Debounce time.Duration
	// StartRejected keeps OpenFile going when Apply rejects the first
	// document: the rejection goes to Handlers.Rejected and the file is
	// watched as usual, so a later good version is applied. Without it
	// OpenFile fails with ErrRejected.
	StartRejected bool
}

// File watches one configuration file and delivers its content whenever
// it changes. It watches the file's directory, not the file, so it follows
// every way a file gets replaced: in-place writes, editors' write-then-
// rename, and symlink swaps such as Kubernetes ConfigMap volumes (the file
// is a symlink through "..data", which is swapped atomically). When the
// file is a symlink elsewhere, the target's directory is watched too.
//
// Content equal to the last document delivered, or to the one in force,
// is not delivered again, so touching the file or a symlink swap to
// identical content costs nothing.
// A file that disappears is reported to Handlers.Error (wrapping
// ErrNotFound) and the previous configuration stays in force; it is
// delivered again once it reappears.
type File struct {
	path     string
	debounce time.Duration
	h        Handlers

	w       *fsnotify.Watcher
	realDir string // extra watched directory of the symlink target, if any

	seen dedup
	rev  int64

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// OpenFile reads path, delivers it to opts.Apply, and starts watching it
// until ctx is done or Close is called. It returns an error when the file
// cannot be read or watched, or when Apply rejects it (wrapping
// ErrRejected) unless opts.StartRejected is set; nothing keeps running
// then.
func OpenFile(ctx context.Context, path string, opts FileOptions) (*File, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	f, err := newFile(path, opts)
	if err != nil {
		return nil, err
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("configsource: watching %s: %w", f.path, err)
	}
	f.w = w
	// Watch before the first read, so a change made between the read and
	// the goroutine's start is still seen.
	if err := w.Add(filepath.Dir(f.path)); err != nil {
		w.Close()
		return nil, fmt.Errorf("configsource: watching %s: %w", filepath.Dir(f.path), err)
	}
	data, err := f.read()
	if err != nil {
		w.Close()
		return nil, err
	}
	f.rewatch()
	if err := f.accept(data); err != nil && !(opts.StartRejected && errors.Is(err, ErrRejected)) {
		w.Close()
		return nil, err
	}
	ctx, f.cancel = context.WithCancel(ctx)
	go f.run(ctx, w.Events, w.Errors)
	return f, nil
}

func newFile(path string, opts FileOptions) (*File, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("configsource: resolving %s: %w", path, err)
	}
	d := opts.Debounce
	if d <= 0 {
		d = DefaultDebounce
	}
	return &File{path: abs, debounce: d, h: opts.Handlers, done: make(chan struct{})}, nil
}

// Path returns the absolute path of the watched file.
func (f *File) Path() string { return f.path }

// Close stops watching and waits for the goroutine to end. It is safe to
// call more than once.
func (f *File) Close() error {
	f.closeOnce.Do(func() {
		if f.cancel != nil {
			f.cancel()
			<-f.done
		}
		if f.w != nil {
			f.closeErr = f.w.Close()
		}
	})
	return f.closeErr
}

// run is the owner goroutine. Events and errors come in as channels so
// the debounce can be tested with synthetic events on a fake clock.
func (f *File) run(ctx context.Context, events <-chan fsnotify.Event, errs <-chan error) {
	defer close(f.done)
	timer := time.NewTimer(f.debounce)
	timer.Stop()
	defer timer.Stop()
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-events:
			if !ok {
				return
			}
			if !f.relevant(ev.Name) {
				continue
			}
			timer.Reset(f.debounce)
			fire = timer.C
		case err, ok := <-errs:
			if !ok {
				return
			}
			f.h.report(fmt.Errorf("configsource: watching %s: %w", f.path, err))
		case <-fire:
			fire = nil
			f.reload()
		}
	}
}

// relevant reports whether an event in a watched directory may have
// changed the file: the file itself, its symlink target, or a
// Kubernetes-style "..data" link or timestamped directory.
func (f *File) relevant(name string) bool {
	if name == f.path || strings.HasPrefix(filepath.Base(name), "..") {
		return true
	}
	if f.realDir != "" && filepath.Dir(name) == f.realDir {
		return true
	}
	return false
}

func (f *File) read() ([]byte, error) {
	data, err := os.ReadFile(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, f.path)
	case err != nil:
		return nil, fmt.Errorf("configsource: reading %s: %w", f.path, err)
	}
	return data, nil
}

func (f *File) reload() {
	data, err := f.read()
	if err != nil {
		f.h.report(err)
		return
	}
	f.rewatch()
	f.accept(data) // a rejection was reported to Handlers.Rejected
}

// accept delivers data unless it would change nothing.
func (f *File) accept(data []byte) error {
	doc := Document{Source: "file:" + f.path, Data: data, Revision: f.rev + 1}
	if (f.seen.last != nil && f.seen.last.same(doc)) || (f.seen.applied != nil && f.seen.applied.same(doc)) {
		return nil
	}
	f.rev++
	return f.seen.deliver(&f.h, doc)
}

// rewatch follows the file's symlink: when it points into another
// directory, that directory is watched too, so edits of the target are
// seen. A ConfigMap's timestamped directory is already covered by the
// events on "..data" in the file's own directory.
func (f *File) rewatch() {
	if f.w == nil {
		return
	}
	dir := filepath.Dir(f.path)
	target := ""
	if real, err := filepath.EvalSymlinks(f.path); err == nil {
		if rd := filepath.Dir(real); rd != dir && !strings.HasPrefix(filepath.Base(rd), "..") {
			target = rd
		}
	}
	if target == f.realDir {
		return
	}
	if f.realDir != "" {
		f.w.Remove(f.realDir) // it may be gone already
	}
	f.realDir = ""
	if target != "" {
		if err := f.w.Add(target); err != nil {
			f.h.report(fmt.Errorf("configsource: watching %s: %w", target, err))
			return
		}
		f.realDir = target
	}
}
