// Package pinned runs a benchmark tool's server as a child process of the
// tool's own binary, on a CPU of its own with GOMAXPROCS=1, so that what
// the tool measures of the server (its latency, its CPU time) does not mix
// with the client's. The child is told what to serve by an environment
// variable, serves with Serve, and prints its address for Start to read.
package pinned

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strconv"
)

// Taskset returns taskset's path, or "" when there is none or the machine
// has fewer than two CPUs: nothing can be pinned apart then.
func Taskset() string {
	path, err := exec.LookPath("taskset")
	if err != nil || runtime.NumCPU() < 2 {
		return ""
	}
	return path
}

// Pin pins every thread of this process to cpu.
func Pin(taskset string, cpu int) error {
	if taskset == "" {
		return errors.New("no taskset")
	}
	if err := exec.Command(taskset, "-a", "-p", "-c", strconv.Itoa(cpu), strconv.Itoa(os.Getpid())).Run(); err != nil {
		return fmt.Errorf("pinning this process to CPU %d: %w", cpu, err)
	}
	return nil
}

// Server is this binary started again as a server.
type Server struct {
	Addr string // the loopback address it listens on
	Pid  int
	cmd  *exec.Cmd
}

// Start runs this binary again with env (KEY=value) and GOMAXPROCS=1, on
// cpu unless taskset is "", and reads the address it prints (Serve).
func Start(taskset string, cpu int, env string) (*Server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self)
	if taskset != "" {
		cmd = exec.Command(taskset, "-c", strconv.Itoa(cpu), self)
	}
	cmd.Env = append(os.Environ(), env, "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{Pid: cmd.Process.Pid, cmd: cmd}
	if _, err := fmt.Fscanln(out, &s.Addr); err != nil {
		s.Stop()
		return nil, fmt.Errorf("reading the server's address: %w", err)
	}
	return s, nil
}

// Stop kills the server and waits for it.
func (s *Server) Stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
}

// Child is the server's side of Start: in a process Start began with key
// set, it calls serve with key's value and exits, 1 if serve failed (its
// error printed as name's); in the tool's own process it returns at once.
func Child(name, key string, serve func(value string) error) {
	v := os.Getenv(key)
	if v == "" {
		return
	}
	if err := serve(v); err != nil {
		fmt.Fprintf(os.Stderr, "%s server: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// Serve listens on a free loopback port, prints its address for Start,
// and serves h.
func Serve(h http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Println(ln.Addr())
	return http.Serve(ln, h)
}
