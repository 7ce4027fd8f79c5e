package dimensions

import (
	"context"
	"log/slog"
	"strconv"
	"strings"

	"github.com/seed-008287da/sluice/internal/configsource"
	"github.com/seed-008287da/sluice/policy/field"
)

// A Source names a config centre that holds live quota overrides
// documents ({"overrides": [...]}, docs/business-layer.md): a file, or
// every key under an etcd prefix, whose documents are merged. The zero
// Source names none. It is what a business plugin config's
// overrides_file, overrides_etcd_endpoints and overrides_etcd_prefix say.
type Source struct {
	File          string
	EtcdEndpoints []string
	EtcdPrefix    string
}

// IsZero reports whether s names no source.
func (s Source) IsZero() bool {
	return s.File == "" && len(s.EtcdEndpoints) == 0 && s.EtcdPrefix == ""
}

// String identifies the source in logs; distinct sources give distinct
// strings.
func (s Source) String() string {
	if s.File != "" {
		return "file:" + s.File
	}
	eps := make([]string, len(s.EtcdEndpoints))
	for i, e := range s.EtcdEndpoints {
		eps[i] = strconv.Quote(e)
	}
	return "etcd:" + strings.Join(eps, ",") + ":" + strconv.Quote(s.EtcdPrefix)
}

// Check returns the problems of a Source whose fields do not go together,
// their paths under path (the config holding the fields, such as
// "config"); none when it is valid.
func (s Source) Check(path string) []field.Error {
	switch {
	case s.IsZero():
	case s.File != "" && (len(s.EtcdEndpoints) > 0 || s.EtcdPrefix != ""):
		return []field.Error{{Path: join(path, "overrides_file"), Message: "set either overrides_file or overrides_etcd_*, not both"}}
	case s.File == "" && (len(s.EtcdEndpoints) == 0 || s.EtcdPrefix == ""):
		return []field.Error{{Path: join(path, "overrides_etcd_endpoints"), Message: "both overrides_etcd_endpoints and overrides_etcd_prefix are required"}}
	}
	return nil
}

// A WatchFunc starts watching src and calls apply with the full current
// set of documents on start and after every change, from one goroutine at
// a time; a set apply rejects leaves the previous table in force. It
// returns a function that stops the watch and waits for it.
type WatchFunc func(src Source, apply func(docs [][]byte) error) (stop func(), err error)

// ConfigSourceWatch is the WatchFunc of the sluice gateway and the Kong
// plugin: a file watched through its directory (every way of replacing a
// file, ConfigMap symlink swaps included), or an etcd prefix watched with
// a watch that resumes after failures (internal/configsource). Rejected
// documents and source errors are logged to log.
func ConfigSourceWatch(log *slog.Logger) WatchFunc {
	return func(src Source, apply func([][]byte) error) (func(), error) {
		h := configsource.Handlers{
			Apply: func(doc configsource.Document) error { return apply(doc.Values()) },
			Rejected: func(doc configsource.Document, err error) {
				log.Error("quota overrides rejected", "source", doc.Source, "error", err.Error())
			},
			Error: func(err error) {
				log.Warn("quota overrides source", "source", src.String(), "error", err.Error())
			},
		}
		ctx := context.Background()
		var s configsource.Source
		var err error
		if src.File != "" {
			s, err = configsource.OpenFile(ctx, src.File, configsource.FileOptions{Handlers: h})
		} else {
			s, err = configsource.OpenEtcd(ctx, configsource.EtcdOptions{Handlers: h,
				Endpoints: src.EtcdEndpoints, Key: src.EtcdPrefix, Prefix: true})
		}
		if err != nil {
			return nil, err
		}
		return func() {
			if err := s.Close(); err != nil {
				log.Warn("closing quota overrides source", "source", src.String(), "error", err.Error())
			}
		}, nil
	}
}

// A Live is the quota table of a watched Source. Pass Overrides to
// Options.Overrides of every Builder whose config names the source: they
// share the table, and a new table applies without a reload. While the
// source holds no document, the configs' inline overrides apply; once it
// holds some, their merged table replaces them as a whole.
type Live struct {
	holder Overrides
	stop   func()
}

// Watch starts watching src with watch (nil means ConfigSourceWatch(log))
// and returns its Live table; log (nil discards) gets a line per table
// loaded. The first set of documents is applied before Watch returns when
// the WatchFunc delivers it so (ConfigSourceWatch does, and fails when it
// is rejected or the source cannot be opened). Close stops the watch.
func Watch(src Source, watch WatchFunc, log *slog.Logger) (*Live, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if watch == nil {
		watch = ConfigSourceWatch(log)
	}
	l := &Live{}
	stop, err := watch(src, func(docs [][]byte) error {
		if len(docs) == 0 {
			l.holder.Store(nil)
			return nil
		}
		t, err := ParseOverrides(docs...)
		if err != nil {
			return err
		}
		l.holder.Store(t)
		log.Info("quota overrides loaded", "source", src.String(), "overrides", t.Len())
		return nil
	})
	if err != nil {
		return nil, err
	}
	l.stop = stop
	return l, nil
}

// Overrides returns the holder of the table in force.
func (l *Live) Overrides() *Overrides { return &l.holder }

// Close stops the watch and waits for it. It always returns nil.
func (l *Live) Close() error {
	l.stop()
	return nil
}
