package kongplugin

import (
	"fmt"
	"strings"

	"github.com/seed-008287da/sluice/policy/dimensions"
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

// A WatchFunc starts watching src and calls update with the full current
// set of documents on start and after every change, from one goroutine at a
// time. It returns a function that stops the watch and waits for it. The
// sluice-dimensions binary wires it to internal/configsource.
type WatchFunc func(src OverridesSource, update func(docs [][]byte)) (stop func(), err error)

// overridesWatch is one watched source, shared by every instance that
// names it.
type overridesWatch struct {
	holder *dimensions.Overrides
	stop   func()
}

// overridesFor returns the process-level holder of the overrides of c's
// source, starting its watch on first use; nil when c names no source.
func (p *Process) overridesFor(c *DimensionsConfig) (*dimensions.Overrides, error) {
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
		return nil, nil
	case src.File != "" && (len(src.EtcdEndpoints) > 0 || src.EtcdPrefix != ""):
		return nil, fmt.Errorf("overrides_file: set either overrides_file or overrides_etcd_*, not both")
	case src.File == "" && (len(src.EtcdEndpoints) == 0 || src.EtcdPrefix == ""):
		return nil, fmt.Errorf("overrides_etcd_endpoints: both overrides_etcd_endpoints and overrides_etcd_prefix are required")
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
	if p.watch == nil {
		return nil, fmt.Errorf("overrides: this plugin server cannot watch %s", key)
	}
	w := &overridesWatch{holder: &dimensions.Overrides{}}
	stop, err := p.watch(src, func(docs [][]byte) {
		if len(docs) == 0 {
			// Nothing at the source: the configs' inline overrides apply.
			w.holder.Store(nil)
			return
		}
		t, err := dimensions.ParseOverrides(docs...)
		if err != nil {
			// A bad document keeps the table in force, as a reload keeps
			// the running config.
			p.log.Error("sluice-dimensions: rejecting overrides", "source", key, "err", err)
			return
		}
		w.holder.Store(t)
		p.log.Info("sluice-dimensions: overrides loaded", "source", key, "overrides", t.Len())
	})
	if err != nil {
		return nil, fmt.Errorf("overrides: watching %s: %w", key, err)
	}
	w.stop = stop
	p.overrides[key] = w
	return w.holder, nil
}
