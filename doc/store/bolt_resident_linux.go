package store

import (
	"syscall"

	bbolt "go.etcd.io/bbolt"
)

// dropResident lets go of the pages of the file that bbolt's mapping
// holds in this process: a load copies what it reads out of the mapping,
// and a write reads the tree's pages through it, so after either the
// pages are of no more use here but would stay counted in the node's
// resident memory (about 76 bytes a typed change, for a document loaded
// or written whole) until the kernel needed them. They stay in the page
// cache, and a later read maps them again from there. tx keeps the
// mapping where it is (bbolt moves it only when no transaction is open);
// its Size is the part of the file the mapping covers.
func dropResident(tx *bbolt.Tx) {
	info := tx.DB().Info()
	size := uintptr(tx.Size())
	if size == 0 {
		return
	}
	// A failure leaves the pages resident, which costs memory, not
	// correctness.
	syscall.Syscall(syscall.SYS_MADVISE, info.Data, size, syscall.MADV_DONTNEED)
}
