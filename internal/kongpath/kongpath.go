// Package kongpath holds Kong's rules for request paths: how a path is
// normalised before routes are matched against it, and how a path is
// escaped before it is sent upstream. docs/gateway.md (Routing) states
// them for users.
package kongpath

import "strings"

// reserved are the characters whose percent-encodings Normalize keeps:
// decoding them would change what the path means.
const reserved = "!*'();:@&=+$,/?%#[]"

// Normalize returns p as Kong matches routes against it: every
// percent-encoded triplet decoded unless it encodes a reserved character
// ("%2F" stays "%2F", its hex digits upper-cased), then the dot segments
// removed ("/a/./b/../c" is "/a/c"; "%2E" counts once decoded) and runs of
// slashes merged. A path already in that form is returned unchanged.
func Normalize(p string) string {
	if p == "" || p == "/" {
		return p
	}
	if strings.IndexByte(p, '%') >= 0 {
		p = decode(p)
	}
	if strings.IndexByte(p, '.') < 0 && !strings.Contains(p, "//") {
		return p
	}
	var segs []string
	pop := func() {
		if len(segs) > 0 {
			segs = segs[:len(segs)-1]
		}
	}
	for p != "" {
		switch {
		case p == "/.":
			p = "/"
		case p == "/..":
			p = "/"
			pop()
		case p == "." || p == "..":
			p = ""
		case strings.HasPrefix(p, "../"):
			p = p[3:]
		case strings.HasPrefix(p, "./"):
			p = p[2:]
		case strings.HasPrefix(p, "/./"):
			p = p[2:]
		case strings.HasPrefix(p, "/../"):
			p = p[3:]
			pop()
		case strings.HasPrefix(p, "//"):
			p = p[1:]
		default:
			if i := strings.IndexByte(p[1:], '/'); i >= 0 {
				segs = append(segs, p[:i+1])
				p = p[i+1:]
			} else {
				segs = append(segs, p)
				p = ""
			}
		}
	}
	return strings.Join(segs, "")
}

// decode decodes the percent-encoded triplets of p that do not encode a
// reserved character, and upper-cases the hex digits of those that do.
func decode(p string) string {
	var b strings.Builder
	b.Grow(len(p))
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == '%' && i+2 < len(p) {
			if n, ok := unhex2(p[i+1], p[i+2]); ok {
				if strings.IndexByte(reserved, n) >= 0 {
					b.WriteByte('%')
					b.WriteByte(upperHex[n>>4])
					b.WriteByte(upperHex[n&15])
				} else {
					b.WriteByte(n)
				}
				i += 2
				continue
			}
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Escape returns p safe to send in a request line, with the meaning Kong
// gives it: every byte that is neither a letter, a digit, one of
// "-._~", nor a reserved character (a percent sign included, so that the
// triplets Normalize kept stay as they are) is percent-encoded.
func Escape(p string) string {
	n := 0
	for i := 0; i < len(p); i++ {
		if !safe(p[i]) {
			n++
		}
	}
	if n == 0 {
		return p
	}
	b := make([]byte, 0, len(p)+2*n)
	for i := 0; i < len(p); i++ {
		if c := p[i]; safe(c) {
			b = append(b, c)
		} else {
			b = append(b, '%', upperHex[c>>4], upperHex[c&15])
		}
	}
	return string(b)
}

// ValidEncoding reports the first '%' of p that does not start a
// percent-encoded triplet, as Kong's message quotes it ("%zz", "%4"), or
// "" when every '%' does.
func ValidEncoding(p string) (bad string) {
	for i := 0; i < len(p); i++ {
		if p[i] != '%' {
			continue
		}
		if i+2 < len(p) {
			if _, ok := unhex2(p[i+1], p[i+2]); ok {
				i += 2
				continue
			}
		}
		return p[i:min(i+3, len(p))]
	}
	return ""
}

func safe(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("-._~", c) >= 0 || strings.IndexByte(reserved, c) >= 0
}

const upperHex = "0123456789ABCDEF"

func unhex2(a, b byte) (byte, bool) {
	x, ok1 := unhex(a)
	y, ok2 := unhex(b)
	return x<<4 | y, ok1 && ok2
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}
