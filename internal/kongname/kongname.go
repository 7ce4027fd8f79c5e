// Package kongname holds the names Kong gives windows, and its rule for
// header names, shared by package policy, its dimensions, the gateway's
// configuration and ratelimit/httplimit, which cannot import policy.
package kongname

import (
	"strconv"
	"time"
)

// MismatchedWindows is Kong's message for lists of limits and window sizes
// of different lengths, byte for byte.
const MismatchedWindows = "You must provide the same number of windows and limits"

// Window returns the name Kong gives a window size in header names:
// "second", "minute", "hour", "day", "month" (30 days) and "year" (365
// days); any other size is its number of seconds ("30", "7200"), or of
// milliseconds with an "ms" suffix when it is not a whole second.
func Window(w time.Duration) string {
	switch w {
	case time.Second:
		return "second"
	case time.Minute:
		return "minute"
	case time.Hour:
		return "hour"
	case 24 * time.Hour:
		return "day"
	case 30 * 24 * time.Hour:
		return "month"
	case 365 * 24 * time.Hour:
		return "year"
	}
	if w%time.Second == 0 {
		return strconv.FormatInt(int64(w/time.Second), 10)
	}
	return strconv.FormatInt(int64(w/time.Millisecond), 10) + "ms"
}

// CheckHeaderName checks s as Kong's header_name type and returns Kong's
// message, or "": letters, digits, '-' and '_' only.
func CheckHeaderName(s string) string {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return "bad header name '" + s + "', allowed characters are A-Z, a-z, 0-9, '_', and '-'"
		}
	}
	return ""
}
