package configsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
)

// DirOptions configure a Dir source.
type DirOptions struct {
	Handlers
	// Debounce is the quiet period after a change, as in FileOptions;
	// zero means DefaultDebounce.
	Debounce time.Duration
	// Root, when set, is a directory above the watched one that is
	// replaced as a whole by a symlink swap (envoyproxy/ratelimit's
	// RUNTIME_ROOT with RUNTIME_WATCH_ROOT): its parent is watched too.
	Root string
	// IgnoreDotFiles leaves out files and directories whose names start
	// with "." (envoyproxy/ratelimit's RUNTIME_IGNOREDOTFILES). Names
	// starting with ".." (Kubernetes' own "..data" and timestamped
	// directories) are always left out.
	IgnoreDotFiles bool
	// StartRejected keeps OpenDir going when Apply rejects the first
	// document, as in FileOptions.
	StartRejected bool
}

// Dir watches a directory of configuration files and delivers all of them
// as one Document whenever any changes: Entries holds each regular file's
// path relative to the directory (subdirectories included, symlinks to
// files followed) and its content, sorted by path. It follows in-place
// edits, added and removed files, a Kubernetes ConfigMap's "..data"
// symlink swap inside the directory, and, with DirOptions.Root, a swap of
// the root directory itself. A set of files equal to the last one
// delivered is not delivered again.
type Dir struct {
	path     string
	root     string
	debounce time.Duration
	ignore   bool
	h        Handlers

	w       *fsnotify.Watcher
	watched []string // directories watched for content (dir and subdirectories)

	seen dedup
	rev  int64

	cancel    context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// OpenDir reads every file under dir, delivers them to opts.Apply, and
// watches them until ctx is done or Close is called. It fails when dir
// cannot be read or watched, or when Apply rejects the first document
// (wrapping ErrRejected) unless opts.StartRejected is set.
func OpenDir(ctx context.Context, dir string, opts DirOptions) (*Dir, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("configsource: resolving %s: %w", dir, err)
	}
	d := &Dir{path: abs, debounce: opts.Debounce, ignore: opts.IgnoreDotFiles, h: opts.Handlers, done: make(chan struct{})}
	if d.debounce <= 0 {
		d.debounce = DefaultDebounce
	}
	if opts.Root != "" {
		if d.root, err = filepath.Abs(opts.Root); err != nil {
			return nil, fmt.Errorf("configsource: resolving %s: %w", opts.Root, err)
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("configsource: watching %s: %w", d.path, err)
	}
	d.w = w
	if d.root != "" {
		if err := w.Add(filepath.Dir(d.root)); err != nil {
			w.Close()
			return nil, fmt.Errorf("configsource: watching %s: %w", filepath.Dir(d.root), err)
		}
	}
	// Watch before the first read, so a change made between the read and
	// the goroutine's start is still seen.
	if err := d.rewatch(); err != nil {
		w.Close()
		return nil, err
	}
	entries, err := d.read()
	if err != nil {
		w.Close()
		return nil, err
	}
	if err := d.accept(entries); err != nil && !(opts.StartRejected && errors.Is(err, ErrRejected)) {
		w.Close()
		return nil, err
	}
	ctx, d.cancel = context.WithCancel(ctx)
	go d.run(ctx)
	return d, nil
}

// Path returns the absolute path of the watched directory.
func (d *Dir) Path() string { return d.path }

// Close stops watching and waits for the goroutine to end. It is safe to
// call more than once.
func (d *Dir) Close() error {
	d.closeOnce.Do(func() {
		if d.cancel != nil {
			d.cancel()
			<-d.done
		}
		d.closeErr = d.w.Close()
	})
	return d.closeErr
}

var _ Source = (*Dir)(nil)

func (d *Dir) run(ctx context.Context) {
	defer close(d.done)
	timer := time.NewTimer(d.debounce)
	timer.Stop()
	defer timer.Stop()
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-d.w.Events:
			if !ok {
				return
			}
			if d.root != "" && filepath.Dir(ev.Name) == filepath.Dir(d.root) && ev.Name != d.root {
				continue // another entry beside the root
			}
			timer.Reset(d.debounce)
			fire = timer.C
		case err, ok := <-d.w.Errors:
			if !ok {
				return
			}
			d.h.report(fmt.Errorf("configsource: watching %s: %w", d.path, err))
		case <-fire:
			fire = nil
			if err := d.rewatch(); err != nil {
				d.h.report(err)
			}
			entries, err := d.read()
			if err != nil {
				d.h.report(err)
				continue
			}
			d.accept(entries) // a rejection was reported to Handlers.Rejected
		}
	}
}

// skip reports whether a file or directory name is left out.
func (d *Dir) skip(name string) bool {
	return strings.HasPrefix(name, "..") || (d.ignore && strings.HasPrefix(name, "."))
}

// dirs lists the directory and its subdirectories, as watched.
func (d *Dir) dirs() ([]string, error) {
	var out []string
	err := filepath.WalkDir(d.path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if p != d.path && d.skip(e.Name()) {
				return filepath.SkipDir
			}
			out = append(out, p)
		}
		return nil
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, d.path)
	case err != nil:
		return nil, fmt.Errorf("configsource: reading %s: %w", d.path, err)
	}
	return out, nil
}

// rewatch watches the directory and its subdirectories afresh: after a
// swap of the root the same paths are other directories.
func (d *Dir) rewatch() error {
	for _, p := range d.watched {
		d.w.Remove(p) // it may be gone already
	}
	d.watched = nil
	dirs, err := d.dirs()
	if err != nil {
		return err
	}
	for _, p := range dirs {
		if err := d.w.Add(p); err != nil {
			return fmt.Errorf("configsource: watching %s: %w", p, err)
		}
		d.watched = append(d.watched, p)
	}
	return nil
}

// ReadDir reads dir as Dir delivers it: every regular file below it,
// relative path and content, sorted by path, leaving out names starting
// with ".." and, with ignoreDotFiles, those starting with ".".
func ReadDir(dir string, ignoreDotFiles bool) ([]Entry, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("configsource: resolving %s: %w", dir, err)
	}
	d := &Dir{path: abs, ignore: ignoreDotFiles}
	return d.read()
}

func (d *Dir) read() ([]Entry, error) {
	entries := []Entry{}
	err := filepath.WalkDir(d.path, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == d.path {
			return nil
		}
		if d.skip(e.Name()) {
			if e.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if e.IsDir() {
			return nil
		}
		fi, err := os.Stat(p) // follows a symlink
		if err != nil || !fi.Mode().IsRegular() {
			return nil // a dangling link or a link to a directory
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.path, p)
		entries = append(entries, Entry{Key: filepath.ToSlash(rel), Value: data})
		return nil
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%w: %s", ErrNotFound, d.path)
	case err != nil:
		return nil, fmt.Errorf("configsource: reading %s: %w", d.path, err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Key < entries[j].Key })
	return entries, nil
}

func (d *Dir) accept(entries []Entry) error {
	doc := Document{Source: "dir:" + d.path, Entries: entries, Revision: d.rev + 1}
	if (d.seen.last != nil && d.seen.last.same(doc)) || (d.seen.applied != nil && d.seen.applied.same(doc)) {
		return nil
	}
	d.rev++
	return d.seen.deliver(&d.h, doc)
}
