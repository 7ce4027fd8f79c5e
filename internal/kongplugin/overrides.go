package kongplugin

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/seed-008287da/sluice/internal/configsource"

	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/policy/field"
)

// OverridesSource names a config-centre location of quota overrides
// documents ({"overrides": [...]}, see docs/business-layer.md): a file, or
// every key under an etcd prefix.
type OverridesSource struct {
	File          string
	EtcdEndpoints []string
	EtcdPrefix    string
}

// String identifies the source in logs and as the watcher's key.
func (s OverridesSource) String() string {
	if s.File != "" {
		return "file:" + s.File
	}
	return "etcd:" + strings.Join(s.EtcdEndpoints, ",") + s.EtcdPrefix
}

// A WatchFunc starts watching src and calls apply with the full current
// set of documents on start and after every change, from one goroutine at a
// time; a document apply rejects leaves the previous table in force. It
// returns a function that stops the watch and waits for it.
type WatchFunc func(src OverridesSource, apply func(docs [][]byte) error) (stop func(), err error)

// ConfigSourceWatch is the default WatchFunc: a file watched with
// configsource.File (every way of replacing a file, ConfigMap symlink swaps
// included) or an etcd prefix watched with configsource.Etcd, whose keys'
// values are merged into one table. Rejected documents and source errors
// are logged to log.
func ConfigSourceWatch(log *slog.Logger) WatchFunc {
	return func(src OverridesSource, apply func([][]byte) error) (func(), error) {
		h := configsource.Handlers{
			Apply: func(doc configsource.Document) error { return apply(doc.Values()) },
			Rejected: func(doc configsource.Document, err error) {
				log.Error("sluice-dimensions: rejecting overrides", "source", doc.Source, "err", err)
			},
			Error: func(err error) {
				log.Error("sluice-dimensions: watching overrides", "source", src.String(), "err", err)
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
				log.Error("sluice-dimensions: closing overrides source", "source", src.String(), "err", err)
			}
		}, nil
	}
}

// overridesWatch is one watched source, shared by every instance that
// names it.
type overridesWatch struct {
	holder *dimensions.Overrides
	stop   func()
}

// overridesSource returns the source c names; the zero source when none.
func (c *DimensionsConfig) overridesSource() (OverridesSource, error) {
	var src OverridesSource
	if c.OverridesFile != nil {
		src.File = *c.OverridesFile
	}
	src.EtcdEndpoints = c.OverridesEtcdEndpoints
	if c.OverridesEtcdPrefix != nil {
		src.EtcdPrefix = *c.OverridesEtcdPrefix
	}
	switch {
	case src.File == "" && len(src.EtcdEndpoints) == 0 && src.EtcdPrefix == "":
	case src.File != "" && (len(src.EtcdEndpoints) > 0 || src.EtcdPrefix != ""):
		return src, field.Error{Path: "config.overrides_file", Message: "set either overrides_file or overrides_etcd_*, not both"}
	case src.File == "" && (len(src.EtcdEndpoints) == 0 || src.EtcdPrefix == ""):
		return src, field.Error{Path: "config.overrides_etcd_endpoints", Message: "both overrides_etcd_endpoints and overrides_etcd_prefix are required"}
	}
	return src, nil
}

// overridesFor returns the process-level holder of the overrides of c's
// source, starting its watch on first use; nil when c names no source.
func (p *Process) overridesFor(c *DimensionsConfig) (*dimensions.Overrides, error) {
	src, err := c.overridesSource()
	if err != nil || src.File == "" && len(src.EtcdEndpoints) == 0 {
		return nil, err
	}
	key := src.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if w, ok := p.overrides[key]; ok {
		return w.holder, nil
	}
	w := &overridesWatch{holder: &dimensions.Overrides{}}
	stop, err := p.watch(src, func(docs [][]byte) error {
		if len(docs) == 0 {
			// Nothing at the source: the configs' inline overrides apply.
			w.holder.Store(nil)
			return nil
		}
		t, err := dimensions.ParseOverrides(docs...)
		if err != nil {
			return err
		}
		w.holder.Store(t)
		p.log.Info("sluice-dimensions: overrides loaded", "source", key, "overrides", t.Len())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("overrides: watching %s: %w", key, err)
	}
	w.stop = stop
	p.overrides[key] = w
	return w.holder, nil
}
