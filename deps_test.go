package loadshed_test

import (
	"os/exec"
	"strings"
	"testing"
)

// grpcModule is what a service speaking only HTTP should not link.
const grpcModule = "google.golang.org/grpc"

// deps lists the packages pkgs import, directly or not, outside the
// standard library.
func deps(t *testing.T, pkgs ...string) []string {
	t.Helper()
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list dependencies with")
	}
	args := append([]string{"list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}"}, pkgs...)
	out, err := exec.Command(goCmd, args...).Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	return strings.Fields(string(out))
}

func linksGRPC(list []string) bool {
	for _, p := range list {
		if p == grpcModule || strings.HasPrefix(p, grpcModule+"/") {
			return true
		}
	}
	return false
}

// TestHTTPServicesDoNotLinkGRPC: an HTTP service configured by a file,
// and a client speaking only HTTP, link no gRPC; the gRPC parts live in
// packages of their own (shedgrpc, config/configgrpc,
// shedclient/shedclientgrpc).
func TestHTTPServicesDoNotLinkGRPC(t *testing.T) {
	for _, set := range [][]string{
		{"./shedhttp", "./config", "./ratelimit", "./concurrency", "./worker"},
		{"./shedclient"},
	} {
		list := deps(t, set...)
		if linksGRPC(list) {
			t.Errorf("%s link %s (%d packages outside the standard library)", strings.Join(set, " "), grpcModule, len(list))
		} else {
			t.Logf("%s: %d packages outside the standard library, no gRPC", strings.Join(set, " "), len(list))
		}
	}
	// The check sees gRPC where it is.
	for _, pkg := range []string{"./shedgrpc", "./config/configgrpc", "./shedclient/shedclientgrpc"} {
		if !linksGRPC(deps(t, pkg)) {
			t.Errorf("%s does not link %s: the check cannot see it", pkg, grpcModule)
		}
	}
}
