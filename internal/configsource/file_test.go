package configsource

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fsnotify/fsnotify"
)

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// replace writes data the way editors and config-management tools do: to
// a temporary file, then renamed over the target.
func replace(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	write(t, tmp, data)
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func openFile(t *testing.T, path string, r *recorder) *File {
	t.Helper()
	f, err := OpenFile(context.Background(), path, FileOptions{Handlers: r.handlers(), Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestFileEdits(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kong.yml")
	write(t, path, "v1")
	r := newRecorder()
	f := openFile(t, path, r)
	if d := r.nextData(t, "v1"); d.Source != "file:"+path || d.Revision != 1 {
		t.Fatalf("first document %+v", d)
	}

	write(t, path, "v2") // in place
	r.nextData(t, "v2")

	replace(t, path, "v3") // rename over
	r.nextData(t, "v3")

	// A rejected document leaves the consumer's config alone and the
	// source keeps watching.
	replace(t, path, "bad")
	r.nextRejected(t, "bad")
	replace(t, path, "v4")
	r.nextData(t, "v4")

	// Rewriting the same bytes delivers nothing: the next delivery is v5.
	write(t, path, "v4")
	write(t, filepath.Join(dir, "unrelated"), "x")
	replace(t, path, "v5")
	r.nextData(t, "v5")

	// A vanished file is an error, not a document; it comes back.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	r.nextError(t, ErrNotFound)
	write(t, path, "v6")
	r.nextData(t, "v6")
	r.quiet(t)

	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A Kubernetes ConfigMap volume: kong.yml -> ..data/kong.yml, ..data ->
// ..<timestamp>; an update writes a new timestamped directory and swaps
// ..data with a rename.
func TestFileConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	version := func(name, data string) {
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		write(t, filepath.Join(dir, name, "kong.yml"), data)
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
	version("..2026_11_30_1", "v1")
	swap("..2026_11_30_1")
	if err := os.Symlink("..data/kong.yml", filepath.Join(dir, "kong.yml")); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	openFile(t, filepath.Join(dir, "kong.yml"), r)
	r.nextData(t, "v1")

	version("..2026_11_30_2", "v2")
	swap("..2026_11_30_2")
	if err := os.RemoveAll(filepath.Join(dir, "..2026_11_30_1")); err != nil {
		t.Fatal(err)
	}
	r.nextData(t, "v2")

	version("..2026_11_30_3", "bad")
	swap("..2026_11_30_3")
	r.nextRejected(t, "bad")
}

// A plain symlink to a file in another directory: edits of the target are
// followed, and so is re-pointing the link.
func TestFileSymlinkElsewhere(t *testing.T) {
	a, b, link := t.TempDir(), t.TempDir(), t.TempDir()
	write(t, filepath.Join(a, "conf.json"), "a1")
	write(t, filepath.Join(b, "conf.json"), "b1")
	path := filepath.Join(link, "conf.json")
	if err := os.Symlink(filepath.Join(a, "conf.json"), path); err != nil {
		t.Fatal(err)
	}
	r := newRecorder()
	openFile(t, path, r)
	r.nextData(t, "a1")

	write(t, filepath.Join(a, "conf.json"), "a2")
	r.nextData(t, "a2")

	tmp := filepath.Join(link, "conf.json.new")
	if err := os.Symlink(filepath.Join(b, "conf.json"), tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
	r.nextData(t, "b1")

	// Now b's directory is watched, and a's no longer matters.
	write(t, filepath.Join(a, "conf.json"), "a3")
	replace(t, filepath.Join(b, "conf.json"), "b2")
	r.nextData(t, "b2")
}

func TestFileOpenErrors(t *testing.T) {
	dir := t.TempDir()
	r := newRecorder()
	_, err := OpenFile(context.Background(), filepath.Join(dir, "missing.yml"), FileOptions{Handlers: r.handlers()})
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing file: %v", err)
	}
	path := filepath.Join(dir, "bad.yml")
	write(t, path, "bad")
	if _, err := OpenFile(context.Background(), path, FileOptions{Handlers: r.handlers()}); !errors.Is(err, ErrRejected) || !errors.Is(err, errBad) {
		t.Fatalf("rejected file: %v", err)
	}
	if _, err := OpenFile(context.Background(), path, FileOptions{}); err == nil {
		t.Fatal("OpenFile accepted no Apply")
	}
}

func TestFileStopsWithContext(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kong.yml")
	write(t, path, "v1")
	r := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	f, err := OpenFile(ctx, path, FileOptions{Handlers: r.handlers()})
	if err != nil {
		t.Fatal(err)
	}
	r.nextData(t, "v1")
	cancel()
	select {
	case <-f.done:
	case <-time.After(deadline):
		t.Fatal("goroutine still running after the context was cancelled")
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// The debounce on a fake clock: a burst of events gives one read, taken
// a full quiet period after the last event of the burst; events about
// other files do nothing.
func TestFileDebounce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "kong.yml")
		write(t, path, "v1")
		var mu sync.Mutex
		var got []string
		var at []time.Duration
		deliveries := func() ([]string, []time.Duration) {
			mu.Lock()
			defer mu.Unlock()
			return append([]string(nil), got...), append([]time.Duration(nil), at...)
		}
		start := time.Now()
		f, err := newFile(path, FileOptions{Debounce: 100 * time.Millisecond, Handlers: Handlers{Apply: func(d Document) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, string(d.Data))
			at = append(at, time.Since(start))
			return nil
		}}})
		if err != nil {
			t.Fatal(err)
		}
		events := make(chan fsnotify.Event)
		errs := make(chan error)
		ctx, cancel := context.WithCancel(t.Context())
		go f.run(ctx, events, errs)

		for i := range 5 {
			write(t, path, "v"+string(rune('2'+i)))
			events <- fsnotify.Event{Name: path, Op: fsnotify.Write}
			time.Sleep(60 * time.Millisecond) // fake clock: inside the quiet period
		}
		events <- fsnotify.Event{Name: filepath.Join(dir, "other"), Op: fsnotify.Write}
		synctest.Wait()
		if got, _ := deliveries(); len(got) != 0 {
			t.Fatalf("read during the burst: %q", got)
		}
		time.Sleep(40 * time.Millisecond) // 100 ms after the last relevant event
		synctest.Wait()
		if got, at := deliveries(); len(got) != 1 || got[0] != "v6" || at[0] != 340*time.Millisecond {
			t.Fatalf("deliveries %q at %v, want [v6] at 340ms", got, at)
		}

		// An unchanged file after an event is not delivered again.
		events <- fsnotify.Event{Name: path, Op: fsnotify.Chmod}
		time.Sleep(time.Second)
		synctest.Wait()
		if got, _ := deliveries(); len(got) != 1 {
			t.Fatalf("deliveries %q", got)
		}
		cancel()
		<-f.done
	})
}
