package doc

import (
	"fmt"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/guard"
)

// A room holds its document as a change log (amsync.Log): every change's
// hash, dependencies and bytes, in an order in which each follows what it
// depends on. This file reads changes from the bytes they are stored and
// relayed as; apply.go adds them to the log.

// readChanges reads stored or relayed bytes as changes, appended to dst:
// change chunks one after another, as Tandem stores and relays them. A
// whole document saved by automerge (as an earlier version of Tandem
// stored its snapshots) or compressed change chunks are loaded with
// automerge and their changes taken out: the only place automerge reads a
// document in the node, once per such document, until its next
// compaction writes it as change chunks. Bytes that read as neither are
// an error, and add nothing to dst.
//
// A change is a few hundred bytes before its ops: callers that read many
// size dst first (amcheck.Chunks), as growing it copies them all.
func readChanges(dst []guard.Change, data []byte) ([]guard.Change, error) {
	start := len(dst)
	for off := 0; off < len(data); {
		c, n, err := amcheck.ParseChange(data[off:], amcheck.Limits{ListOps: true})
		if c.Compressed || (err != nil && savedChunk(data[off:])) {
			saved, err := readSaved(data)
			return append(dst[:start], saved...), err
		}
		if err != nil {
			return dst[:start], err
		}
		dst = append(dst, guard.Change{Change: c, Raw: data[off : off+n : off+n]})
		off += n
	}
	return dst, nil
}

// savedChunk reports whether b starts with a document chunk (a whole
// document automerge saved) or a compressed chunk.
func savedChunk(b []byte) bool {
	return len(b) > 8 && (b[8] == 0 || b[8] == 2)
}

// readSaved reads a document automerge saved, by loading it.
func readSaved(data []byte) ([]guard.Change, error) {
	d, err := automerge.Load(data)
	if err != nil {
		return nil, err
	}
	cs, err := d.Changes()
	if err != nil {
		return nil, err
	}
	out := make([]guard.Change, 0, len(cs))
	for _, ac := range cs {
		raw := ac.Save()
		c, _, err := amcheck.ParseChange(raw, amcheck.Limits{ListOps: true})
		if err != nil {
			return nil, fmt.Errorf("a change of a saved document: %w", err)
		}
		out = append(out, guard.Change{Change: c, Raw: raw})
	}
	return out, nil
}

// joinChanges returns the bytes of the log's changes idx, one chunk
// after another: what the store keeps and other nodes are sent.
func joinChanges(log *amsync.Log, idx []int32) []byte {
	n := 0
	for _, i := range idx {
		n += log.ChangeLen(i)
	}
	out := make([]byte, 0, n)
	for _, i := range idx {
		out = log.AppendChange(out, i)
	}
	return out
}

// span returns the log indices from..to-1.
func span(from, to int) []int32 {
	out := make([]int32, 0, max(0, to-from))
	for i := from; i < to; i++ {
		out = append(out, int32(i))
	}
	return out
}

// hashOf converts a 32-byte hash read from a message.
func hashOf(b []byte) amsync.Hash { return amsync.Hash(b) }

// headsBytes returns heads as a message holds them.
func headsBytes(hs []amsync.Hash) [][]byte {
	out := make([][]byte, len(hs))
	for i := range hs {
		out[i] = hs[i][:]
	}
	return out
}
