package ratelimit

import "strconv"

// Key joins parts into one key such that distinct lists of parts never give
// the same key: each part is written as its length in decimal, a colon and
// its bytes (Key("acme", "/api") is "4:acme4:/api"). A bare join would let ("a:b", "c") collide with
// ("a", "b:c").
func Key(parts ...string) string {
	n := 0
	for _, p := range parts {
		n += len(p) + 4
	}
	// Built in a buffer on the stack when it fits: the string is then the
	// only allocation.
	var buf [256]byte
	b := buf[:0]
	if n > len(buf) {
		b = make([]byte, 0, n)
	}
	for _, p := range parts {
		b = strconv.AppendInt(b, int64(len(p)), 10)
		b = append(b, ':')
		b = append(b, p...)
	}
	return string(b)
}
