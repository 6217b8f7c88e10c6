//go:build !linux

package storage

import "syscall"

// fileSystemBytes returns the total size of the file system holding dir:
// its blocks times the block size.
func fileSystemBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Blocks * uint64(st.Bsize), nil
}

// fileSystemFree returns the bytes of the file system holding dir that an
// unprivileged writer may still use.
func fileSystemFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	return st.Bavail * uint64(st.Bsize), nil
}
