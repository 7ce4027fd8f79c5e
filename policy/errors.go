package policy

import (
	"errors"
	"strings"

	"github.com/seed-008287da/sluice/policy/field"
)

// Sentinel errors.
var (
	// ErrInvalidConfig is wrapped by every *ValidationError.
	ErrInvalidConfig = errors.New("policy: invalid config")
	// ErrClosed is returned by a Registry, and by limiters bound to it,
	// after Registry.Close.
	ErrClosed = errors.New("policy: registry closed")
	// ErrStrategyUnavailable is returned by NewAdvanced and NewBasic when
	// the Registry cannot build a store for the configured strategy.
	ErrStrategyUnavailable = errors.New("policy: strategy unavailable")
	// ErrInvalidQuota is wrapped by the error Advanced.Check returns, with
	// a result decided on the plugin's own limits, when Request.Quota is
	// not a valid set of limits.
	ErrInvalidQuota = errors.New("policy: invalid quota")
)

// A ValidationError lists every problem found in a config, in the order
// Kong checks them: field by field first, then the checks across fields.
// It wraps ErrInvalidConfig.
// Each field error's Message is Kong's text for the failure where Kong has
// one (see docs/kong-compatibility.md), else sluice's; its Path starts with
// "config", and problems of the config as a whole name the field they are
// about ("config.window_size" for "You must provide the same number of
// windows and limits").
type ValidationError struct {
	Errors []field.Error
}

// Error joins the field errors with "; ".
func (e *ValidationError) Error() string {
	var b strings.Builder
	b.WriteString("policy: invalid config: ")
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.String())
	}
	return b.String()
}

// Unwrap returns ErrInvalidConfig.
func (e *ValidationError) Unwrap() error { return ErrInvalidConfig }

// FieldErrors returns e.Errors.
func (e *ValidationError) FieldErrors() []field.Error { return e.Errors }
