package configsource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func openDir(t *testing.T, dir string, r *recorder, opts DirOptions) *Dir {
	t.Helper()
	opts.Handlers = r.handlers()
	opts.Debounce = 10 * time.Millisecond
	d, err := OpenDir(context.Background(), dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// files formats a directory document as "a.yaml=v1 sub/b.yaml=v2".
func files(d Document) string {
	var parts []string
	for _, e := range d.Entries {
		parts = append(parts, e.Key+"="+string(e.Value))
	}
	return strings.Join(parts, " ")
}

func nextFiles(t *testing.T, r *recorder, want string) {
	t.Helper()
	if got := files(r.next(t)); got != want {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}

func TestDirEdits(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "a1")
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "sub", "b.yaml"), "b1")
	r := newRecorder()
	openDir(t, dir, r, DirOptions{})
	nextFiles(t, r, "a.yaml=a1 sub/b.yaml=b1")

	write(t, filepath.Join(dir, "a.yaml"), "a2")
	nextFiles(t, r, "a.yaml=a2 sub/b.yaml=b1")

	replace(t, filepath.Join(dir, "sub", "b.yaml"), "b2")
	nextFiles(t, r, "a.yaml=a2 sub/b.yaml=b2")

	write(t, filepath.Join(dir, "c.yaml"), "c1")
	nextFiles(t, r, "a.yaml=a2 c.yaml=c1 sub/b.yaml=b2")

	if err := os.Remove(filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	nextFiles(t, r, "c.yaml=c1 sub/b.yaml=b2")

	write(t, filepath.Join(dir, "c.yaml"), "bad")
	r.nextRejected(t, "")
	r.quiet(t)
}

// The Kubernetes ConfigMap layout: each file is a symlink through "..data",
// which is swapped to a new timestamped directory.
func TestDirConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name string, kv ...string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(kv); i += 2 {
			write(t, filepath.Join(dir, name, kv[i]), kv[i+1])
		}
	}
	swap := func(name string) {
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_12_01_1", "a.yaml", "a1", "b.yaml", "b1")
	swap("..2026_12_01_1")
	for _, f := range []string{"a.yaml", "b.yaml"} {
		if err := os.Symlink("..data/"+f, filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	r := newRecorder()
	openDir(t, dir, r, DirOptions{})
	nextFiles(t, r, "a.yaml=a1 b.yaml=b1")

	version("..2026_12_01_2", "a.yaml", "a2", "b.yaml", "b1")
	swap("..2026_12_01_2")
	if err := os.RemoveAll(filepath.Join(dir, "..2026_12_01_1")); err != nil {
		t.Fatal(err)
	}
	nextFiles(t, r, "a.yaml=a2 b.yaml=b1")
}

// envoyproxy/ratelimit's RUNTIME_ROOT: the root is a symlink replaced as a
// whole, and the watched directory is below it.
func TestDirRootSwap(t *testing.T) {
	base := t.TempDir()
	mk := func(name, data string) {
		p := filepath.Join(base, name, "ratelimit", "config")
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(p, "limits.yaml"), data)
	}
	link := func(name string) {
		tmp := filepath.Join(base, "current.tmp")
		if err := os.Symlink(filepath.Join(base, name), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(base, "current")); err != nil {
			t.Fatal(err)
		}
	}
	mk("v1", "v1")
	link("v1")
	root := filepath.Join(base, "current")
	r := newRecorder()
	openDir(t, filepath.Join(root, "ratelimit", "config"), r, DirOptions{Root: root})
	nextFiles(t, r, "limits.yaml=v1")

	mk("v2", "v2")
	link("v2")
	nextFiles(t, r, "limits.yaml=v2")

	// The new target's directory is the one watched now.
	write(t, filepath.Join(base, "v2", "ratelimit", "config", "limits.yaml"), "v3")
	nextFiles(t, r, "limits.yaml=v3")
}

func TestDirDotFiles(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "a1")
	write(t, filepath.Join(dir, ".hidden.yaml"), "h1")
	r := newRecorder()
	openDir(t, dir, r, DirOptions{})
	nextFiles(t, r, ".hidden.yaml=h1 a.yaml=a1")

	r = newRecorder()
	openDir(t, dir, r, DirOptions{IgnoreDotFiles: true})
	nextFiles(t, r, "a.yaml=a1")
}

func TestDirStartRejected(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "a.yaml"), "bad")
	r := newRecorder()
	if _, err := OpenDir(context.Background(), dir, DirOptions{Handlers: r.handlers()}); !errors.Is(err, ErrRejected) {
		t.Fatalf("OpenDir of a rejected directory: %v", err)
	}
	r.nextRejected(t, "")

	openDir(t, dir, r, DirOptions{StartRejected: true})
	r.nextRejected(t, "")
	write(t, filepath.Join(dir, "a.yaml"), "good")
	nextFiles(t, r, "a.yaml=good")

	if _, err := OpenDir(context.Background(), filepath.Join(dir, "missing"), DirOptions{Handlers: r.handlers()}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("OpenDir of a missing directory: %v", err)
	}
}

func TestFileStartRejected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "conf.yaml")
	write(t, path, "bad")
	r := newRecorder()
	f, err := OpenFile(context.Background(), path, FileOptions{Handlers: r.handlers(), Debounce: 10 * time.Millisecond, StartRejected: true})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r.nextRejected(t, "bad")
	write(t, path, "good")
	r.nextData(t, "good")
}
