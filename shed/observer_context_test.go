package shed_test

import (
	"context"
	"testing"
	"time"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

type ctxKey struct{}

// ctxRecorder records, for each event, the value its context carried ("" for
// events that came without a context).
type ctxRecorder struct {
	kinds  []shed.EventKind
	values []string
	held   []time.Duration
}

func (r *ctxRecorder) Observe(e shed.Event) {
	r.kinds, r.values, r.held = append(r.kinds, e.Kind), append(r.values, ""), append(r.held, e.Latency)
}

func (r *ctxRecorder) ObserveContext(ctx context.Context, e shed.Event) {
	v, _ := ctx.Value(ctxKey{}).(string)
	r.kinds, r.values, r.held = append(r.kinds, e.Kind), append(r.values, v), append(r.held, e.Latency)
}

func TestChainPassesContextToContextObserver(t *testing.T) {
	clock := shedtest.NewClock(t0)
	for _, tc := range []struct {
		name string
		obs  func(*ctxRecorder, *[]shed.Event) shed.Observer
	}{
		{"direct", func(r *ctxRecorder, _ *[]shed.Event) shed.Observer { return r }},
		{"through Observers", func(r *ctxRecorder, plain *[]shed.Event) shed.Observer {
			return shed.Observers{r, shed.ObserverFunc(func(e shed.Event) { *plain = append(*plain, e) })}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &ctxRecorder{}
			var plain []shed.Event
			first, second := shedtest.NewLayer("first"), shedtest.NewLayer("second")
			c, err := shed.NewChain(shed.Config{Layers: []shed.Layer{first, second}, Observer: tc.obs(rec, &plain), Clock: clock})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.WithValue(context.Background(), ctxKey{}, "span")
			err = c.Do(ctx, shed.Request{}, func(context.Context) error {
				clock.Advance(250 * time.Millisecond)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			wantKinds := []shed.EventKind{shed.Admitted, shed.Admitted, shed.Released, shed.Released}
			wantValues := []string{"span", "span", "", ""}
			wantHeld := []time.Duration{0, 0, 250 * time.Millisecond, 250 * time.Millisecond}
			if len(rec.kinds) != len(wantKinds) {
				t.Fatalf("%d events, want %d", len(rec.kinds), len(wantKinds))
			}
			for i := range wantKinds {
				if rec.kinds[i] != wantKinds[i] || rec.values[i] != wantValues[i] || rec.held[i] != wantHeld[i] {
					t.Errorf("event %d: %v with context value %q, latency %v; want %v, %q, %v",
						i, rec.kinds[i], rec.values[i], rec.held[i], wantKinds[i], wantValues[i], wantHeld[i])
				}
			}
			if tc.name == "through Observers" && len(plain) != len(wantKinds) {
				t.Errorf("the plain observer beside it got %d events, want %d", len(plain), len(wantKinds))
			}
		})
	}
}
