package configsource

import (
	"context"
	"errors"
	"fmt"
)

// A Spec names one source as a config file would: a file, or an etcd key
// or prefix. Exactly one of File or EtcdEndpoints must be set.
type Spec struct {
	File          string
	EtcdEndpoints []string
	// EtcdKey is the key, or with EtcdPrefix the prefix, to watch.
	EtcdKey    string
	EtcdPrefix bool
}

// ErrSpec is wrapped by errors about a Spec that names no source or two.
var ErrSpec = errors.New("configsource: invalid source")

// Open opens the source s names with default options, delivering to h; see
// OpenFile and OpenEtcd.
func Open(ctx context.Context, s Spec, h Handlers) (Source, error) {
	switch {
	case s.File != "" && len(s.EtcdEndpoints) > 0:
		return nil, fmt.Errorf("%w: set a file or etcd endpoints, not both", ErrSpec)
	case s.File != "":
		return OpenFile(ctx, s.File, FileOptions{Handlers: h})
	case len(s.EtcdEndpoints) > 0:
		if s.EtcdKey == "" {
			return nil, fmt.Errorf("%w: an etcd source needs a key", ErrSpec)
		}
		return OpenEtcd(ctx, EtcdOptions{Handlers: h, Endpoints: s.EtcdEndpoints, Key: s.EtcdKey, Prefix: s.EtcdPrefix})
	}
	return nil, fmt.Errorf("%w: no file and no etcd endpoints", ErrSpec)
}
