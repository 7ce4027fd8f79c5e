package policy

import (
	"errors"
	"strings"
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

// A FieldError is one validation failure.
type FieldError struct {
	// Path names the field: "config.limit", "config.redis.port",
	// "config.limit[1]" (array indexes count from 0). Problems of the
	// config as a whole name the field they are about (for example
	// "config.window_size" for "You must provide the same number of windows
	// and limits").
	Path string
	// Message is Kong's text for the failure where Kong has one (see the
	// compatibility document), else sluice's.
	Message string
}

func (e FieldError) String() string { return e.Path + ": " + e.Message }

// A ValidationError lists every problem found in a config, in the order
// Kong checks them: field by field first, then the checks across fields.
// It wraps ErrInvalidConfig.
type ValidationError struct {
	Errors []FieldError
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
