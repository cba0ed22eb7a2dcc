package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

func TestFairnessWeightsFromTheFile(t *testing.T) {
	const y = `
layers:
  - concurrency:
      limit: 8
      action: queue
      queue: {max_length: 16, max_wait: 100ms}
      fairness:
        weights: {gold: 4, silver: 2}
        default_weight: 0.5
  - worker:
      fairness: {off: true}
`
	f, err := Parse("fair.yaml", []byte(y), Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := f.Layers[0].Concurrency.Fairness.build()
	if c.Off || c.Weight == nil {
		t.Fatalf("concurrency fairness %+v: want on, with weights", c)
	}
	for key, want := range map[string]float64{"gold": 4, "silver": 2, "anyone": 0.5} {
		if got := c.Weight(shed.Request{Key: key}); got != want {
			t.Errorf("weight of %q: %v, want %v", key, got, want)
		}
	}
	w := f.Layers[1].Worker.Fairness.build()
	if !w.Off || w.Weight != nil {
		t.Fatalf("worker fairness %+v: want off, no weights", w)
	}
	b, err := Build(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
}

func TestFairnessRefusesBadWeights(t *testing.T) {
	const y = `
layers:
  - worker:
      fairness:
        weights: {gold: 0, lead: -1}
        default_weight: -2
`
	_, err := Parse("fair.yaml", []byte(y), Options{})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("Parse: %v, want errors", err)
	}
	got := err.Error()
	for _, want := range []string{"fairness.default_weight", "fairness.weights.gold", "fairness.weights.lead"} {
		if !strings.Contains(got, want) {
			t.Errorf("errors %q do not name %s", got, want)
		}
	}
}
