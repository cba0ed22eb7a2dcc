package redisx

import (
	"reflect"
	"testing"
)

// Every command that ran is asked NotRun, on every decision's path: no
// error must cost nothing.
func TestNotRunAllocatesNothingForNoError(t *testing.T) {
	if n := testing.AllocsPerRun(1000, func() { _ = NotRun(nil) }); n != 0 {
		t.Errorf("NotRun(nil): %v allocations, want 0", n)
	}
}

// A script's command boxes only what changes from call to call (the keys;
// the arguments come boxed), not the command's name and the script's SHA1.
// Here (the command does not escape) that leaves the slice and the key:
// boxing the SHA1 as well made it three.
func TestScriptCommandBoxesItsHeadOnce(t *testing.T) {
	s := NewScript("return 1")
	keys, args := []string{"k"}, []any{"a", "b"}
	cmd := s.cmd(bg, s.evalsha, keys, args)
	if want := []any{"evalsha", s.Hash(), 1, "k", "a", "b"}; !reflect.DeepEqual(cmd.Args(), want) {
		t.Errorf("EVALSHA's arguments %v, want %v", cmd.Args(), want)
	}
	if want := []any{"eval", "return 1", 1, "k", "a", "b"}; !reflect.DeepEqual(s.cmd(bg, s.eval, keys, args).Args(), want) {
		t.Errorf("EVAL's arguments differ from %v", want)
	}
	if n := testing.AllocsPerRun(1000, func() { _ = s.cmd(bg, s.evalsha, keys, args) }); n > 2 {
		t.Errorf("building the command: %v allocations, want at most 2", n)
	}
}
