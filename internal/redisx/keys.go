package redisx

import (
	"crypto/sha256"
	"encoding/base64"
	"strings"
)

// DigestLen is the length of Digest's result.
const DigestLen = 43

// Digest is the base64url SHA-256 of a user key: bounded in size, free of
// braces, spaces and newlines whatever the key holds, and never equal to
// another key's.
func Digest(key string) string {
	sum := sha256.Sum256([]byte(key))
	var enc [DigestLen]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:])
	return string(enc[:])
}

// Keys is the one key scheme of the Redis-backed layers. Every key starts
// with '{', the layer's prefix (its owner, without a trailing ':') and a ':'
// before the kind of state it holds, so that one SCAN by "{<prefix>:*"
// finds all of a layer's keys and each key says what it is:
//
//	Key(kind, k)      {<prefix>:<kind>:<digest of k>}        a slot of its own per user key
//	Fixed(name)       {<prefix>:<name>}                      one key per layer and name
//	In(name, kind, k) {<prefix>:<name>}:<kind>:<digest of k> in Fixed(name)'s slot
//
// User keys appear only as digests, so no key a client sends can reach
// another key's state or move the Cluster hash tag (the prefix holds no
// brace: Options.Validate checks it). Keys that one script touches together
// share a hash tag (In and Fixed), the others spread over a Cluster (Key).
// docs/redis.md lists every key the layers write.
type Keys struct{ prefix string }

// NewKeys returns the scheme under prefix; a trailing ':' is dropped, as
// the scheme puts its own after the prefix.
func NewKeys(prefix string) Keys { return Keys{prefix: strings.TrimSuffix(prefix, ":")} }

// Prefix returns the prefix every key starts with (after the '{'), without
// the separator.
func (k Keys) Prefix() string { return k.prefix }

// Key names user key's state of the given kind, in a Cluster slot of its
// own.
func (k Keys) Key(kind, key string) string {
	var b strings.Builder
	b.Grow(len(k.prefix) + len(kind) + 4 + DigestLen)
	b.WriteByte('{')
	b.WriteString(k.prefix)
	b.WriteByte(':')
	b.WriteString(kind)
	b.WriteByte(':')
	writeDigest(&b, key)
	b.WriteByte('}')
	return b.String()
}

// Fixed names one key of the layer (its overall lease set, its presence).
func (k Keys) Fixed(name string) string { return "{" + k.prefix + ":" + name + "}" }

// In names user key's state of the given kind in the slot of Fixed(name),
// so that one script can touch both.
func (k Keys) In(name, kind, key string) string {
	var b strings.Builder
	b.Grow(len(k.prefix) + len(name) + len(kind) + 5 + DigestLen)
	b.WriteByte('{')
	b.WriteString(k.prefix)
	b.WriteByte(':')
	b.WriteString(name)
	b.WriteString("}:")
	b.WriteString(kind)
	b.WriteByte(':')
	writeDigest(&b, key)
	return b.String()
}

// PresenceName is the Fixed name of the sorted set of live instances
// (Presence): "presence", not a word a lease set could be taken for.
const PresenceName = "presence"

func writeDigest(b *strings.Builder, key string) {
	sum := sha256.Sum256([]byte(key))
	var enc [DigestLen]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:])
	b.Write(enc[:])
}
