package ratelimittest

import (
	"fmt"
	"strings"
	"time"

	"github.com/seed-008287da/sluice/ratelimit"
)

func sprintf(format string, args ...any) string { return fmt.Sprintf(format, args...) }

// fmtDur prints InfDuration by name: its digits say nothing to a reader.
func fmtDur(d time.Duration) string {
	if d == ratelimit.InfDuration {
		return "InfDuration"
	}
	return d.String()
}

// describe formats a decision on one line for failure messages.
func describe(d *ratelimit.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{allowed %v denied %d retry %s", d.Allowed, d.Denied, fmtDur(d.RetryAfter))
	for i := range d.Len() {
		s := d.State(i)
		fmt.Fprintf(&b, "; [%d] %s used %g remaining %d reset %s exceeded %v counted %v",
			i, s.Limit, s.Used, s.Remaining, s.Reset, s.Exceeded, s.Counted)
	}
	b.WriteString("}")
	return b.String()
}
