package storage

import "syscall"

// statfs returns the size of the file system holding dir and the bytes an
// unprivileged writer may still use (the blocks reserved for root do not
// count): blocks times the fragment size, the unit Linux counts them in.
func statfs(dir string) (total, available uint64, err error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, 0, err
	}
	unit := st.Frsize
	if unit <= 0 {
		unit = st.Bsize
	}
	return st.Blocks * uint64(unit), st.Bavail * uint64(unit), nil
}
