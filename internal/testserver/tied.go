package testserver

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// StartTied starts cmd as cmd.Start does, tied to the test process: the
// kernel sends it SIGKILL when the test process ends, however it ends (a
// test binary killed on a timeout, or by its user), so no server or mount
// of a test outlives it.
//
// The kernel's parent-death signal (Pdeathsig) follows the thread that
// forked the child, not the process, and Go's threads come and go (the
// netns tests end theirs on purpose). So every tied child is forked from
// one thread, locked to a goroutine that never returns, which lives as
// long as the process.
func StartTied(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	done := make(chan error, 1)
	spawner() <- spawn{cmd: cmd, done: done}
	return <-done
}

type spawn struct {
	cmd  *exec.Cmd
	done chan<- error
}

var spawner = sync.OnceValue(func() chan<- spawn {
	ch := make(chan spawn)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread lives on
		for s := range ch {
			s.done <- s.cmd.Start()
		}
	}()
	return ch
})
