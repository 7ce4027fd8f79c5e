package configsource

import (
	"errors"
	"testing"
)

func TestPush(t *testing.T) {
	r := newRecorder()
	p, err := NewStatic([]byte("v1"), r.handlers())
	if err != nil {
		t.Fatal(err)
	}
	if d := r.nextData(t, "v1"); d.Source != "push" || d.Revision != 1 {
		t.Fatalf("document %+v", d)
	}
	err = p.Push([]byte("bad"))
	if !errors.Is(err, ErrRejected) || !errors.Is(err, errBad) {
		t.Fatalf("Push(bad) = %v", err)
	}
	if err.Error() != "configsource: document rejected: push: bad document" {
		t.Fatalf("error text %q", err)
	}
	r.nextRejected(t, "bad")
	if err := p.Push([]byte("v2")); err != nil {
		t.Fatal(err)
	}
	if d := r.nextData(t, "v2"); d.Revision != 3 {
		t.Fatalf("revision %d", d.Revision)
	}
	p.Close()
	if err := p.Push([]byte("v3")); !errors.Is(err, ErrClosed) {
		t.Fatalf("Push after Close = %v", err)
	}
	if _, err := NewPush(Handlers{}); err == nil {
		t.Fatal("NewPush accepted no Apply")
	}
	if _, err := NewStatic([]byte("bad"), r.handlers()); !errors.Is(err, ErrRejected) {
		t.Fatalf("NewStatic(bad) = %v", err)
	}
}

func TestDocumentValues(t *testing.T) {
	if v := (Document{}).Values(); v != nil {
		t.Fatalf("empty: %q", v)
	}
	if v := (Document{Data: []byte("a")}).Values(); len(v) != 1 || string(v[0]) != "a" {
		t.Fatalf("data: %q", v)
	}
	d := Document{Entries: []Entry{{"k1", []byte("a")}, {"k2", []byte("b")}}}
	if v := d.Values(); len(v) != 2 || string(v[1]) != "b" {
		t.Fatalf("entries: %q", v)
	}
	if v := (Document{Entries: []Entry{}}).Values(); v == nil || len(v) != 0 {
		t.Fatalf("empty prefix: %q", v)
	}
}
