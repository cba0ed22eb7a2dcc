package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/config"
)

func TestGRPCSectionErrors(t *testing.T) {
	file := []byte(`
grpc:
  key_metadata: "x api key"
  priorities:
    "payments.Charges/Create": critical
layers:
  - concurrency:
      limit: 1
`)
	_, err := config.Parse("loadshed.yaml", file, config.Options{})
	var errs config.Errors
	if !errors.As(err, &errs) || len(errs) != 2 {
		t.Fatalf("errors: %v", err)
	}
	if !strings.Contains(errs[0].Error(), "grpc.key_metadata") || !strings.Contains(errs[1].Error(), `grpc.priorities["payments.Charges/Create"]: a method name starts with "/"`) {
		t.Fatalf("errors: %v", err)
	}
}
