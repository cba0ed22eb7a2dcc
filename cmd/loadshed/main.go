// Command loadshed checks, prints and tries a loadshed configuration file.
//
//	loadshed check FILE...
//	loadshed print FILE
//	loadshed try FILE --key K --route 'GET /v1/x' [--priority sheddable] [--n 20] [--every 0s]
//	loadshed serve -config PATH [-grpc-addr A] [-http-addr A] [-redis ADDR[,ADDR]]
//
// check validates each file and lists every error with its line and
// column; it exits 1 when any file has one. print shows the effective
// configuration, defaults filled in, as tables. try builds the file's
// chain in memory (Redis stores replaced by in-memory ones) and sends it n
// requests, printing each decision with its response headers. serve runs
// Envoy's Rate Limit Service (package rls) from a loadshed file or a
// directory of envoyproxy/ratelimit files, over gRPC and POST /json.
//
// Install it with
//
//	go install github.com/loadshed/loadshed/cmd/loadshed@latest
package main

import (
	"fmt"
	"io"
	"os"
)

const usage = `usage:
  loadshed check FILE...        validate; list every error with its line and column
  loadshed print FILE           the effective configuration, defaults filled in
  loadshed try FILE --key K --route 'GET /v1/x' [--priority P] [--n 20] [--every 0s]
                                send n requests through the file's chain, in memory
  loadshed serve -config PATH   Envoy's Rate Limit Service from a loadshed file or
                                envoyproxy/ratelimit files (loadshed serve -h)
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is the command, apart from the process, for tests. It returns the
// exit status: 0 fine, 1 a file has errors, 2 a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "check":
		return check(args[1:], stdout, stderr)
	case "print":
		return printCmd(args[1:], stdout, stderr)
	case "try":
		return try(args[1:], stdout, stderr)
	case "serve":
		return serve(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "loadshed: unknown command %q\n%s", args[0], usage)
	return 2
}
