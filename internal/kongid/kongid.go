// Package kongid derives ids as Kong does for entities that have none:
// name-based (version 5) UUIDs, RFC 4122 section 4.3.
package kongid

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
)

// A UUID is 16 bytes.
type UUID [16]byte

// V5 returns the version 5 UUID of name in namespace.
func V5(namespace UUID, name string) UUID {
	h := sha1.New()
	h.Write(namespace[:])
	h.Write([]byte(name))
	var u UUID
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x50
	u[8] = u[8]&0x3f | 0x80
	return u
}

// String returns u in lower-case text form.
func (u UUID) String() string {
	x := hex.EncodeToString(u[:])
	return x[0:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
}

// Parse reads a UUID in text form, in either case.
func Parse(s string) (UUID, bool) {
	var u UUID
	h := strings.ReplaceAll(s, "-", "")
	if len(s) != 36 || len(h) != 32 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return u, false
	}
	if _, err := hex.Decode(u[:], []byte(h)); err != nil {
		return u, false
	}
	return u, true
}

// MustParse is Parse for a UUID known to be valid; it panics otherwise.
func MustParse(s string) UUID {
	u, ok := Parse(s)
	if !ok {
		panic("kongid: not a UUID: " + s)
	}
	return u
}

// entities is the namespace of Kong's declarative ids
// (kong/db/schema/others/declarative_config.lua).
var entities = MustParse("fd02801f-0957-4a15-a55a-c8d9606f30b5")

// Declarative returns the id Kong gives an entity of a declarative file
// that has none, from its kind ("routes") and endpoint key (its name): the
// version 5 UUID of key in the namespace that is the version 5 UUID of
// kind in Kong's namespace for entities.
func Declarative(kind, key string) string {
	return V5(V5(entities, kind), key).String()
}
