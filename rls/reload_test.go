package rls

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
)

func TestReloadKeepsCountsAndRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}\n  - {key: b, rate_limit: {unit: minute, requests_per_unit: 3}}\n")
	ds, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := testServer(t, Config{Domains: ds})
	remaining := func(key string) (pb.RateLimitResponse_Code, uint32, uint32) {
		st := ask(t, s, "d", desc(key+"=x")).Statuses[0]
		return st.Code, st.LimitRemaining, st.GetCurrentLimit().GetRequestsPerUnit()
	}
	remaining("a")
	remaining("b")

	// b's limit changes; a's does not, and keeps its count. A new domain
	// appears.
	write("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}\n  - {key: b, rate_limit: {unit: minute, requests_per_unit: 10}}\n")
	if err := s.ReloadFrom(file); err != nil {
		t.Fatal(err)
	}
	if _, rem, _ := remaining("a"); rem != 1 {
		t.Fatalf("a after the reload: %d remaining, want 1 (its count kept)", rem)
	}
	if _, rem, lim := remaining("b"); rem != 9 || lim != 10 {
		t.Fatalf("b after the reload: %d of %d remaining, want 9 of 10 (a new limit starts afresh)", rem, lim)
	}

	// A bad file is refused: the running rules keep serving.
	write("domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: fortnight, requests_per_unit: 3}}\n")
	if err := s.ReloadFrom(file); err == nil {
		t.Fatal("a bad file was applied")
	}
	if _, rem, lim := remaining("a"); rem != 0 || lim != 3 {
		t.Fatalf("a after a refused reload: %d of %d, want 0 of 3", rem, lim)
	}
	if c, _, _ := remaining("a"); c != pb.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("a past its limit: %v", c)
	}
	if applied, refused := s.ReloadStats(); applied != 1 || refused != 1 {
		t.Fatalf("stats %d applied, %d refused; want 1 and 1", applied, refused)
	}

	// Removing a domain answers it as unknown.
	write("domain: e\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: 3}}\n")
	if err := s.ReloadFrom(file); err != nil {
		t.Fatal(err)
	}
	if st := ask(t, s, "d", desc("a=x")).Statuses[0]; st.CurrentLimit != nil || st.Code != pb.RateLimitResponse_OK {
		t.Fatalf("a removed domain: %v", st)
	}
}

func TestWatchReadsAChangeMadeBeforeItBegan(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rules.yaml")
	write := func(n int) {
		t.Helper()
		if err := os.WriteFile(file, fmt.Appendf(nil, "domain: d\ndescriptors:\n  - {key: a, rate_limit: {unit: minute, requests_per_unit: %d}}\n", n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(3)
	ds, err := Load(file)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := testServer(t, Config{Domains: ds})
	// What Watch reads when the file is as New had it is skipped, and not
	// counted as a reload; SIGHUP's ReloadFrom always reloads.
	if err := s.reloadFrom(file, false); err != nil {
		t.Fatal(err)
	}
	if a, r := s.ReloadStats(); a != 0 || r != 0 {
		t.Fatalf("an unchanged file: %d applied, %d refused; want none", a, r)
	}
	// After the load, before the watch: no event tells of it.
	write(7)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Watch(ctx, file) }()
	for a, _ := s.ReloadStats(); a != 1; a, _ = s.ReloadStats() {
		if ctx.Err() != nil {
			t.Fatal("the change made before Watch began was never read")
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if lim := ask(t, s, "d", desc("a=x")).Statuses[0].GetCurrentLimit().GetRequestsPerUnit(); lim != 7 {
		t.Errorf("limit %d after the watch read the change, want 7", lim)
	}
}

// The file that made the YAML library panic is refused with a position.
func TestParseEnvoyConfigRefusesAFileThatPanicsTheParser(t *testing.T) {
	data, err := os.ReadFile("testdata/hostile/crash.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, errs := ParseEnvoyConfig("crash.yaml", data)
	if len(errs) == 0 {
		t.Fatal("accepted")
	}
	for _, e := range errs {
		if e.File != "crash.yaml" || e.Line == 0 || e.Column == 0 {
			t.Errorf("error without a position: %v", e)
		}
	}
	if _, err := Load(writeTemp(t, "crash.yaml", data)); err == nil {
		t.Error("Load accepted it")
	}
}

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
