//go:build unix

package filewatch

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

func writeFile(t *testing.T, path, src string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
}

// A reader that panics on a file does not end the watch: the panic is
// reported as an error and the next change is read again.
func TestPathSurvivesAPanickingReload(t *testing.T) {
	path := t.TempDir() + "/f.yaml"
	writeFile(t, path, "a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	calls := make(chan int, 16)
	failures := make(chan error, 16)
	n := 0
	done := make(chan error, 1)
	go func() {
		done <- Path(ctx, path, func() {
			n++
			calls <- n
			panic("the reader failed")
		}, func() {}, func(err error) { failures <- err })
	}()
	for i := 0; i < 2; i++ {
		select {
		case <-calls:
		case <-ctx.Done():
			t.Fatalf("reload %d never came", i+1)
		}
		select {
		case err := <-failures:
			if !strings.Contains(err.Error(), "the reader failed") {
				t.Errorf("failure %v", err)
			}
		case <-ctx.Done():
			t.Fatal("the panic was not reported")
		}
		writeFile(t, path, fmt.Sprint("b", i))
	}
	cancel()
	if err := <-done; err != context.Canceled {
		t.Fatalf("Path returned %v", err)
	}
}
