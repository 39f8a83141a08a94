package amcheck

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// seedChanges returns real changes made with automerge-go, and a few made
// by hand, as fuzz seeds.
func seedChanges(tb testing.TB) [][]byte {
	var seeds [][]byte
	add := func(d *automerge.Doc) {
		chs, err := d.Changes()
		if err != nil {
			tb.Fatal(err)
		}
		for _, c := range chs {
			seeds = append(seeds, c.Save())
		}
	}
	d := automerge.New()
	root := d.RootMap()
	root.Set("k", "v")
	root.Set("n", -42)
	root.Set("u", uint64(7))
	root.Set("f", 2.5)
	root.Set("b", []byte{1, 2})
	root.Set("t", time.UnixMilli(1700000000000))
	root.Set("c", automerge.NewCounter(3))
	d.Commit("scalars")
	root.Set("text", automerge.NewText("hello"))
	d.Commit("text")
	tv, _ := root.Get("text")
	tv.Text().Insert(2, "XY")
	tv.Text().Delete(0, 1)
	d.Commit("edit")
	root.Set("list", automerge.NewList())
	lv, _ := root.Get("list")
	lv.List().Append(1, "two", nil, true)
	lv.List().Insert(0, automerge.NewMap())
	d.Commit("list")
	cv, _ := root.Get("c")
	cv.Counter().Inc(4)
	root.Delete("k")
	d.Commit("inc, delete")
	f, _ := d.Fork()
	f.RootMap().Set("n", 1)
	f.Commit("fork")
	root.Set("n", 2)
	d.Commit("concurrent")
	d.Merge(f)
	root.Set("n", 3)
	d.Commit("after merge")
	add(d)

	e := automerge.New()
	e.RootMap().Set("text", automerge.NewText(""))
	e.Commit("")
	ev, _ := e.RootMap().Get("text")
	ev.Text().Insert(0, strings.Repeat("paste ", 50))
	e.Commit("paste")
	add(e)

	seeds = append(seeds, setKV().chunk(), listBomb(5).chunk())
	_, k, _ := strictUvarint(seeds[len(seeds)-3][9:])
	seeds = append(seeds, compressedOf(seeds[len(seeds)-3][9+k:]))
	return seeds
}

// fixChecksum returns data with the checksum of its first chunk made
// right, so that the fuzzer gets past it.
func fixChecksum(data []byte) []byte {
	if len(data) < 10 || !bytes.Equal(data[:4], magic[:]) {
		return nil
	}
	n, k, err := strictUvarint(data[9:])
	if err != nil || n > uint64(len(data)-9-k) {
		return nil
	}
	body := data[9+k : 9+k+int(n)]
	switch data[8] {
	case chunkChange:
	case chunkCompressed:
		if body, err = inflate(body, Limits{MaxExpandedBytes: 1 << 20}); err != nil {
			return nil
		}
	default:
		return nil
	}
	h := chunkHash(chunkChange, body)
	out := bytes.Clone(data)
	copy(out[4:8], h[:4])
	return out
}

// syncMessage wraps one change in a sync message, the way Tandem's
// clients send changes.
func syncMessage(change []byte) []byte {
	m := []byte{0x42, 0, 0, 0, 1}
	m = uleb(m, uint64(len(change)))
	return append(m, change...)
}

// semantic reports automerge errors about the document rather than the
// change's encoding.
func semantic(err error) bool {
	return strings.Contains(err.Error(), "deps should already be in the document")
}

var fuzzLimits = Limits{MaxOps: 10_000, MaxExpandedBytes: 1 << 20, ListOps: true}

func fuzzOne(t *testing.T, data []byte) {
	start := time.Now()
	c, n, err := ParseChange(data, fuzzLimits)
	// Generous: the parser is linear, but fuzzing machines are loaded.
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("ParseChange took %v on %d bytes", d, len(data))
	}
	if err != nil {
		if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("error wraps neither sentinel: %v", err)
		}
		return
	}
	if n <= 0 || n > len(data) {
		t.Fatalf("consumed %d of %d bytes", n, len(data))
	}
	chunk := data[:n]

	// What amcheck accepts, automerge must load.
	loaded, err := automerge.LoadChanges(chunk)
	if err != nil {
		if !semantic(err) {
			t.Fatalf("amcheck accepts (%+v), automerge.LoadChanges refuses: %v", c, err)
		}
	} else if len(loaded) == 1 {
		l := loaded[0]
		if l.Hash() != automerge.ChangeHash(c.Hash) || l.ActorSeq() != c.Seq || l.Message() != c.Message {
			t.Fatalf("automerge reads %s seq %d %q, amcheck %x seq %d %q",
				l.Hash(), l.ActorSeq(), l.Message(), c.Hash, c.Seq, c.Message)
		}
	}
	// Read back everything automerge made of it, to reach the code that
	// walks a document (saving, reading values, syncing).
	if doc, err := automerge.Load(chunk); err == nil {
		exercise(doc)
	}
	// And, uncompressed, in a sync message (automerge's sync decoder
	// verifies every change's ops even when it cannot apply them yet).
	if _, err := ParseSyncChange(chunk, fuzzLimits); err == nil {
		ss := automerge.NewSyncState(automerge.New())
		if _, err := ss.ReceiveMessage(syncMessage(chunk)); err != nil && !semantic(err) {
			t.Fatalf("amcheck accepts (%+v), the sync message decoder refuses: %v", c, err)
		}
	}
}

func FuzzParseChange(f *testing.F) {
	for _, s := range seedChanges(f) {
		f.Add(s)
		// The body alone: the target also tries the input as a body,
		// wrapped in a chunk with the right checksum.
		if _, k, err := strictUvarint(s[9:]); err == nil && s[8] == chunkChange {
			f.Add(bytes.Clone(s[9+k:]))
		}
		if cols := columnsSeed(s); cols != nil {
			f.Add(cols)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzOne(t, data)
		if fixed := fixChecksum(data); fixed != nil && !bytes.Equal(fixed, data) {
			fuzzOne(t, fixed)
		}
		fuzzOne(t, chunkOf(data))
		if c := columnsChange(data); c != nil {
			fuzzOne(t, c)
		}
		if _, err := ParseChanges(data, fuzzLimits); err != nil && !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) {
			t.Fatalf("ParseChanges: %v", err)
		}
	})
}

func TestSeedsLoad(t *testing.T) {
	for i, s := range seedChanges(t) {
		if _, _, err := ParseChange(s, Limits{}); err != nil {
			t.Errorf("seed %d: %v", i, err)
		}
	}
}

func exercise(d *automerge.Doc) {
	d.Save()
	d.Heads()
	walk(d.Root(), 0)
	ss := automerge.NewSyncState(d)
	ss.GenerateMessage()
}

func walk(v *automerge.Value, depth int) {
	if v == nil || depth > 20 {
		return
	}
	switch v.Kind() {
	case automerge.KindMap:
		vals, _ := v.Map().Values()
		for _, c := range vals {
			walk(c, depth+1)
		}
	case automerge.KindList:
		vals, _ := v.List().Values()
		for _, c := range vals {
			walk(c, depth+1)
		}
	case automerge.KindText:
		v.Text().Get()
		v.Text().Len()
	case automerge.KindCounter:
		v.Counter().Get()
	}
}

// columnsChange reads fuzz data as the columns of a change with a fixed
// header (one other actor, start op 1): two bytes of presence bits over
// the known columns, then for each present column a length byte and its
// data. Mutations then land in the column data, past the checksum.
func columnsChange(data []byte) []byte {
	if len(data) < 2 {
		return nil
	}
	mask := uint16(data[0]) | uint16(data[1])<<8
	data = data[2:]
	var cols []tcol
	for slot := 0; slot < nCols && len(data) > 0; slot++ {
		if mask&(1<<slot) == 0 {
			continue
		}
		n := min(int(data[0]), len(data)-1)
		cols = append(cols, tcol{slotSpecs[slot], data[1 : 1+n]})
		data = data[1+n:]
	}
	return tchange{actor: testActor, seq: 1, startOp: 1, others: [][]byte{{0xaa}}, cols: cols}.chunk()
}

// columnsSeed writes a change's columns in columnsChange's form.
func columnsSeed(chunk []byte) []byte {
	if len(chunk) < 10 || chunk[8] != chunkChange {
		return nil
	}
	_, k, err := strictUvarint(chunk[9:])
	if err != nil {
		return nil
	}
	r := &body{b: chunk[9+k:]}
	nd, err := r.uvarint("")
	if err != nil {
		return nil
	}
	r.off += int(nd) * 32
	for _, step := range []func() error{
		func() error { _, err := lengthPrefixed(r, ""); return err },
		func() error { _, err := r.uvarint(""); return err },
		func() error { _, err := r.uvarint(""); return err },
		func() error { _, err := r.varint(""); return err },
		func() error { _, err := lengthPrefixed(r, ""); return err },
		func() error {
			n, err := r.uvarint("")
			for i := uint64(0); err == nil && i < n; i++ {
				_, err = lengthPrefixed(r, "")
			}
			return err
		},
	} {
		if step() != nil {
			return nil
		}
	}
	cols, err := readColumnMeta(r)
	if err != nil {
		return nil
	}
	var mask uint16
	var out []byte
	for _, c := range cols {
		if c.length > 255 {
			return nil
		}
		mask |= 1 << slotOf(c.spec)
		out = append(out, byte(c.length))
		out = append(out, r.b[r.off:r.off+int(c.length)]...)
		r.off += int(c.length)
	}
	return append([]byte{byte(mask), byte(mask >> 8)}, out...)
}

func TestColumnsSeed(t *testing.T) {
	raw := setKV().chunk()
	c, _, err := ParseChange(columnsChange(columnsSeed(raw)), Limits{})
	if err != nil || c.Ops != 1 {
		t.Fatalf("%d ops, %v", c.Ops, err)
	}
}
