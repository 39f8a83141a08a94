//go:build !linux

package store

import bbolt "go.etcd.io/bbolt"

// dropResident does nothing where madvise is not used.
func dropResident(*bbolt.Tx) {}
