package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/loadshed/loadshed/config"
	"github.com/loadshed/loadshed/rls"
	"github.com/loadshed/loadshed/shed"
)

// options are what the command builds files with. A service gives elastic
// layers its real headroom signal; the command stands in with a full one,
// so that such files check.
func options() config.Options {
	return config.Options{Headroom: shed.HeadroomFunc(func() float64 { return 1 })}
}

func check(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, "loadshed check: name at least one file\n", usage)
		return 2
	}
	status := 0
	for _, path := range args {
		if rls.IsEnvoyConfig(path) {
			status = max(status, checkEnvoy(path, stdout, stderr))
			continue
		}
		b, err := config.Load(path, options())
		if err != nil {
			status = 1
			printErrors(stderr, path, err)
			continue
		}
		var names []string
		for _, l := range b.Chain.Layers() {
			names = append(names, l.Name())
		}
		for _, w := range b.File.Warnings() {
			fmt.Fprintf(stderr, "warning: %v\n", w)
		}
		fmt.Fprintf(stdout, "%s: ok (layers: %s)\n", path, strings.Join(names, ", "))
		b.Close()
	}
	return status
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
