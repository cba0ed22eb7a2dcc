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

// Keys is the one key scheme of the Redis-backed layers, under a prefix
// that holds no brace (Options.Validate checks it):
//
//	Key(kind, k)     <prefix><kind>:{<digest of k>}        a slot of its own per user key
//	Fixed(name)      {<prefix><name>}                      one key per layer and name
//	In(name, kind, k) {<prefix><name>}:<kind>:<digest of k> in Fixed(name)'s slot
//
// User keys appear only as digests, so no key a client sends can reach
// another key's state or move the Cluster hash tag. Keys that one script
// touches together share a hash tag (In and Fixed), the others spread over
// a Cluster (Key).
type Keys struct{ prefix string }

// NewKeys returns the scheme under prefix.
func NewKeys(prefix string) Keys { return Keys{prefix: prefix} }

// Prefix returns the prefix every key starts with (after a '{' for Fixed
// and In).
func (k Keys) Prefix() string { return k.prefix }

// Key names user key's state of the given kind, in a Cluster slot of its
// own.
func (k Keys) Key(kind, key string) string {
	var b strings.Builder
	b.Grow(len(k.prefix) + len(kind) + 3 + DigestLen)
	b.WriteString(k.prefix)
	b.WriteString(kind)
	b.WriteString(":{")
	writeDigest(&b, key)
	b.WriteByte('}')
	return b.String()
}

// Fixed names one key of the layer (an overall count, the instances).
func (k Keys) Fixed(name string) string { return "{" + k.prefix + name + "}" }

// In names user key's state of the given kind in the slot of Fixed(name),
// so that one script can touch both.
func (k Keys) In(name, kind, key string) string {
	var b strings.Builder
	b.Grow(len(k.prefix) + len(name) + len(kind) + 4 + DigestLen)
	b.WriteByte('{')
	b.WriteString(k.prefix)
	b.WriteString(name)
	b.WriteString("}:")
	b.WriteString(kind)
	b.WriteByte(':')
	writeDigest(&b, key)
	return b.String()
}

func writeDigest(b *strings.Builder, key string) {
	sum := sha256.Sum256([]byte(key))
	var enc [DigestLen]byte
	base64.RawURLEncoding.Encode(enc[:], sum[:])
	b.Write(enc[:])
}
