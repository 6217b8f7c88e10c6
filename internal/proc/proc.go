// Package proc inspects local processes by PID.
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"syscall"
)

// Running reports whether pid is a live process. A zombie (exited, not yet
// reaped by its parent) is not.
func Running(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesized command name, which may itself
	// hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || (stat[i+2] != 'Z' && stat[i+2] != 'X')
}
