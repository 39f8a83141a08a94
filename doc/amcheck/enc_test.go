package amcheck

import (
	"bytes"
	"compress/flate"
)

// A small encoder for hand-built change chunks.

func uleb(b []byte, v uint64) []byte { return appendUleb(b, v) }

func sleb(b []byte, v int64) []byte { return AppendSleb(b, v) }

// rle builds RLE column data from runs.
type rle []byte

func (r rle) run(n int64, v uint64) rle { return rle(uleb(sleb(r, n), v)) }
func (r rle) runI(n int64, v int64) rle { return rle(sleb(sleb(r, n), v)) }
func (r rle) runS(n int64, s string) rle {
	return rle(append(uleb(sleb(r, n), uint64(len(s))), s...))
}
func (r rle) nulls(n uint64) rle { return rle(uleb(sleb(r, 0), n)) }
func (r rle) lit(vs ...uint64) rle {
	b := sleb(r, -int64(len(vs)))
	for _, v := range vs {
		b = uleb(b, v)
	}
	return rle(b)
}
func (r rle) litI(vs ...int64) rle {
	b := sleb(r, -int64(len(vs)))
	for _, v := range vs {
		b = sleb(b, v)
	}
	return rle(b)
}

func bools(counts ...uint64) []byte {
	var b []byte
	for _, c := range counts {
		b = uleb(b, c)
	}
	return b
}

type tcol struct {
	spec uint32
	data []byte
}

type tchange struct {
	deps    [][32]byte
	actor   []byte
	seq     uint64
	startOp uint64
	time    int64
	msg     string
	others  [][]byte
	cols    []tcol
	extra   []byte
}

func (t tchange) body() []byte {
	var b []byte
	b = uleb(b, uint64(len(t.deps)))
	for _, d := range t.deps {
		b = append(b, d[:]...)
	}
	b = append(uleb(b, uint64(len(t.actor))), t.actor...)
	b = uleb(b, t.seq)
	b = uleb(b, t.startOp)
	b = sleb(b, t.time)
	b = append(uleb(b, uint64(len(t.msg))), t.msg...)
	b = uleb(b, uint64(len(t.others)))
	for _, a := range t.others {
		b = append(uleb(b, uint64(len(a))), a...)
	}
	b = uleb(b, uint64(len(t.cols)))
	for _, c := range t.cols {
		b = uleb(uleb(b, uint64(c.spec)), uint64(len(c.data)))
	}
	for _, c := range t.cols {
		b = append(b, c.data...)
	}
	return append(b, t.extra...)
}

func (t tchange) chunk() []byte { return chunkOf(t.body()) }

// chunkOf wraps a change body in a type 1 chunk with a correct checksum.
func chunkOf(body []byte) []byte {
	h := chunkHash(chunkChange, body)
	b := append([]byte{}, magic[:]...)
	b = append(b, h[:4]...)
	b = append(b, chunkChange)
	b = uleb(b, uint64(len(body)))
	return append(b, body...)
}

// compressedOf wraps a change body in a type 2 chunk.
func compressedOf(body []byte) []byte {
	h := chunkHash(chunkChange, body)
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.BestCompression)
	w.Write(body)
	w.Close()
	b := append([]byte{}, magic[:]...)
	b = append(b, h[:4]...)
	b = append(b, chunkCompressed)
	b = uleb(b, uint64(z.Len()))
	return append(b, z.Bytes()...)
}

var testActor = []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff, 0x00}

// listBomb is a change that makes a list in the root map and appends n
// nulls to it, all in runs: a few dozen bytes.
func listBomb(n int64) tchange {
	return tchange{
		actor: testActor, seq: 1, startOp: 1,
		cols: []tcol{
			{specObjActor, rle{}.nulls(1).run(n, 0)},
			{specObjCtr, rle{}.nulls(1).run(n, 1)},
			{specKeyActor, rle{}.nulls(2).run(n-1, 0)},
			{specKeyCtr, rle{}.nulls(1).litI(0, 2).runI(n-2, 1)},
			{specKeyStr, rle{}.runS(1, "list").nulls(uint64(n))},
			{specInsert, bools(1, uint64(n))},
			{specAction, rle{}.lit(actMakeList).run(n, actPut)},
			{specValMeta, rle{}.run(n+1, valNull)},
			{specPredNum, rle{}.run(n+1, 0)},
		},
	}
}
