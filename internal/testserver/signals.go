package testserver

import (
	"errors"
	"syscall"
)

// Pause stops the server process with SIGSTOP: it keeps its sockets and
// state but answers nothing, as a long GC pause or a stalled disk would make
// it. Kill still works on a paused server.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT.
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("testserver: server is not running")
	}
	return s.cmd.Process.Signal(sig)
}
