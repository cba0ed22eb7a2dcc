package redisx

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/loadshed/loadshed/shed"
)

// DefaultPresenceEvery is how often an instance refreshes its presence; a
// presence lasts three times as long, so an instance that stops (or loses
// Redis) drops out of the count within 3s.
const DefaultPresenceEvery = time.Second

//go:embed lua/presence.lua
var presenceLua string

var presenceScript = NewScript(presenceLua)

// Presence counts the live instances of a namespace: each instance keeps a
// member of one sorted set (Keys.Fixed(PresenceName)) alive by refreshing it
// in the background, and reads the count of live members on each refresh.
// A layer uses Count for its outage share (Share) when ExpectedInstances is
// unset.
//
// The count lags: an instance that stopped counts for up to 3 × every (the
// share is then smaller than it could be: safe), and one that started
// within the last refresh interval, or during an outage, is not counted by
// the others (the fleet may then admit up to the new instances' shares
// above the limit). An instance that never reached Redis has no count and
// uses 1.
type Presence struct {
	client redis.UniversalClient
	clock  shed.Clock
	key    string
	id     string
	every  time.Duration
	ttlArg string

	count atomic.Int64

	mu     sync.Mutex
	timer  shed.Timer
	refs   int
	closed bool
	// ticking counts the refreshes under way, which the last leave waits
	// for: one that landed after the member's removal would bring it back
	// for 3 × every, and one still running after Close would use a client
	// its owner may be closing.
	ticking sync.WaitGroup
}

var presences struct {
	mu sync.Mutex
	m  map[presenceKey]*Presence
}

type presenceKey struct {
	client redis.UniversalClient
	key    string
}

// JoinPresence returns the presence of this process in the set key on
// client, refreshed every every (DefaultPresenceEvery when 0) from first
// use, on the system clock (presence is wall time in Redis, whatever clock
// the layer decides with), and shared by every layer that joins the same
// set, so that the process counts once. The layer calls leave once, on
// Close; the last leave waits for a refresh under way, then removes the
// member, so that once it returns the presence no longer uses client.
func JoinPresence(client redis.UniversalClient, key string, every time.Duration) (p *Presence, leave func()) {
	clock := shed.SystemClock
	if every <= 0 {
		every = DefaultPresenceEvery
	}
	shared := reflect.TypeOf(client).Comparable()
	k := presenceKey{client, key}
	presences.mu.Lock()
	if shared && presences.m != nil {
		p = presences.m[k]
	}
	if p == nil {
		p = newPresence(client, clock, key, every)
		if shared {
			if presences.m == nil {
				presences.m = make(map[presenceKey]*Presence)
			}
			presences.m[k] = p
		}
	}
	p.mu.Lock()
	p.refs++
	p.mu.Unlock()
	presences.mu.Unlock()
	var once sync.Once
	return p, func() {
		once.Do(func() {
			presences.mu.Lock()
			p.mu.Lock()
			p.refs--
			last := p.refs == 0
			p.mu.Unlock()
			if last && presences.m[k] == p {
				delete(presences.m, k)
			}
			presences.mu.Unlock()
			if last {
				p.stop()
			}
		})
	}
}

func newPresence(client redis.UniversalClient, clock shed.Clock, key string, every time.Duration) *Presence {
	var id [8]byte
	_, _ = rand.Read(id[:])
	p := &Presence{client: client, clock: clock, key: key, id: hex.EncodeToString(id[:]), every: every,
		ttlArg: strconv.FormatInt(max(3*every.Milliseconds(), 1), 10)}
	p.mu.Lock()
	p.timer = clock.AfterFunc(0, p.tick)
	p.mu.Unlock()
	return p
}

// Count returns the live instances last counted, this one included; 0
// until Redis first answered.
func (p *Presence) Count() int { return int(p.count.Load()) }

// ID returns this instance's member in the set.
func (p *Presence) ID() string { return p.id }

// Refresh refreshes this instance's presence now and returns the count.
func (p *Presence) Refresh(ctx context.Context) (int, error) {
	n, err := presenceScript.Run(ctx, p.client, []string{p.key}, p.id, p.ttlArg, "1").Int64()
	if err != nil {
		return 0, err
	}
	p.count.Store(n)
	return int(n), nil
}

func (p *Presence) tick() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	// Added under mu, before stop can mark the presence closed, so that
	// stop's Wait sees it.
	p.ticking.Add(1)
	p.mu.Unlock()
	defer p.ticking.Done()
	ctx, cancel := context.WithTimeout(context.Background(), max(p.every/2, DefaultTimeout))
	_, _ = p.Refresh(ctx)
	cancel()
	p.mu.Lock()
	if !p.closed {
		p.timer = p.clock.AfterFunc(p.every, p.tick)
	}
	p.mu.Unlock()
}

func (p *Presence) stop() {
	p.mu.Lock()
	p.closed = true
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	p.ticking.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), max(p.every/2, DefaultTimeout))
	defer cancel()
	_ = presenceScript.Run(ctx, p.client, []string{p.key}, p.id, p.ttlArg, "0").Err()
}
