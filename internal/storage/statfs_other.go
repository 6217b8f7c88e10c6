//go:build !linux

package storage

import "syscall"

// fileSystemBytes returns the total size of the file system holding dir.
func fileSystemBytes(dir string) (uint64, error) {
	total, _, err := statfs(dir)
	return total, err
}

// fileSystemFree returns the bytes of the file system holding dir that an
// unprivileged writer may still use.
func fileSystemFree(dir string) (uint64, error) {
	_, free, err := statfs(dir)
	return free, err
}

// statfs returns the size of the file system holding dir and its bytes
// available: blocks times the block size.
func statfs(dir string) (total, available uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}
