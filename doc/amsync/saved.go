package amsync

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// A log may hold, besides its changes, its first changes saved as
// automerge saves a document: one document chunk. A peer that has nothing
// and reads a message's changes as one (State.joins) is sent that in their
// place, then the changes since (Outgoing.Saved): automerge loads a saved
// document in one pass, several times faster than the same changes one by
// one. The log does not make it (doc/amdoc writes it from the log's
// changes); it checks that the document's heads are those of its first
// changes.

// SetSaved records doc as the log's first n changes saved as automerge
// saves a document. It refuses a document whose heads are not those of
// the log's first n changes. An older saved document (fewer changes)
// does not replace a newer one.
func (l *Log) SetSaved(n int, doc []byte) error {
	if n <= 0 || n > int(l.n) {
		return fmt.Errorf("a saved document of %d changes for a log of %d", n, l.n)
	}
	heads, err := DocumentHeads(doc)
	if err != nil {
		return err
	}
	if want := l.prefixHeads(int32(n)); !slices.Equal(heads, want) {
		return fmt.Errorf("the saved document's heads are not those of the log's first %d changes", n)
	}
	if int32(n) > l.savedLen {
		l.saved, l.savedLen = doc, int32(n)
	}
	return nil
}

// prefixHeads returns the heads of the log's first n changes, sorted:
// those none of the others depends on.
func (l *Log) prefixHeads(n int32) []Hash {
	depended := make([]bool, n)
	for i := range n {
		for _, d := range l.DepsAt(i) {
			depended[d] = true
		}
	}
	var heads []Hash
	for i := range n {
		if !depended[i] {
			heads = append(heads, l.HashAt(i))
		}
	}
	sortHashes(heads)
	return heads
}

// DocumentHeads reads the heads a document chunk names (after its actors,
// at the start of its body), sorted. The chunk must be all of doc, and
// its checksum right: a saved document damaged where it was kept is
// refused, not sent.
func DocumentHeads(doc []byte) ([]Hash, error) {
	bad := errors.New("not a document chunk")
	if len(doc) < 10 || string(doc[:4]) != string(chunkMagic) || doc[8] != 0 {
		return nil, bad
	}
	b := doc[9:]
	size, k := binary.Uvarint(b)
	if k <= 0 || size != uint64(len(b)-k) {
		return nil, bad
	}
	if sum := sha256.Sum256(doc[8:]); string(sum[:4]) != string(doc[4:8]) {
		return nil, errors.New("a document chunk whose checksum is wrong")
	}
	b = b[k:]
	actors, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, bad
	}
	b = b[k:]
	for range actors {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, bad
		}
		b = b[k+int(n):]
	}
	count, k := binary.Uvarint(b)
	if k <= 0 || count > uint64(len(b)-k)/32 {
		return nil, bad
	}
	b = b[k:]
	heads := make([]Hash, count)
	for i := range heads {
		copy(heads[i][:], b[32*i:])
	}
	sortHashes(heads)
	return heads, nil
}
