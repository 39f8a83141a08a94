package amsync

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/automerge/automerge-go"
)

// automerge-go's bloom filters, read out of its sync messages, are the
// filters NewBloom makes for the same hashes, byte for byte.
func TestBloomFiltersAreAutomergesBits(t *testing.T) {
	for _, n := range []int{1, 2, 7, 50, 333} {
		a := automerge.New()
		if err := a.Path("k").Set(0); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Commit("base"); err != nil {
			t.Fatal(err)
		}
		shared := a.Heads()
		for i := range n {
			if err := a.Path(fmt.Sprintf("k%d", i)).Set(i); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Commit("edit"); err != nil {
				t.Fatal(err)
			}
		}
		// A state that shares only the base: its have covers the rest.
		ss, err := automerge.LoadSyncState(a, appendHashes([]byte{0x43}, hashesOf(shared)))
		if err != nil {
			t.Fatal(err)
		}
		msg, ok := ss.GenerateMessage()
		if !ok {
			t.Fatal("no message")
		}
		m, err := Decode(msg.Bytes())
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Have) != 1 {
			t.Fatalf("%d have entries", len(m.Have))
		}
		since, err := a.Changes(shared...)
		if err != nil {
			t.Fatal(err)
		}
		ours := NewBloom(len(since), func(i int) Hash { return Hash(since[i].Hash()) })
		if !bytes.Equal(ours.Encode(), m.Have[0].Bloom) {
			t.Fatalf("%d hashes: the filter differs from automerge's", n)
		}
		theirs, err := ParseBloom(m.Have[0].Bloom)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range since {
			h := Hash(c.Hash())
			if !theirs.Contains(&h) {
				t.Fatalf("%d hashes: automerge's filter lacks one it holds", n)
			}
		}
	}
}

func TestHostileBloomFiltersAreRefused(t *testing.T) {
	for name, b := range map[string][]byte{
		"no bits per entry": {5, 0, 7},
		"too many probes":   {1, 10, 200, 1},
		"too few bits":      {100, 10, 7, 1, 2, 3},
		"bad LEB128":        {0x80},
	} {
		if _, err := ParseBloom(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
