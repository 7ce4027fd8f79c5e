package gateway

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/seed-008287da/sluice/internal/gateway/kongconf"
	"github.com/seed-008287da/sluice/policy"
	"github.com/seed-008287da/sluice/policy/dimensions"
	"github.com/seed-008287da/sluice/policy/field"
)

// sluiceDimensions is the business plugin: it builds a composite key from
// request dimensions (package policy/dimensions) and hands it, with the
// quota override of that key, to the rate-limiting plugins that run after
// it (identifier "dimension"). Its config is a dimensions config plus
// where live quota overrides come from:
//
//	overrides_file            a file of {"overrides": [...]}, watched
//	overrides_etcd_endpoints  etcd endpoints, with
//	overrides_etcd_prefix     a prefix whose keys each hold such a document
//
// The watched table is shared by every generation (a reload keeps it);
// until it delivers, the inline overrides apply.
type sluiceDimensions struct {
	b     *dimensions.Builder
	needs dimensions.Needs
}

func newSluiceDimensions(raw json.RawMessage, env *BuildEnv) (Plugin, error) {
	var m map[string]json.RawMessage
	if err := field.Decode("config", raw, &m); err != nil {
		return nil, kongconf.Errors{err.(field.Error)}
	}
	var src dimensions.Source
	var errs kongconf.Errors
	take := func(name string, dst any) {
		if v, ok := m[name]; ok {
			if err := field.Decode("config."+name, v, dst); err != nil {
				errs = append(errs, err.(field.Error))
			}
			delete(m, name)
		}
	}
	take("overrides_file", &src.File)
	take("overrides_etcd_endpoints", &src.EtcdEndpoints)
	take("overrides_etcd_prefix", &src.EtcdPrefix)
	errs = append(errs, src.Check("config")...)
	rest, _ := json.Marshal(m) // re-encoding decoded JSON cannot fail
	var holder *dimensions.Overrides
	if len(errs) == 0 && !src.IsZero() {
		h, err := liveOverrides(env, src)
		if err != nil {
			errs = append(errs, field.Error{Path: "config", Message: err.Error()})
		}
		holder = h
	}
	b, err := dimensions.New(rest, dimensions.Options{Overrides: holder})
	if err != nil {
		fes, ok := field.Of(err)
		if !ok {
			return nil, err
		}
		for _, fe := range fes {
			errs = append(errs, fe.Under("config"))
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return &sluiceDimensions{b: b, needs: b.Needs()}, nil
}

// liveOverrides returns the holder of src's watched overrides, watching
// it once across reloads.
func liveOverrides(env *BuildEnv, src dimensions.Source) (*dimensions.Overrides, error) {
	v, err := env.Shared.Value("overrides|"+src.String(), func() (io.Closer, error) {
		l, err := dimensions.Watch(src, nil, env.Logger)
		if err != nil {
			return nil, fmt.Errorf("opening quota overrides: %w", err)
		}
		return l, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*dimensions.Live).Overrides(), nil
}

func (d *sluiceDimensions) Access(x *Exchange) error {
	var in dimensions.Input
	in.Now = x.Now
	n := &d.needs
	if n.Method {
		in.Method = x.Method()
	}
	if n.Path {
		in.Path = x.Path()
	}
	if n.ClientIP {
		in.ClientIP = x.clientIP()
	}
	if n.Consumer && x.Consumer != nil {
		in.Consumer = dimensions.ConsumerInfo{ID: x.Consumer.ID, Username: x.Consumer.Username, CustomID: x.Consumer.CustomID}
	}
	if n.Route && x.Route != nil {
		in.Route = dimensions.Entity{ID: x.Route.ID, Name: x.Route.Name}
	}
	if n.Service && x.Service != nil {
		in.Service = dimensions.Entity{ID: x.Service.ID, Name: x.Service.Name}
	}
	for _, h := range n.Headers {
		if v := x.Header(h); v != "" {
			in.SetHeader(h, v)
		}
	}
	for _, q := range n.Query {
		if v := x.Query(q); v != "" {
			in.SetQuery(q, v)
		}
	}
	res := d.b.Resolve(&in)
	if !res.OK {
		x.Outcome("sluice-dimensions", "no_key")
		return nil
	}
	x.Identifier = res.Key
	if res.Overridden {
		x.Quota = policy.Quota{Limits: res.Quota.Limits, WindowTypeSet: res.Quota.AlgorithmSet}
		x.Outcome("sluice-dimensions", "override")
		return nil
	}
	x.Outcome("sluice-dimensions", "keyed")
	return nil
}
