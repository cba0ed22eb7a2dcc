package shed_test

import (
	"context"
	"testing"

	"github.com/loadshed/loadshed/shed"
	"github.com/loadshed/loadshed/shed/shedtest"
)

// closeLayer records the order its Close was called in.
type closeLayer struct {
	*shedtest.Layer
	order *[]string
	err   error
}

func (l closeLayer) Close() error { *l.order = append(*l.order, l.Name()); return l.err }

// Chain.Close closes every layer with a Close method, the last first,
// once, and names the layer whose Close failed.
func TestChainCloseClosesEveryLayerOnce(t *testing.T) {
	var order []string
	boom := context.DeadlineExceeded
	chain, err := shed.NewChain(shed.Config{Layers: []shed.Layer{
		closeLayer{shedtest.NewLayer("a"), &order, nil},
		shedtest.NewLayer("no-close"),
		closeLayer{shedtest.NewLayer("b"), &order, boom},
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = chain.Close()
	if want := "shed: closing layer b: " + boom.Error(); err == nil || err.Error() != want {
		t.Errorf("Close: %v, want %q", err, want)
	}
	_ = chain.Close()
	if len(order) != 2 || order[0] != "b" || order[1] != "a" {
		t.Errorf("closed %v, want [b a] once each", order)
	}
}
