package layerkit

import (
	"sync"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

type guardReleaser struct{}

func (guardReleaser) Release(*shed.Lease, shed.Outcome) {}

func TestGuardPoolClaimsEachGrantOnce(t *testing.T) {
	var p GuardPool[int]
	// A pool may drop a guard rather than reuse it (sync.Pool does, at
	// random, under the race detector): try until one is reused.
	for i := 0; i < 1000; i++ {
		a := shed.NewLease(guardReleaser{})
		p.Issue(&a, 7)
		copyOfA := a
		if v, ok := p.Claim(&a); !ok || v != 7 {
			t.Fatalf("first claim = %d, %v; want 7, true", v, ok)
		}
		if _, ok := p.Claim(&copyOfA); ok {
			t.Fatal("a copy claimed a grant already claimed")
		}
		b := shed.NewLease(guardReleaser{})
		p.Issue(&b, i)
		reused := b.Ref == a.Ref
		if _, ok := p.Claim(&copyOfA); ok {
			t.Fatalf("an old copy claimed a later grant (guard reused: %v)", reused)
		}
		if v, ok := p.Claim(&b); !ok || v != i {
			t.Fatalf("later grant's claim = %d, %v; want %d, true", v, ok, i)
		}
		if reused {
			return
		}
	}
	t.Fatal("no guard was ever reused")
}

func TestGuardPoolRefusesLeasesItDidNotIssue(t *testing.T) {
	var p, other GuardPool[int]
	var q GuardPool[string]
	l := shed.NewLease(guardReleaser{})
	other.Issue(&l, 1)
	if _, ok := p.Claim(&l); ok {
		t.Fatal("claimed another pool's lease")
	}
	if _, ok := q.Claim(&l); ok {
		t.Fatal("claimed a lease of another type")
	}
	var zero shed.Lease
	if _, ok := p.Claim(&zero); ok {
		t.Fatal("claimed a zero lease")
	}
	if _, ok := other.Claim(&l); !ok {
		t.Fatal("the issuing pool could not claim its lease")
	}
}

// Many grants held at once: every one is claimed exactly once, with its
// own value.
func TestGuardPoolHoldsManyGrants(t *testing.T) {
	var p GuardPool[int]
	const n = 5000
	leases := make([]shed.Lease, n)
	for i := range leases {
		leases[i] = shed.NewLease(guardReleaser{})
		p.Issue(&leases[i], i)
	}
	for i := range leases {
		if v, ok := p.Claim(&leases[i]); !ok || v != i {
			t.Fatalf("claim %d = %d, %v", i, v, ok)
		}
	}
	for i := range leases {
		if _, ok := p.Claim(&leases[i]); ok {
			t.Fatalf("lease %d claimed twice", i)
		}
	}
}

func TestGuardPoolConcurrentCopies(t *testing.T) {
	var p GuardPool[*int]
	const workers, rounds = 8, 2000
	var wg sync.WaitGroup
	claims := make([]int, workers)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				v := new(int)
				l := shed.NewLease(guardReleaser{})
				p.Issue(&l, v)
				c := l
				var inner sync.WaitGroup
				got := make([]bool, 2)
				for j, lease := range []*shed.Lease{&l, &c} {
					inner.Add(1)
					go func() {
						defer inner.Done()
						var pv *int
						pv, got[j] = p.Claim(lease)
						if got[j] && pv != v {
							t.Error("claimed another grant's value")
						}
					}()
				}
				inner.Wait()
				if got[0] == got[1] {
					t.Errorf("claims of a lease and its copy = %v; want exactly one", got)
					return
				}
				claims[w]++
			}
		}()
	}
	wg.Wait()
	for w, n := range claims {
		if n != rounds {
			t.Errorf("worker %d: %d grants claimed once, want %d", w, n, rounds)
		}
	}
}

func BenchmarkGuardPool(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		var p GuardPool[*int]
		v := new(int)
		l := shed.NewLease(guardReleaser{})
		b.ReportAllocs()
		for b.Loop() {
			p.Issue(&l, v)
			p.Claim(&l)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		var p GuardPool[*int]
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			v := new(int)
			l := shed.NewLease(guardReleaser{})
			for pb.Next() {
				p.Issue(&l, v)
				p.Claim(&l)
			}
		})
	})
}
