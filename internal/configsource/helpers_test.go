package configsource

import (
	"errors"
	"testing"
	"time"
)

// deadline bounds every wait for an event from a real file system or a
// real etcd. Tests never sleep: they wait for the delivery itself.
const deadline = 20 * time.Second

// recorder collects what a source hands to its Handlers, on channels.
type recorder struct {
	applied  chan Document
	rejected chan string
	errs     chan error
}

func newRecorder() *recorder {
	return &recorder{
		applied:  make(chan Document, 100),
		rejected: make(chan string, 100),
		errs:     make(chan error, 100),
	}
}

var (
	errBad   = errors.New("bad document")
	errEmpty = errors.New("empty document")
)

// handlers rejects documents whose data is "bad" (or whose values include
// it), as a consumer's validation would. It also rejects, silently, an
// empty file: an in-place write truncates before it writes, and a read
// that falls between the two sees nothing; a real consumer rejects that
// as an invalid config and gets the full one next.
func (r *recorder) handlers() Handlers {
	return Handlers{
		Apply: func(d Document) error {
			if d.Data != nil && len(d.Data) == 0 {
				return errEmpty
			}
			for _, v := range d.Values() {
				if string(v) == "bad" {
					return errBad
				}
			}
			r.applied <- d
			return nil
		},
		Rejected: func(d Document, err error) {
			if errors.Is(err, errEmpty) {
				return
			}
			if !errors.Is(err, errBad) {
				panic("Rejected got " + err.Error())
			}
			r.rejected <- string(d.Data)
		},
		Error: func(err error) { r.errs <- err },
	}
}

func (r *recorder) next(t *testing.T) Document {
	t.Helper()
	select {
	case d := <-r.applied:
		return d
	case <-time.After(deadline):
		t.Fatalf("no document delivered within %s", deadline)
	}
	return Document{}
}

func (r *recorder) nextData(t *testing.T, want string) Document {
	t.Helper()
	d := r.next(t)
	if string(d.Data) != want {
		t.Fatalf("delivered %q, want %q", d.Data, want)
	}
	return d
}

func (r *recorder) nextRejected(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-r.rejected:
		if got != want {
			t.Fatalf("rejected %q, want %q", got, want)
		}
	case <-time.After(deadline):
		t.Fatalf("no rejection within %s", deadline)
	}
}

func (r *recorder) nextError(t *testing.T, target error) {
	t.Helper()
	for {
		select {
		case err := <-r.errs:
			if errors.Is(err, target) {
				return
			}
		case <-time.After(deadline):
			t.Fatalf("no error wrapping %v within %s", target, deadline)
		}
	}
}

// quiet checks that nothing was delivered or rejected so far.
func (r *recorder) quiet(t *testing.T) {
	t.Helper()
	select {
	case d := <-r.applied:
		t.Fatalf("unexpected delivery %q", d.Data)
	case s := <-r.rejected:
		t.Fatalf("unexpected rejection %q", s)
	default:
	}
}
