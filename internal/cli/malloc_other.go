//go:build !linux || !cgo

package cli

// tuneMalloc does nothing without glibc's malloc (or without cgo, where
// Pebble's memory is in the Go heap).
func tuneMalloc() {}
