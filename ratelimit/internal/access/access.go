// Package access hands package storekit the one part of a
// ratelimit.Decision that only a store writes, its per-limit states,
// without putting it in package ratelimit's API.
//
// Package ratelimit sets NewDecision once, in its init, which runs before
// storekit's variables are initialised; nothing else writes it. It is typed
// any because this package cannot import ratelimit. Everything crosses the
// call by value: a pointer handed to a function value escapes to the heap,
// and deciding must not allocate.
package access

// Inline is how many states States holds without allocating.
const Inline = 4

// States is a list of per-limit states, the first Inline of them in place.
type States[T any] struct {
	N      int
	Inline [Inline]T
	More   []T
}

// Grow makes s hold n states, keeping those it has.
func (s *States[T]) Grow(n int) {
	if n <= s.N {
		return
	}
	s.N = n
	if extra := n - Inline - len(s.More); extra > 0 {
		s.More = append(s.More, make([]T, extra)...)
	}
}

// At returns the place of the i-th state.
func (s *States[T]) At(i int) *T {
	if i < Inline {
		return &s.Inline[i]
	}
	return &s.More[i-Inline]
}

// NewDecision is a func(allowed bool, denied int, retry time.Duration,
// s States[ratelimit.LimitState]) ratelimit.Decision.
var NewDecision any

// Checked is a list of limits that package ratelimit has validated (a
// Limiter's, in SetLimits), which a store may decide without checking them
// again. Only this module can make a non-empty one; the zero Checked holds
// no limits, which a store rejects as it rejects any empty list.
type Checked[L any] struct{ ls []L }

// MakeChecked returns ls as checked. The caller must have validated every
// limit of ls and must never change ls afterwards.
func MakeChecked[L any](ls []L) Checked[L] { return Checked[L]{ls} }

// Limits returns the checked limits. They must not be changed.
func (c Checked[L]) Limits() []L { return c.ls }
