package kongplugin

import (
	"fmt"

	"github.com/seed-008287da/sluice/policy/dimensions"
)

// overridesSource returns the source c names; the zero source when none.
// Source.Check says whether it is valid.
func (c *DimensionsConfig) overridesSource() dimensions.Source {
	var src dimensions.Source
	if c.OverridesFile != nil {
		src.File = *c.OverridesFile
	}
	src.EtcdEndpoints = c.OverridesEtcdEndpoints
	if c.OverridesEtcdPrefix != nil {
		src.EtcdPrefix = *c.OverridesEtcdPrefix
	}
	return src
}

// overridesFor returns the process-level holder of the overrides of c's
// source, starting its watch on first use; nil when c names no source.
// The source has been checked.
func (p *Process) overridesFor(c *DimensionsConfig) (*dimensions.Overrides, error) {
	src := c.overridesSource()
	if src.IsZero() {
		return nil, nil
	}
	key := src.String()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	if l, ok := p.overrides[key]; ok {
		return l.Overrides(), nil
	}
	l, err := dimensions.Watch(src, p.watch, p.log)
	if err != nil {
		return nil, fmt.Errorf("overrides: watching %s: %w", key, err)
	}
	p.overrides[key] = l
	return l.Overrides(), nil
}
