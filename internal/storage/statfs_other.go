//go:build !linux

package storage

import "syscall"

// statfs returns the size of the file system holding dir and the bytes an
// unprivileged writer may still use: blocks times the block size.
func statfs(dir string) (total, available uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}
