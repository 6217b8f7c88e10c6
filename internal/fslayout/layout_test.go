package fslayout

import (
	"errors"
	"strings"
	"syscall"
	"testing"
)

// TestCleanPath checks the paths TýrFS takes and the errno of each it
// refuses.
func TestCleanPath(t *testing.T) {
	for _, c := range []struct {
		in, want string
		errno    syscall.Errno
	}{
		{"/", "/", 0},
		{"/a", "/a", 0},
		{"/a/b/", "/a/b", 0},
		{"/" + strings.Repeat("n", NameBytesMax), "/" + strings.Repeat("n", NameBytesMax), 0},
		{"a/b", "", syscall.EINVAL},
		{"", "", syscall.EINVAL},
		{"//", "/", 0},
		{"///", "", syscall.EINVAL},
		{"/a//b", "", syscall.EINVAL},
		{"/a/./b", "", syscall.EINVAL},
		{"/a/..", "", syscall.EINVAL},
		{"/a\x00b", "", syscall.EINVAL},
		{"/\xff", "", syscall.EINVAL},
		{"/" + strings.Repeat("n", NameBytesMax+1), "", syscall.ENAMETOOLONG},
		{strings.Repeat("/n", PathBytesMax/2+1), "", syscall.ENAMETOOLONG},
	} {
		got, err := CleanPath(c.in)
		var errno syscall.Errno
		if err != nil && !errors.As(err, &errno) {
			t.Fatalf("CleanPath(%q): %v carries no errno", c.in, err)
		}
		if got != c.want || errno != c.errno {
			t.Errorf("CleanPath(%q) = %q, %v; want %q, %v", c.in, got, errno, c.want, c.errno)
		}
	}
}
