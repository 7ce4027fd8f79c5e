package kongplugin

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/seed-008287da/sluice/policy/field"
	"github.com/seed-008287da/sluice/ratelimit"
)

// DefaultSharedKey is the kong.ctx.shared entry through which the
// sluice-dimensions plugin hands its result to sluice-rate-limiting (and
// to any Lua plugin that wants it). The entry is one table, written in one
// PDK call and read in one:
//
//	kong.ctx.shared.sluice = {
//	  key    = "<composite key>",           -- absent when a dimension was missing
//	  groups = { "gold", ... },             -- absent when no group source is set
//	  quota  = { limit = { 100 }, window_size = { 60 },
//	             window_type = "sliding" }, -- absent unless an override applies
//	}
//
// window_type is present only when the override names one; otherwise the
// rate-limiting plugin's own window type applies.
const DefaultSharedKey = "sluice"

// ErrSharedValue is wrapped by errors about a kong.ctx.shared entry that
// does not have the documented shape.
var ErrSharedValue = errors.New("kongplugin: malformed kong.ctx.shared value")

// sharedRecord is the decoded kong.ctx.shared entry.
type sharedRecord struct {
	Key    string
	Groups []string
	// Quota holds the override's limits; nil when none applies.
	Quota []ratelimit.Limit
	// QuotaAlgorithmSet is true when the override named its window type.
	QuotaAlgorithmSet bool
}

// encode returns the JSON-like value SetShared sends: strings, float64s,
// slices and maps only.
func (r *sharedRecord) encode() map[string]any {
	m := map[string]any{}
	if r.Key != "" {
		m["key"] = r.Key
	}
	if len(r.Groups) > 0 {
		gs := make([]any, len(r.Groups))
		for i, g := range r.Groups {
			gs[i] = g
		}
		m["groups"] = gs
	}
	if len(r.Quota) > 0 {
		limits := make([]any, len(r.Quota))
		windows := make([]any, len(r.Quota))
		for i, l := range r.Quota {
			limits[i] = float64(l.Count)
			windows[i] = l.Window.Seconds()
		}
		q := map[string]any{"limit": limits, "window_size": windows}
		if r.QuotaAlgorithmSet {
			q["window_type"] = r.Quota[0].Algorithm.String()
		}
		m["quota"] = q
	}
	return m
}

// decodeShared reads the entry back. A nil value (no entry) gives the zero
// record.
func decodeShared(v any) (sharedRecord, error) {
	var r sharedRecord
	if v == nil {
		return r, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		// A bare string is accepted as the key, so a Lua plugin can write
		// kong.ctx.shared.sluice = "<key>".
		if s, ok := v.(string); ok {
			r.Key = s
			return r, nil
		}
		return r, fmt.Errorf("%w: %s", ErrSharedValue, field.Expected("", "a table or a string", v))
	}
	if k, ok := m["key"]; ok && k != nil {
		s, ok := k.(string)
		if !ok {
			return r, fmt.Errorf("%w: key: %s", ErrSharedValue, field.Expected("key", field.String, k))
		}
		r.Key = s
	}
	gs, err := groupsFromValue(m["groups"])
	if err != nil {
		return r, err
	}
	r.Groups = gs
	if q, ok := m["quota"]; ok && q != nil {
		qm, ok := q.(map[string]any)
		if !ok {
			return r, fmt.Errorf("%w: quota: %s", ErrSharedValue, field.Expected("quota", "a table", q))
		}
		if err := r.decodeQuota(qm); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (r *sharedRecord) decodeQuota(q map[string]any) error {
	alg := ratelimit.SlidingWindow
	if wt, ok := q["window_type"]; ok && wt != nil {
		s, _ := wt.(string)
		a, err := ratelimit.ParseAlgorithm(s)
		if err != nil || a == ratelimit.TokenBucket {
			return fmt.Errorf("%w: quota.window_type must be sliding or fixed, got %v", ErrSharedValue, wt)
		}
		alg, r.QuotaAlgorithmSet = a, true
	}
	limits, lok := q["limit"].([]any)
	windows, wok := q["window_size"].([]any)
	if !lok || !wok || len(limits) != len(windows) || len(limits) == 0 {
		return fmt.Errorf("%w: quota needs limit and window_size arrays of one length", ErrSharedValue)
	}
	out := make([]ratelimit.Limit, len(limits))
	for i := range limits {
		c, cok := limits[i].(float64)
		w, wok := windows[i].(float64)
		if !cok || !wok || c != math.Trunc(c) || c <= 0 || w <= 0 || w > 100*365*24*3600 {
			return fmt.Errorf("%w: quota entry %d is not a positive whole limit and a positive window", ErrSharedValue, i)
		}
		out[i] = ratelimit.Limit{Algorithm: alg, Count: int64(c), Window: time.Duration(math.Round(w*1000)) * time.Millisecond}
		if err := out[i].Validate(); err != nil {
			return fmt.Errorf("%w: quota entry %d: %w", ErrSharedValue, i, err)
		}
	}
	r.Quota = out
	return nil
}
