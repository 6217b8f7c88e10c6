// Package tyrfs is TýrFS's native interface: a POSIX-like file system in
// the blobs of one keyspace, over the Go client. The mount (tyr mount)
// calls it, and programs may call it directly to skip FUSE; Fetch opens
// and reads a file in one request. The layout, its limits and invariants
// are internal/fslayout's.
package tyrfs

import "github.com/tyrstore/tyr/internal/fslayout"

// Kind is what a blob holds.
type Kind = fslayout.Kind

// Kinds of files.
const (
	KindFile    = fslayout.KindFile
	KindDir     = fslayout.KindDir
	KindSymlink = fslayout.KindSymlink
	KindFifo    = fslayout.KindFifo
	KindSocket  = fslayout.KindSocket
	KindChar    = fslayout.KindChar
	KindBlock   = fslayout.KindBlock
)

// Attr is a file's metadata, with its size.
type Attr = fslayout.Attr

// Entry is one directory entry.
type Entry = fslayout.Entry

// Limits; see internal/fslayout for the errno each is answered with.
const (
	HeaderBytes     = fslayout.HeaderBytes
	NameBytesMax    = fslayout.NameBytesMax
	PathBytesMax    = fslayout.PathBytesMax
	SymlinkBytesMax = fslayout.SymlinkBytesMax
	FileBytesMax    = fslayout.FileBytesMax
	MoveBytesMax    = fslayout.MoveBytesMax
	MoveBlobsMax    = fslayout.MoveBlobsMax
)

// ErrCorrupt marks a blob that does not hold a valid header or log.
var ErrCorrupt = fslayout.ErrCorrupt
