package fleet

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/internal/redisx"
	"github.com/loadshed/loadshed/shed"
)

// store is where instances meet: one call publishes this instance's counts
// and returns the fleet's. The Redis store is the real one; tests put a
// fake in its place to drive the layer with a manual clock.
type store interface {
	// sync publishes counts (units in flight by Priority.Index) for ttl, or
	// removes this instance's entry when ttl is 0, and returns the totals
	// of every live entry, this one included.
	sync(ctx context.Context, counts [shed.NumPriorities]int64, ttl time.Duration) (reading, error)
}

// reading is what one tick learned.
type reading struct {
	totals   [shed.NumPriorities]int64 // units in flight fleet-wide, by Priority.Index
	live     int                       // live instances, this one included
	collided bool                      // another instance published under this id
	at       time.Time                 // the Redis server's clock
}

//go:embed lua/sync.lua
var syncLua string

var syncScript = redisx.NewScript(syncLua)

// redisStore keeps the fleet's entries in three keys sharing one hash tag,
// so that the one script per tick runs on Redis Cluster too. The script is
// safe to run twice (go-redis retries a command whose connection broke):
// a second run replaces the entry with the same counts.
type redisStore struct {
	client redis.UniversalClient
	keys   []string
	id     string
	nonce  string
}

func newRedisStore(c redis.UniversalClient, prefix, id, nonce string) *redisStore {
	tag := redisx.NewKeys(prefix).Fixed("usage")
	return &redisStore{client: c, id: id, nonce: nonce,
		keys: []string{tag + ":entries", tag + ":expiry", tag + ":totals"}}
}

func (r *redisStore) sync(ctx context.Context, counts [shed.NumPriorities]int64, ttl time.Duration) (reading, error) {
	ms := int64(0)
	if ttl > 0 {
		ms = max(1, ttl.Milliseconds())
	}
	args := []any{r.id, ms, r.nonce, counts[0], counts[1], counts[2], counts[3]}
	var v []any
	var err error
	for attempt := 0; ; attempt++ {
		// RunOnce, retried here: see redisx.Again.
		v, err = syncScript.RunOnce(ctx, r.client, r.keys, args...).Slice()
		if !redisx.Again(ctx, err, attempt) {
			break
		}
	}
	if err != nil {
		if redisx.IsOutage(err) {
			// On a Cluster: a dead master sends no MOVED, so without this the
			// client would keep sending the fleet's slot to it until its next
			// periodic reload (a minute by default).
			redisx.Reload(r.client)
		}
		return reading{}, err
	}
	return parseReading(v)
}

func parseReading(v []any) (reading, error) {
	if len(v) != 3+shed.NumPriorities {
		return reading{}, fmt.Errorf("fleet: sync script answered %d values, want %d", len(v), 3+shed.NumPriorities)
	}
	var n [3 + shed.NumPriorities]int64
	for i, x := range v {
		switch x := x.(type) {
		case int64:
			n[i] = x
		case string:
			var err error
			if n[i], err = strconv.ParseInt(x, 10, 64); err != nil {
				return reading{}, fmt.Errorf("fleet: sync script answered %q at %d", x, i)
			}
		default:
			return reading{}, fmt.Errorf("fleet: sync script answered a %T at %d", x, i)
		}
	}
	r := reading{live: int(n[1]), collided: n[2] != 0, at: time.UnixMilli(n[0])}
	for i := range r.totals {
		r.totals[i] = max(0, n[3+i])
	}
	return r, nil
}
