package storage

import "syscall"

// fileSystemBytes returns the total size of the file system holding dir:
// its blocks times the fragment size, the unit Linux counts them in.
func fileSystemBytes(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	return st.Blocks * uint64(unit), nil
}

// fileSystemFree returns the bytes of the file system holding dir that an
// unprivileged writer may still use (the blocks reserved for root do not
// count).
func fileSystemFree(dir string) (uint64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, err
	}
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	return st.Bavail * uint64(unit), nil
}
