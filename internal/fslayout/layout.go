// Package fslayout is TýrFS's layout: how a POSIX-like file system is laid
// out in the blobs of one keyspace. It is deterministic and does no I/O:
// the file system's calls (package tyrfs, over the Go client) and the
// server's metadata service (internal/fsmeta) both apply these rules, so
// neither restates them.
//
// # Layout (format version 2; append-only: new fields take reserved bytes
// and a new version, old versions stay readable)
//
// The keyspace belongs to the file system: every blob in it is one of the
// two kinds below, one of the staple blobs of invariant 5, whose keys
// start with "~", "^" or "%", or a file's advisory locks (LockKey, "&"):
// never with a path's "/".
//
//   - A file or symbolic link at absolute path P ("/a/b") is the blob keyed
//     P. The blob starts with a HeaderBytes-byte header (the inode: kind,
//     mode, owner, times) followed by the file's data, so the metadata lives
//     with the first chunk, a stat is one read of the header, and a whole
//     small file is fetched by one read of one blob. A file's size is the
//     blob's size minus HeaderBytes. A symbolic link's data is its target.
//   - A directory at path P is the blob keyed P+"/" (the root, "/", is the
//     blob "/"). File keys never end in "/", since names hold no "/", so the
//     two kinds never collide, and the keys of a directory's descendants
//     all start with its key. The blob is a header, a hole up to
//     DirLogOffset (never written, so never stored), and an append-only log
//     of entry records (recordAdd, recordRemove) that, replayed in order,
//     give the directory's entries. The hole gives the header a page of
//     the store to itself: every change to a directory appends to its log
//     and writes its mtime, and the store copies a page on write, so with
//     the log right after the header (format version 1, whose directories
//     stay readable and writable, their log at HeaderBytes) the mtime
//     rewrote the log's first 64 KiB page at every change once the log
//     outgrew it. LogStart says where a directory's log starts.
//
// Invariants, kept by making every change that touches both a child and
// its parent one atomic commit (a serializable transaction where it reads
// first):
//
//  1. A name is an entry of the directory at P (by replay of its log) iff
//     exactly one of the blobs P/name (file, symlink) or P/name/ (directory)
//     exists, and the entry's kind matches it. Observers never see a child
//     without its entry, or an entry without its child.
//  2. Every directory but the root has its parent's entry (by 1), so every
//     blob is reachable from "/".
//  3. A log's records are well formed: an add for a name currently absent,
//     a remove for a name currently present. Compaction rewrites the log as
//     one add per entry (DirLog.Compacted) once removals dominate it
//     (DirLog.NeedsCompaction). The servers do it, in the background
//     (internal/server/fscompact.go): a node that coordinated a removal
//     from a large enough log reads the whole log, then commits the
//     rewrite with a read check of the version it read, so an append that
//     raced it fails the rewrite (which runs again) rather than vanish.
//     Clients never compact.
//  4. A directory's bytes between HeaderBytes and LogStart (its hole) are
//     never written: they read as zeros (DirLogOf checks it). A rename
//     copies a directory's header and log apart, and compaction truncates
//     the log to LogStart, so the hole stays a hole.
//  5. Staples (forwarding records). A rename of a file of at least
//     StapleBytesMin bytes moves no data: it writes, in its one commit,
//     a staple at the new path P (the blob P, a header alone, with
//     FlagStapled; it keeps the file's metadata), the staple's pointer
//     (the blob PointerKey(P), holding the key D of the blob with the
//     data), and marks D's header FlagMovedOut, with D's back name (the
//     blob BackKey(D), holding P). The data blob D keeps its own header
//     and the data after it, as a file's blob does; only its flags and
//     its path's meaning change: D's key is no entry (a lookup there
//     finds nothing), and when a create or rename needs that name, the
//     data is first copied to a hidden blob (HiddenKey) and the pointer
//     and back name moved to it in one commit checking D's version. The
//     servers bring a staple's data home in the background: one commit
//     writes the data into the staple's blob, clears its flags and
//     deletes pointer, data blob and back name. So: every staple has one
//     pointer, to a data blob whose back name is the staple's path; every
//     blob marked moved-out is the data blob of exactly one staple; a
//     plain file's blob has flags zero. Every change to a file carries a
//     compare-and-swap of its flags (zero), so a change meant for a plain
//     file never lands in a staple or a data blob. Staples and data blobs
//     are written in format version 3; plain blobs stay at version 2.
//  6. A directory of DirVersion counts its subdirectories at OffSubdirs:
//     the number of entries of kind directory its log replays to. Every
//     commit that adds or removes such an entry (mkdir, rmdir, a rename
//     of a directory between parents or over one) adds or subtracts one
//     there in the same commit, blind, as its log's record is appended;
//     a rename copies the count with the header. A stat reports 2 links
//     and one per subdirectory, as local file systems do (find(1) and
//     others use it to skip leaves); a directory of an earlier version
//     reports 2.
//
// A worked example: mkdir /d; create /d/x; rename /d/x /d/y; unlink /d/y.
// Blob "/d/" holds header, the hole up to DirLogOffset, add(x,file),
// remove(x), add(y,file), remove(y);
// blob "/d/x" existed between the second and third commits, "/d/y" between
// the third and fourth; replay gives no entries.
package fslayout

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/tyrstore/tyr/internal/limits"
)

// Header layout, little-endian; HeaderBytes long, reserved bytes zero.
const (
	// HeaderBytes is the size of the header at the start of every blob.
	HeaderBytes = 64

	headerMagic = "TYRF"
	// FormatVersion is the version new blobs are written in; versions
	// from formatVersionMin to FlagsVersion are read. Blobs with flags
	// (invariant 5) are written in FlagsVersion, which older readers
	// refuse rather than take a staple for an empty file.
	FormatVersion    = 2
	formatVersionMin = 1
	FlagsVersion     = 3
	// DirVersion is the version new directories are written in: their
	// header counts their subdirectories (OffSubdirs), so that they
	// report links as local file systems do (invariant 6). Directories
	// of earlier versions stay readable and report 2 links; older
	// readers refuse a version-4 directory rather than miscount it.
	DirVersion = 4
	// DirLogOffset is where a version-2 directory's log starts: a page of
	// the store (mvcc.PageBytes) after the blob's start.
	DirLogOffset = 64 << 10

	OffMagic   = 0  // 4 bytes "TYRF"
	OffVersion = 4  // u8
	OffKind    = 5  // u8 Kind
	OffFlags   = 6  // u16: FlagStapled, FlagMovedOut (version 3); zero before
	OffMode    = 8  // u32 permission bits (07777)
	OffUID     = 12 // u32
	OffGID     = 16 // u32
	OffNlink   = 20 // u32, 1 (no hard links; a directory's links are counted at OffSubdirs)
	OffAtime   = 24 // i64 ns since the epoch
	OffMtime   = 32 // i64 ns
	OffCtime   = 40 // i64 ns
	OffBtime   = 48 // i64 ns, creation
	OffRdev    = 56 // u32 device number of a character or block device
	// OffSubdirs holds a directory's subdirectories (version 4; reserved
	// before): i32, moved by one atomic add of each commit that adds or
	// removes a directory entry of kind directory.
	OffSubdirs = 60
)

// Header flags (invariant 5).
const (
	// FlagStapled marks a staple: a file whose data is in another blob,
	// named by its pointer.
	FlagStapled = 1 << 0
	// FlagMovedOut marks a staple's data blob: its key is no entry.
	FlagMovedOut = 1 << 1
	flagsKnown   = FlagStapled | FlagMovedOut
)

// Kind is what a blob holds.
type Kind uint8

// Kinds of blobs. Zero is unset.
const (
	KindFile Kind = 1 + iota
	KindDir
	KindSymlink
	// Special files hold no data: a FIFO or a socket is a name the kernel
	// gives meaning to on the machine that opens it; a device node names
	// a device of that machine (Attr.Rdev).
	KindFifo
	KindSocket
	KindChar
	KindBlock
)

// Special reports whether k is a FIFO, a socket or a device node.
func (k Kind) Special() bool { return k >= KindFifo && k <= KindBlock }

func (k Kind) String() string {
	switch k {
	case KindFile:
		return "file"
	case KindDir:
		return "dir"
	case KindSymlink:
		return "symlink"
	case KindFifo:
		return "fifo"
	case KindSocket:
		return "socket"
	case KindChar:
		return "char"
	case KindBlock:
		return "block"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Limits. Each is checked before anything is sent, and answered with the
// errno in its comment.
const (
	// NameBytesMax is the longest name in a directory (ENAMETOOLONG).
	NameBytesMax = 255
	// PathBytesMax is the longest absolute path (ENAMETOOLONG): a
	// directory's key is its path and "/", at most limits.KeyBytesMax.
	PathBytesMax = limits.KeyBytesMax - 1
	// SymlinkBytesMax is the longest symbolic link target (ENAMETOOLONG).
	SymlinkBytesMax = 4095
	// FileBytesMax is the largest file (EFBIG).
	FileBytesMax = limits.BlobBytesMax - HeaderBytes
	// MoveBytesMax bounds the bytes (headers and data of files, logs of
	// directories) one rename copies in its transaction; a larger rename
	// fails with EXDEV, which makes mv(1) copy and delete instead.
	MoveBytesMax = 8 << 20
	// MoveBlobsMax bounds the blobs (the renamed one and, for a directory,
	// all its descendants) one rename moves (EXDEV beyond it).
	MoveBlobsMax = 400
	// CompactRecordsMin is the smallest log compaction considers; a log is
	// compacted when it holds at least this many records and more than
	// twice as many records as entries.
	CompactRecordsMin = 64
)

// Attr is a file's metadata as the header stores it, with its size.
type Attr struct {
	Kind                       Kind
	Mode                       uint32 // permission bits, 07777
	UID, GID                   uint32
	Atime, Mtime, Ctime, Btime int64  // ns since the epoch
	Rdev                       uint32 // a device node's device number
	// Nlink is the node's links: 1 for a file (no hard links); for a
	// directory, 2 and one per subdirectory if LinksCounted, else 2.
	Nlink uint32
	// LinksCounted: a directory of DirVersion, which counts its
	// subdirectories (invariant 6).
	LinksCounted bool
	// Size is the file's size (data bytes after the header), the target's
	// length for a symbolic link, and the log's length for a directory.
	Size uint64
	// Version is not stored in the header: it is the version of the blob
	// holding the header, as of the read that returned these attributes
	// (0 if none did). Every commit that changes a file, its data or its
	// metadata, writes that blob at a new version above the one before
	// (unix nanoseconds, rising also across delete and re-create), so an
	// equal version means the file did not change in between.
	Version uint64
}

// EncodeHeader returns the header of a.
func EncodeHeader(a Attr) []byte {
	b := make([]byte, HeaderBytes)
	copy(b[OffMagic:], headerMagic)
	b[OffVersion] = FormatVersion
	b[OffKind] = byte(a.Kind)
	binary.LittleEndian.PutUint32(b[OffMode:], a.Mode&07777)
	binary.LittleEndian.PutUint32(b[OffUID:], a.UID)
	binary.LittleEndian.PutUint32(b[OffGID:], a.GID)
	binary.LittleEndian.PutUint32(b[OffNlink:], 1)
	PutTime(b[OffAtime:], a.Atime)
	PutTime(b[OffMtime:], a.Mtime)
	PutTime(b[OffCtime:], a.Ctime)
	PutTime(b[OffBtime:], a.Btime)
	binary.LittleEndian.PutUint32(b[OffRdev:], a.Rdev)
	if a.Kind == KindDir {
		b[OffVersion] = DirVersion
		binary.LittleEndian.PutUint32(b[OffSubdirs:], max(a.Nlink, 2)-2)
	}
	return b
}

func PutTime(b []byte, ns int64) { binary.LittleEndian.PutUint64(b, uint64(ns)) }

// ErrCorrupt marks a blob that does not hold a valid header or log.
var ErrCorrupt = fmt.Errorf("tyrfs: corrupt blob: %w", syscall.EIO)

// DecodeHeader parses the header at the start of a blob of blobSize bytes.
func DecodeHeader(key string, b []byte, blobSize uint64) (Attr, error) {
	if len(b) < HeaderBytes || blobSize < HeaderBytes || string(b[OffMagic:OffMagic+4]) != headerMagic {
		return Attr{}, fmt.Errorf("%w: %q has no header", ErrCorrupt, key)
	}
	if b[OffVersion] < formatVersionMin || b[OffVersion] > DirVersion {
		return Attr{}, fmt.Errorf("%w: %q has format version %d, want %d to %d", ErrCorrupt, key, b[OffVersion], formatVersionMin, DirVersion)
	}
	if b[OffVersion] == DirVersion && Kind(b[OffKind]) != KindDir {
		return Attr{}, fmt.Errorf("%w: %q is a %s in a directory's format version %d", ErrCorrupt, key, Kind(b[OffKind]), DirVersion)
	}
	// Flags, one at a time, on files only, exactly in FlagsVersion.
	if f := Flags(b); f&^flagsKnown != 0 || f == flagsKnown || (f != 0) != (b[OffVersion] == FlagsVersion) || f != 0 && Kind(b[OffKind]) != KindFile {
		return Attr{}, fmt.Errorf("%w: %q has flags %#x in a version-%d %s header", ErrCorrupt, key, f, b[OffVersion], Kind(b[OffKind]))
	}
	a := Attr{
		Kind:  Kind(b[OffKind]),
		Mode:  binary.LittleEndian.Uint32(b[OffMode:]) & 07777,
		UID:   binary.LittleEndian.Uint32(b[OffUID:]),
		GID:   binary.LittleEndian.Uint32(b[OffGID:]),
		Atime: int64(binary.LittleEndian.Uint64(b[OffAtime:])),
		Mtime: int64(binary.LittleEndian.Uint64(b[OffMtime:])),
		Ctime: int64(binary.LittleEndian.Uint64(b[OffCtime:])),
		Btime: int64(binary.LittleEndian.Uint64(b[OffBtime:])),
		Rdev:  binary.LittleEndian.Uint32(b[OffRdev:]),
		Nlink: 1,
	}
	if a.Kind < KindFile || a.Kind > KindBlock {
		return Attr{}, fmt.Errorf("%w: %q has kind %d", ErrCorrupt, key, a.Kind)
	}
	if (a.Kind == KindDir) != strings.HasSuffix(key, "/") {
		return Attr{}, fmt.Errorf("%w: %q holds a %s", ErrCorrupt, key, a.Kind)
	}
	start := uint64(HeaderBytes)
	if a.Kind == KindDir {
		start = LogStart(b)
		a.Nlink = 2
		if b[OffVersion] == DirVersion {
			sub := int32(binary.LittleEndian.Uint32(b[OffSubdirs:]))
			if sub < 0 {
				return Attr{}, fmt.Errorf("%w: %q counts %d subdirectories", ErrCorrupt, key, sub)
			}
			a.Nlink += uint32(sub)
			a.LinksCounted = true
		}
	}
	if blobSize < start {
		return Attr{}, fmt.Errorf("%w: %q is %d bytes, its log starts at %d", ErrCorrupt, key, blobSize, start)
	}
	a.Size = blobSize - start
	return a, nil
}

// Flags returns the flags of header h (at least HeaderBytes).
func Flags(h []byte) uint16 { return binary.LittleEndian.Uint16(h[OffFlags:]) }

// SetFlags sets the flags of header h, and the format version that holds
// them: FlagsVersion with flags, FormatVersion without.
func SetFlags(h []byte, flags uint16) {
	binary.LittleEndian.PutUint16(h[OffFlags:], flags)
	h[OffVersion] = FormatVersion
	if flags != 0 {
		h[OffVersion] = FlagsVersion
	}
}

// StapleBytesMin is the smallest file a rename staples (invariant 5)
// rather than copies. A variable so that tests can staple every file.
var StapleBytesMin uint64 = 1 << 20

// HomeBytesLimit is the largest data a server brings home in one commit
// (invariant 5): a commit's payload, less what else it carries.
const HomeBytesLimit = 12 << 20

// Keys of invariant 5, and of locks. None starts with "/", so none is a
// path.
const (
	pointerPrefix = "~"
	backPrefix    = "^"
	hiddenPrefix  = "%"
	lockPrefix    = "&"
)

// LockKey is the blob holding the advisory locks on the file at clean
// path p (package fslock's table); it exists while any are held.
func LockKey(p string) string { return lockPrefix + p }

// PointerKey is the blob holding the data blob's key of the staple at
// clean path p.
func PointerKey(p string) string { return pointerPrefix + p }

// BackKey is the blob holding the path of the staple whose data is in
// blob key.
func BackKey(key string) string { return backPrefix + key }

// HiddenKey is a data blob's key that no path has: id is random.
func HiddenKey(id uint64) string { return fmt.Sprintf("%s%016x", hiddenPrefix, id) }

// HiddenPrefix starts every HiddenKey.
const HiddenPrefix = hiddenPrefix

// IsHiddenKey reports whether key is a HiddenKey.
func IsHiddenKey(key string) bool {
	id, ok := strings.CutPrefix(key, hiddenPrefix)
	if !ok || len(id) != 16 {
		return false
	}
	_, err := strconv.ParseUint(id, 16, 64)
	return err == nil && strings.ToLower(id) == id
}

// StapleOf returns the staple's path whose pointer is key, if key is a
// pointer.
func StapleOf(key string) (string, bool) {
	p, ok := strings.CutPrefix(key, pointerPrefix)
	return p, ok && strings.HasPrefix(p, "/")
}

// CheckStaples checks invariant 5 over all the blobs of a file system:
// heads maps every key to its first bytes, at least a header for a path or
// hidden key, the whole content of a pointer or back name.
func CheckStaples(heads map[string][]byte) error {
	pointedTo := map[string]string{} // data blob -> staple
	for key, b := range heads {
		switch {
		case strings.HasPrefix(key, pointerPrefix):
			p, ok := StapleOf(key)
			if !ok {
				return fmt.Errorf("pointer %q names no path", key)
			}
			if h := heads[p]; len(h) < HeaderBytes || Flags(h) != FlagStapled {
				return fmt.Errorf("pointer %q: %q is no staple", key, p)
			}
			d := string(b)
			if other, dup := pointedTo[d]; dup {
				return fmt.Errorf("data blob %q has two staples, %q and %q", d, other, p)
			}
			pointedTo[d] = p
		case strings.HasPrefix(key, backPrefix):
			d := strings.TrimPrefix(key, backPrefix)
			if h := heads[d]; len(h) < HeaderBytes || Flags(h) != FlagMovedOut {
				return fmt.Errorf("back name %q of %q, no data blob", key, d)
			}
		case strings.HasPrefix(key, hiddenPrefix), strings.HasPrefix(key, "/"):
			if len(b) < HeaderBytes {
				return fmt.Errorf("%q has no header", key)
			}
			if strings.HasPrefix(key, hiddenPrefix) && Flags(b) != FlagMovedOut {
				return fmt.Errorf("hidden blob %q is no data blob", key)
			}
		default:
			return fmt.Errorf("key %q is no path and no blob of a staple", key)
		}
	}
	for key, b := range heads {
		if strings.HasPrefix(key, pointerPrefix) || strings.HasPrefix(key, backPrefix) {
			continue
		}
		switch Flags(b) {
		case FlagStapled:
			if _, ok := heads[PointerKey(key)]; !ok {
				return fmt.Errorf("staple %q has no pointer", key)
			}
		case FlagMovedOut:
			p, ok := pointedTo[key]
			if !ok {
				return fmt.Errorf("data blob %q is no staple's", key)
			}
			if back, ok := heads[BackKey(key)]; !ok || string(back) != p {
				return fmt.Errorf("data blob %q of staple %q has back name %q (present %v)", key, p, back, ok)
			}
		}
	}
	return nil
}

// LogStart returns where the log of the directory whose header is h (at
// least HeaderBytes) starts in its blob: DirLogOffset from format version
// 2 on, HeaderBytes before.
func LogStart(h []byte) uint64 {
	if h[OffVersion] >= 2 {
		return DirLogOffset
	}
	return HeaderBytes
}

// DirLogOf checks the header of b, the whole blob of directory key, and
// returns its log.
func DirLogOf(key string, b []byte) ([]byte, error) {
	a, err := DecodeHeader(key, b, uint64(len(b)))
	if err != nil {
		return nil, err
	}
	if a.Kind != KindDir {
		return nil, fmt.Errorf("%w: %q holds a %s", ErrCorrupt, key, a.Kind)
	}
	start := LogStart(b)
	if slices.ContainsFunc(b[HeaderBytes:start], func(c byte) bool { return c != 0 }) {
		return nil, fmt.Errorf("%w: %q has bytes written between its header and its log", ErrCorrupt, key)
	}
	return b[start:], nil
}

// Directory log records: op (u8), kind (u8), name length (u16), name.
const (
	RecordAdd    = 1
	RecordRemove = 2

	RecordHeaderBytes = 4
)

// RecordBytes is the length of a directory log record of name.
func RecordBytes(name string) int { return RecordHeaderBytes + len(name) }

func EncodeRecord(op byte, kind Kind, name string) []byte {
	b := make([]byte, RecordBytes(name))
	b[0] = op
	b[1] = byte(kind)
	binary.LittleEndian.PutUint16(b[2:], uint16(len(name)))
	copy(b[RecordHeaderBytes:], name)
	return b
}

// Entry is one directory entry.
type Entry struct {
	Name string
	Kind Kind
}

// DirLog is a replayed directory log.
type DirLog struct {
	entries map[string]Kind
	order   []string // names in the order they were added, removed ones too
	records int
}

// ReplayDir replays the log of b, the whole blob of directory key, after
// checking its header and hole (DirLogOf).
func ReplayDir(key string, b []byte) (DirLog, error) {
	log, err := DirLogOf(key, b)
	if err != nil {
		return DirLog{}, err
	}
	return ReplayLog(key, log)
}

// ReplayLog replays the log bytes (after the header) of directory key.
func ReplayLog(key string, b []byte) (DirLog, error) {
	l := DirLog{entries: map[string]Kind{}}
	for len(b) > 0 {
		if len(b) < RecordHeaderBytes {
			return DirLog{}, fmt.Errorf("%w: %q: torn record", ErrCorrupt, key)
		}
		op, kind, n := b[0], Kind(b[1]), int(binary.LittleEndian.Uint16(b[2:]))
		if len(b) < RecordHeaderBytes+n {
			return DirLog{}, fmt.Errorf("%w: %q: torn record", ErrCorrupt, key)
		}
		name := string(b[RecordHeaderBytes : RecordHeaderBytes+n])
		b = b[RecordHeaderBytes+n:]
		l.records++
		switch op {
		case RecordAdd:
			if _, ok := l.entries[name]; ok {
				return DirLog{}, fmt.Errorf("%w: %q: add of present name %q", ErrCorrupt, key, name)
			}
			l.entries[name] = kind
			l.order = append(l.order, name)
		case RecordRemove:
			if _, ok := l.entries[name]; !ok {
				return DirLog{}, fmt.Errorf("%w: %q: remove of absent name %q", ErrCorrupt, key, name)
			}
			delete(l.entries, name)
		default:
			return DirLog{}, fmt.Errorf("%w: %q: record op %d", ErrCorrupt, key, op)
		}
	}
	return l, nil
}

// List returns the entries in the order they were added.
func (l DirLog) List() []Entry {
	out := make([]Entry, 0, len(l.entries))
	seen := make(map[string]bool, len(l.entries))
	for i := len(l.order) - 1; i >= 0; i-- { // the last add of a name counts
		name := l.order[i]
		if k, ok := l.entries[name]; ok && !seen[name] {
			seen[name] = true
			out = append(out, Entry{Name: name, Kind: k})
		}
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	return out
}

// Compacted returns the log that adds the current entries, in order.
func (l DirLog) Compacted() []byte {
	var b []byte
	for _, e := range l.List() {
		b = append(b, EncodeRecord(RecordAdd, e.Kind, e.Name)...)
	}
	return b
}

// NeedsCompaction reports whether removals dominate the log.
func (l DirLog) NeedsCompaction() bool {
	return l.records >= CompactRecordsMin && l.records > 2*len(l.entries)
}

// CleanPath checks an absolute path and returns it without a trailing
// slash ("/" stays "/"). "." and ".." components are refused (EINVAL):
// callers resolve them.
func CleanPath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("tyrfs: path %q is not absolute: %w", p, syscall.EINVAL)
	}
	if p != "/" {
		p = strings.TrimSuffix(p, "/")
	}
	if len(p) > PathBytesMax {
		return "", fmt.Errorf("tyrfs: path of %d bytes, above %d: %w", len(p), PathBytesMax, syscall.ENAMETOOLONG)
	}
	if p == "/" {
		return p, nil
	}
	for rest, more := p[1:], true; more; {
		var name string
		name, rest, more = strings.Cut(rest, "/")
		if err := CheckName(name); err != nil {
			return "", err
		}
	}
	return p, nil
}

// CheckName checks one name of a directory.
func CheckName(name string) error {
	switch {
	case len(name) > NameBytesMax:
		return fmt.Errorf("tyrfs: name of %d bytes, above %d: %w", len(name), NameBytesMax, syscall.ENAMETOOLONG)
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("tyrfs: name %q: %w", name, syscall.EINVAL)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("tyrfs: name %q holds '/' or NUL: %w", name, syscall.EINVAL)
	case !utf8.ValidString(name):
		return fmt.Errorf("tyrfs: name %q is not UTF-8 (blob keys are): %w", name, syscall.EINVAL)
	}
	return nil
}

// Split returns the parent path and name of a clean path other than "/".
func Split(p string) (parent, name string) {
	i := strings.LastIndexByte(p, '/')
	if i == 0 {
		return "/", p[1:]
	}
	return p[:i], p[i+1:]
}

// Join returns parent/name for a clean parent path.
func Join(parent, name string) string {
	if parent == "/" {
		return "/" + name
	}
	return parent + "/" + name
}

// FileKey is the blob of the file or symbolic link at clean path p.
func FileKey(p string) string { return p }

// DirKey is the blob of the directory at clean path p.
func DirKey(p string) string {
	if p == "/" {
		return "/"
	}
	return p + "/"
}

// KeyOf is the blob of p for kind k.
func KeyOf(p string, k Kind) string {
	if k == KindDir {
		return DirKey(p)
	}
	return FileKey(p)
}

// Len returns the number of entries.
func (l DirLog) Len() int { return len(l.entries) }

// Ancestors returns the keys of the directories above clean path p, from
// the root down: "/" and "/a/" for "/a/b"; none for "/".
func Ancestors(p string) []string {
	if p == "/" {
		return nil
	}
	out := []string{"/"}
	for i := 1; i < len(p); i++ {
		if p[i] == '/' {
			out = append(out, p[:i+1])
		}
	}
	return out
}
