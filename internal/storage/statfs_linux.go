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
