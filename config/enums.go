package config

import (
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/loadshed/loadshed/concurrency"
	"github.com/loadshed/loadshed/ratelimit"
	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shedhttp"
)

// Unit is a rate limit's period, as Lyft's configuration names it.
type Unit uint8

// The units. The zero value is unset.
const (
	Second Unit = iota + 1
	Minute
	Hour
	Day
)

var unitNames = [...]string{"", "second", "minute", "hour", "day"}
var unitPeriods = [...]time.Duration{0, time.Second, time.Minute, time.Hour, 24 * time.Hour}

// String returns the unit's word.
func (u Unit) String() string {
	if int(u) < len(unitNames) {
		return unitNames[u]
	}
	return fmt.Sprintf("unit(%d)", uint8(u))
}

// Period returns the unit's length, 0 for an unset or unknown unit.
func (u Unit) Period() time.Duration {
	if int(u) < len(unitPeriods) {
		return unitPeriods[u]
	}
	return 0
}

// Store says where a layer keeps its counts.
type Store uint8

// The stores. The zero value is MemoryStore.
const (
	// MemoryStore keeps counts in this process.
	MemoryStore Store = iota
	// RedisStore shares counts through the redis section's server.
	RedisStore
)

// String returns "memory" or "redis".
func (s Store) String() string {
	switch s {
	case MemoryStore:
		return "memory"
	case RedisStore:
		return "redis"
	}
	return fmt.Sprintf("store(%d)", uint8(s))
}

// KeySource says where a request's key comes from.
type KeySource uint8

// The key sources. The zero value is ClientIP.
const (
	// ClientIP keys on the client's address (through trusted proxies).
	ClientIP KeySource = iota
	// Header keys on one header (Key.Header).
	Header
	// Bearer keys on the Authorization bearer token.
	Bearer
)

// String returns "client-ip", "header" or "bearer".
func (k KeySource) String() string {
	switch k {
	case ClientIP:
		return "client-ip"
	case Header:
		return "header"
	case Bearer:
		return "bearer"
	}
	return fmt.Sprintf("key-source(%d)", uint8(k))
}

// enum is a type the file spells as one of a few words.
type enum struct {
	words  []string
	values []reflect.Value
}

func (e *enum) parse(s string) (reflect.Value, bool) {
	w := strings.ToLower(strings.TrimSpace(s))
	for i, n := range e.words {
		if w == n {
			return e.values[i], true
		}
	}
	return reflect.Value{}, false
}

func enumOf[T fmt.Stringer](values ...T) *enum {
	e := &enum{}
	for _, v := range values {
		e.words = append(e.words, v.String())
		e.values = append(e.values, reflect.ValueOf(v))
	}
	return e
}

// enums are the word-valued types of the schema, with their words in the
// order the errors list them.
var enums = map[reflect.Type]*enum{
	reflect.TypeFor[shed.Priority]():           enumOf(shed.Critical, shed.Default, shed.Sheddable, shed.TestMode),
	reflect.TypeFor[shed.Mode]():               enumOf(shed.Hard, shed.Soft, shed.Elastic),
	reflect.TypeFor[shed.Action]():             enumOf(shed.Reject, shed.Queue),
	reflect.TypeFor[shedhttp.KeyErrorPolicy](): enumOf(shedhttp.KeyFallbackClientIP, shedhttp.KeyShared, shedhttp.KeyReject),
	reflect.TypeFor[ratelimit.Algorithm]():     enumOf(ratelimit.TokenBucket, ratelimit.LeakyBucket, ratelimit.FixedWindow, ratelimit.SlidingLog, ratelimit.SlidingWindow),
	reflect.TypeFor[concurrency.KeyBy]():       enumOf(concurrency.KeyByClient, concurrency.KeyByRoute),
	reflect.TypeFor[Unit]():                    enumOf(Second, Minute, Hour, Day),
	reflect.TypeFor[Store]():                   enumOf(MemoryStore, RedisStore),
	reflect.TypeFor[KeySource]():               enumOf(ClientIP, Header, Bearer),
}

var (
	typePriority = reflect.TypeFor[shed.Priority]()
	typeUnit     = reflect.TypeFor[Unit]()
)
