package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/rls"
)

// checkEnvoy checks a directory or a file of envoyproxy/ratelimit
// configuration as loadshed serve reads it.
func checkEnvoy(path string, stdout, stderr io.Writer) int {
	ds, err := rls.LoadEnvoyConfig(path)
	if err == nil {
		var s *rls.Server
		if s, err = rls.New(rls.Config{Domains: ds}); err == nil {
			s.Close()
		}
	}
	if err != nil {
		printErrors(stderr, path, err)
		return 1
	}
	names := make([]string, len(ds))
	for i, d := range ds {
		names[i] = d.Name
	}
	fmt.Fprintf(stdout, "%s: ok (envoyproxy/ratelimit domains: %s)\n", path, strings.Join(names, ", "))
	return 0
}

// printErrors prints a configuration's errors one a line (the first
// config.MaxErrorsShown of them), with their count.
func printErrors(stderr io.Writer, path string, err error) {
	var es config.Errors
	if !errors.As(err, &es) {
		fmt.Fprintln(stderr, err)
		return
	}
	fmt.Fprintln(stderr, es)
	fmt.Fprintf(stderr, "%s: %d error%s\n", path, len(es), plural(len(es)))
}
