package testserver

import (
	"bytes"
	"sync"
)

// SyncBuffer collects output written from several goroutines (a log
// sink, a command's stderr) for a test to read while they write; unlike
// t.Log, it may be written after the test ends.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was written so far.
func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
