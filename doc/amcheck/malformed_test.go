package amcheck

import (
	"bytes"
	"compress/flate"
	"math"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
)

// setKV is a hand-built change that sets root["k"] = "v".
func setKV() tchange {
	return tchange{
		actor: testActor, seq: 1, startOp: 1, time: 1700000000000, msg: "hand made",
		cols: []tcol{
			{specKeyStr, rle{}.runS(1, "k")},
			{specInsert, bools(1)},
			{specAction, rle{}.run(1, actPut)},
			{specValMeta, rle{}.run(1, 1<<4|valString)},
			{specValRaw, []byte("v")},
			{specPredNum, rle{}.run(1, 0)},
		},
	}
}

func withCol(t tchange, spec uint32, data []byte) tchange {
	cols := append([]tcol(nil), t.cols...)
	for i := range cols {
		if cols[i].spec == spec {
			cols[i].data = data
			t.cols = cols
			return t
		}
	}
	cols = append(cols, tcol{spec, data})
	for i := len(cols) - 1; i > 0 && cols[i].spec < cols[i-1].spec; i-- {
		cols[i], cols[i-1] = cols[i-1], cols[i]
	}
	t.cols = cols
	return t
}

func withoutCol(t tchange, spec uint32) tchange {
	var cols []tcol
	for _, c := range t.cols {
		if c.spec != spec {
			cols = append(cols, c)
		}
	}
	t.cols = cols
	return t
}

func TestHandBuiltValid(t *testing.T) {
	for name, tc := range map[string]tchange{
		"set":        setKV(),
		"list bomb":  listBomb(1000),
		"extra":      func() tchange { c := setKV(); c.extra = []byte("future fields"); return c }(),
		"empty cols": withCol(setKV(), specObjActor, nil),
		"other actors": func() tchange {
			c := setKV()
			c.others = [][]byte{{1}, {2, 3}}
			return c
		}(),
	} {
		t.Run(name, func(t *testing.T) {
			raw := tc.chunk()
			c, n, err := ParseChange(raw, Limits{})
			if err != nil {
				t.Fatal(err)
			}
			if n != len(raw) {
				t.Errorf("consumed %d of %d", n, len(raw))
			}
			loaded, err := automerge.LoadChanges(raw)
			if err != nil {
				t.Fatalf("automerge refuses it: %v", err)
			}
			if len(loaded) != 1 || loaded[0].Hash() != automerge.ChangeHash(c.Hash) {
				t.Fatalf("automerge loaded %d changes", len(loaded))
			}
			if loaded[0].ActorSeq() != c.Seq || loaded[0].Message() != c.Message {
				t.Errorf("automerge: seq %d message %q; amcheck: %d %q",
					loaded[0].ActorSeq(), loaded[0].Message(), c.Seq, c.Message)
			}
		})
	}
	c, _, _ := ParseChange(listBomb(1000).chunk(), Limits{})
	if c.Ops != 1001 {
		t.Errorf("list bomb of 1000: %d ops", c.Ops)
	}
}

func TestMalformed(t *testing.T) {
	good := setKV().chunk()
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 0x40
		return b
	}
	body := func(f func(*tchange)) []byte {
		c := setKV()
		f(&c)
		return c.chunk()
	}
	col := func(spec uint32, data []byte) []byte { return withCol(setKV(), spec, data).chunk() }
	cases := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "too short"},
		{"bad magic", flip(good, 0), "bad magic"},
		{"checksum", flip(good, len(good)-3), "checksum mismatch"},
		{"bad checksum byte", flip(good, 5), "checksum mismatch"},
		{"document chunk", append(append(bytes.Clone(good[:8]), 0), good[9:]...), "document chunk"},
		{"unknown type", append(append(bytes.Clone(good[:8]), 7), good[9:]...), "unknown chunk type 7"},
		{"length past end", append(bytes.Clone(good[:9]), 0xff, 0x7f), "chunk says"},
		{"overlong chunk length", chunkWithRawLen(setKV().body()), "overlong"},
		{"seq 0", body(func(c *tchange) { c.seq = 0 }), "seq is 0"},
		{"start op 0", body(func(c *tchange) { c.startOp = 0 }), "start op is 0"},
		{"start op past u32", body(func(c *tchange) { c.startOp = 1 << 32 }), "counter limit"},
		{"ops past u32", body(func(c *tchange) { c.startOp = math.MaxUint32 - 0 + 0; c.cols = listBomb(3).cols }), "counter limit"},
		{"empty actor", body(func(c *tchange) { c.actor = nil }), "empty actor"},
		{"empty other actor", body(func(c *tchange) { c.others = [][]byte{{}} }), "other actor 0 is empty"},
		{"duplicate actor", body(func(c *tchange) { c.others = [][]byte{testActor} }), "listed twice"},
		{"duplicate dep", body(func(c *tchange) { c.deps = [][32]byte{{1}, {1}} }), "listed twice"},
		{"message not utf8", body(func(c *tchange) { c.msg = "\xff" }), "not UTF-8"},
		{"insert rows", col(specInsert, bools(2)), "column insert has 2 rows, want 1"},
		{"insert missing", withoutCol(setKV(), specInsert).chunk(), "column insert has 0 rows, want 1"},
		{"value meta rows", col(specValMeta, rle{}.run(2, 1<<4|valString)), "needs"},
		{"value raw too long", col(specValRaw, []byte("vv")), "value raw column has 2 bytes, value metadata accounts for 1"},
		{"value raw lone", withoutCol(withCol(setKV(), specValMeta, nil), specValMeta).chunk(), "without value metadata"},
		{"null value meta", col(specValMeta, rle{}.nulls(1)), "null value metadata"},
		{"null with length", withCol(col2(specValMeta, rle{}.run(1, 1<<4|valNull)), specValRaw, []byte("v")).chunk(), "value type 0 with length 1"},
		{"float length", withCol(col2(specValMeta, rle{}.run(1, 1<<4|valFloat)), specValRaw, []byte("v")).chunk(), "float value of 1 bytes"},
		{"uint overlong", withCol(col2(specValMeta, rle{}.run(1, 2<<4|valUint)), specValRaw, []byte{0x81, 0x00}).chunk(), "overlong"},
		{"uint extra", withCol(col2(specValMeta, rle{}.run(1, 2<<4|valUint)), specValRaw, []byte{0x01, 0x00}).chunk(), "extra bytes"},
		{"string not utf8", col(specValRaw, []byte{0xff}), "not UTF-8"},
		{"key rows", col(specKeyStr, rle{}.runS(2, "k")), "column key string has 2 rows, want 1"},
		{"key not utf8", col(specKeyStr, rle{}.runS(1, "\xfe")), "not UTF-8"},
		{"key string past end", col(specKeyStr, append(sleb(nil, 1), 0x7f)), "string of 127 bytes"},
		{"no key", withoutCol(setKV(), specKeyStr).chunk(), "op has no key"},
		{"prop and elem", withCol(withCol(setKV(), specKeyActor, rle{}.run(1, 0)), specKeyCtr, rle{}.runI(1, 1)).chunk(), "both a map key and a list element"},
		{"elem in root", withCol(withCol(withCol(setKV(), specKeyStr, nil), specKeyActor, rle{}.run(1, 0)), specKeyCtr, rle{}.runI(1, 1)).chunk(), "list position in the root map"},
		{"insert prop", col(specInsert, bools(0, 1)), "insert with a map key"},
		{"actor index", withCol(withCol(setKV(), specObjActor, rle{}.run(1, 1)), specObjCtr, rle{}.run(1, 1)).chunk(), "actor index 1, change has 1 actors"},
		{"obj half null", withCol(withCol(setKV(), specObjActor, rle{}.nulls(1)), specObjCtr, rle{}.run(1, 1)).chunk(), "disagree on null"},
		{"obj one column", col(specObjActor, rle{}.run(1, 0)), "one is empty"},
		{"obj counter 0", withCol(withCol(setKV(), specObjActor, rle{}.run(1, 0)), specObjCtr, rle{}.run(1, 0)).chunk(), "object counter 0"},
		{"obj counter past u32", withCol(withCol(setKV(), specObjActor, rle{}.run(1, 0)), specObjCtr, rle{}.run(1, 1<<32)).chunk(), "object counter"},
		{"action unknown", col(specAction, rle{}.run(1, 8)), "unknown action 8"},
		{"action null", col(specAction, rle{}.nulls(1)), "null action"},
		{"increment string", col(specAction, rle{}.run(1, actInc)), "increment by a value of type 6"},
		{"pred missing", col(specPredNum, rle{}.run(1, 1)), "pred group adds up to 1"},
		{"pred actor only", withCol(setKV(), specPredActor, rle{}.run(1, 0)).chunk(), "not both"},
		{"pred counter negative", withCol(withCol(col2(specPredNum, rle{}.run(1, 1)), specPredActor, rle{}.run(1, 0)), specPredCtr, rle{}.runI(1, -1)).chunk(), "leaves"},
		{"pred counter past u32", withCol(withCol(col2(specPredNum, rle{}.run(1, 1)), specPredActor, rle{}.run(1, 0)), specPredCtr, rle{}.runI(1, 1<<32)).chunk(), "leaves"},
		{"null pred count", col(specPredNum, rle{}.nulls(1)), "null predecessor count"},
		{"zero null run", col(specAction, rle{}.nulls(0).run(1, actPut)), "null run of length 0"},
		{"min literal run", col(specAction, append(sleb(nil, math.MinInt64), 1)), "literal run length"},
		{"literal past end", col(specAction, sleb(nil, -2)), "unexpected end"},
		{"leb overflow", col(specAction, bytes.Repeat([]byte{0xff}, 11)), "does not fit 64 bits"},
		{"bool zero run", col(specInsert, bools(1, 0)), "boolean run of length 0"},
		{"unknown column", col(0x25, []byte{1}), "unknown column spec 0x25"},
		{"deflated column", col(specExpand|deflateBit, []byte{1}), "deflate-compressed"},
		{"unsorted columns", func() []byte {
			c := setKV()
			c.cols[0], c.cols[1] = c.cols[1], c.cols[0]
			return c.chunk()
		}(), "strictly increasing"},
		{"duplicate column", func() []byte {
			c := setKV()
			c.cols = append([]tcol{c.cols[0]}, c.cols...)
			return c.chunk()
		}(), "strictly increasing"},
		{"column spec past u32", func() []byte {
			b := setKV().body()
			// Append a column whose spec needs 33 bits, length 0.
			i := bytes.Index(b, []byte{6, 0x15}) // column count 6, first spec
			b = append(bytes.Clone(b[:i]), append([]byte{7}, b[i+1:]...)...)
			j := i + 1 + 12
			b = append(b[:j], append(uleb(uleb(nil, 1<<33), 0), b[j:]...)...)
			return chunkOf(b)
		}(), "32 bits"},
		{"column data past end", func() []byte {
			b := setKV().body()
			return chunkOf(b[:len(b)-1])
		}(), "columns take"},
		{"head without insert", withCol(withCol(withCol(listBomb(3), specInsert, bools(4)), specKeyActor, rle{}.nulls(4)), specKeyCtr, rle{}.nulls(1).runI(3, 0)).chunk(), "op 1: list head key without insert"},
		{"map key in made list", withCol(listBomb(3), specKeyStr, rle{}.runS(1, "list").runS(1, "x").nulls(2)).chunk(), "both a map key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := ParseChange(tc.in, Limits{})
			if !isMalformed(err) {
				t.Fatalf("got %v, want ErrMalformed", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}
}

func col2(spec uint32, data []byte) tchange { return withCol(setKV(), spec, data) }

// chunkWithRawLen writes the chunk length with a redundant trailing byte.
func chunkWithRawLen(body []byte) []byte {
	c := chunkOf(body)
	_, k, _ := strictUvarint(c[9:])
	out := append(bytes.Clone(c[:9]), c[9:9+k]...)
	out[len(out)-1] |= 0x80
	out = append(out, 0)
	return append(out, c[9+k:]...)
}

func TestTruncated(t *testing.T) {
	for _, raw := range [][]byte{setKV().chunk(), listBomb(50).chunk()} {
		for i := 0; i < len(raw); i++ {
			if _, _, err := ParseChange(raw[:i], Limits{}); !isMalformed(err) {
				t.Fatalf("truncated at %d of %d: %v", i, len(raw), err)
			}
			// Truncating the data and fixing the length and checksum.
			if i > 12 {
				_, k, _ := strictUvarint(raw[9:])
				if 9+k < i {
					if _, _, err := ParseChange(chunkOf(raw[9+k:i]), Limits{}); !isMalformed(err) {
						t.Fatalf("body cut at %d of %d: %v", i, len(raw), err)
					}
				}
			}
		}
	}
}

// allocs measures the bytes f allocates.
func allocs(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func TestChangeBomb(t *testing.T) {
	bomb := listBomb(1_000_000).chunk()
	t.Logf("a %d-byte change appending 1,000,000 nulls", len(bomb))
	lim := Limits{MaxOps: 100_000, MaxExpandedBytes: 64 << 20}
	var err error
	var took time.Duration // the parse alone: allocs collects garbage first
	used := allocs(func() {
		start := time.Now()
		_, _, err = ParseChange(bomb, lim)
		took = time.Since(start)
	})
	if !isTooLarge(err) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if !strings.Contains(err.Error(), "1000001 ops, MaxOps is 100000") {
		t.Errorf("error %q does not give the numbers", err)
	}
	if used > 64<<10 || took > 50*time.Millisecond {
		t.Errorf("refusing the bomb took %v and %d bytes", took, used)
	}
	// Without limits it is well-formed: a million ops.
	c, _, err := ParseChange(bomb, Limits{})
	if err != nil || c.Ops != 1_000_001 {
		t.Fatalf("unlimited: %d ops, %v", c.Ops, err)
	}

	// 10^12 rows: refused by MaxOps, or as past automerge's counter limit.
	huge := listBomb(1_000_000_000_000).chunk()
	used = allocs(func() {
		start := time.Now()
		_, _, err = ParseChange(huge, lim)
		took = time.Since(start)
	})
	if !isTooLarge(err) || took > 50*time.Millisecond || used > 64<<10 {
		t.Errorf("10^12 rows: %v after %v and %d bytes", err, took, used)
	}
	if _, _, err := ParseChange(huge, Limits{}); !isMalformed(err) {
		t.Errorf("10^12 rows without limits: %v", err)
	}

	// A key string run repeated a million times counts a million times.
	keys := withCol(withCol(withCol(withCol(setKV(), specKeyStr, rle{}.runS(1_000_000, strings.Repeat("x", 100))),
		specInsert, bools(1_000_000)), specAction, rle{}.run(1_000_000, actPut)),
		specValMeta, rle{}.run(1_000_000, valNull))
	keys = withCol(withoutCol(keys, specValRaw), specPredNum, rle{}.run(1_000_000, 0))
	_, _, err = ParseChange(keys.chunk(), Limits{MaxExpandedBytes: 64 << 20})
	if !isTooLarge(err) || !strings.Contains(err.Error(), "MaxExpandedBytes") {
		t.Errorf("repeated keys: %v", err)
	}
	c, _, err = ParseChange(keys.chunk(), Limits{})
	if err != nil || c.Expanded < 100_000_000 {
		t.Errorf("repeated keys: Expanded %d, %v", c.Expanded, err)
	}

	// Predecessor runs count too.
	preds := withCol(withCol(col2(specPredNum, rle{}.run(1, 1<<40)), specPredActor, rle{}.run(1<<40, 0)), specPredCtr, rle{}.runI(1, 1).runI(1<<40-1, 0))
	if _, _, err := ParseChange(preds.chunk(), Limits{MaxExpandedBytes: 64 << 20}); !isTooLarge(err) {
		t.Errorf("2^40 predecessors: %v", err)
	}
}

func TestDeflateBomb(t *testing.T) {
	// A compressed chunk whose deflate stream inflates to 64 MiB of zeros.
	var z bytes.Buffer
	w, _ := flate.NewWriter(&z, flate.BestSpeed)
	zeros := make([]byte, 1<<20)
	for i := 0; i < 64; i++ {
		w.Write(zeros)
	}
	w.Close()
	b := append([]byte{}, magic[:]...)
	b = append(b, 0, 0, 0, 0, chunkCompressed)
	b = uleb(b, uint64(z.Len()))
	b = append(b, z.Bytes()...)
	t.Logf("deflate bomb: %d bytes", len(b))

	var err error
	var took time.Duration // the parse alone: allocs collects garbage first
	used := allocs(func() {
		start := time.Now()
		_, _, err = ParseChange(b, Limits{MaxOps: 100_000, MaxExpandedBytes: 1 << 20})
		took = time.Since(start)
	})
	if !isTooLarge(err) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	// The cap is 1 MiB: the buffer grows to it, and no further.
	if used > 16<<20 || took > time.Second {
		t.Errorf("refusing the bomb took %v and %d bytes", took, used)
	}
	// Garbage that is not a deflate stream.
	bad := append(append([]byte{}, b[:9]...), 3, 0xff, 0xff, 0xff)
	if _, _, err := ParseChange(bad, Limits{}); !isMalformed(err) {
		t.Errorf("bad deflate: %v", err)
	}
	// A valid stream with the wrong checksum.
	z2 := compressedOf(setKV().body())
	z2[5] ^= 1
	if _, _, err := ParseChange(z2, Limits{}); !isMalformed(err) || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("compressed, bad checksum: %v", err)
	}
}

func TestParseChangesSequence(t *testing.T) {
	a, b := setKV().chunk(), listBomb(10).chunk()
	all := append(append(bytes.Clone(a), b...), a...)
	cs, err := ParseChanges(all, Limits{})
	if err != nil || len(cs) != 3 || cs[1].Ops != 11 {
		t.Fatalf("%d changes, %v", len(cs), err)
	}
	_, err = ParseChanges(append(bytes.Clone(all), 0x85), Limits{})
	if !isMalformed(err) || !strings.Contains(err.Error(), "change 3 at byte") {
		t.Errorf("trailing byte: %v", err)
	}
	if _, err := ParseSyncChange(append(bytes.Clone(a), 0), Limits{}); !isMalformed(err) {
		t.Errorf("sync entry with a trailing byte: %v", err)
	}
	if cs, err := ParseChanges(nil, Limits{}); err != nil || len(cs) != 0 {
		t.Errorf("empty: %v %v", cs, err)
	}
}

// TestMarks builds a text change with a mark (bold over "b", expanding),
// which automerge-go cannot make, and checks both agree on it.
func TestMarks(t *testing.T) {
	// ops: 1 make text at root["t"], 2 insert 'a' at head, 3 insert 'b'
	// after 2, 4 mark begin "bold"=true after 2, 5 mark end after 3.
	tc := tchange{
		actor: testActor, seq: 1, startOp: 1,
		cols: []tcol{
			{specObjActor, rle{}.nulls(1).run(4, 0)},
			{specObjCtr, rle{}.nulls(1).run(4, 1)},
			{specKeyActor, rle{}.nulls(2).run(3, 0)},
			{specKeyCtr, rle{}.nulls(1).litI(0, 2, 0, 1)},
			{specKeyStr, rle{}.runS(1, "t").nulls(4)},
			{specInsert, bools(1, 4)},
			{specAction, rle{}.lit(actMakeText).run(2, actPut).run(2, actMark)},
			{specValMeta, rle{}.lit(valNull, 1<<4|valString, 1<<4|valString, valTrue, valNull)},
			{specValRaw, []byte("ab")},
			{specPredNum, rle{}.run(5, 0)},
			{specExpand, bools(3, 2)},
			{specMarkName, rle{}.nulls(3).runS(1, "bold").nulls(1)},
		},
	}
	raw := tc.chunk()
	c, _, err := ParseChange(raw, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Ops != 5 || c.Expanded < int64(len(raw))+4+2 {
		t.Errorf("%d ops, Expanded %d", c.Ops, c.Expanded)
	}
	d, err := automerge.Load(raw)
	if err != nil {
		t.Fatalf("automerge refuses it: %v", err)
	}
	v, err := d.RootMap().Get("t")
	if err != nil {
		t.Fatal(err)
	}
	if s, err := v.Text().Get(); err != nil || s != "ab" {
		t.Errorf("text %q, %v", s, err)
	}
	// The expand column may be absent (all false) but not short.
	if _, _, err := ParseChange(withCol(tc, specExpand, bools(3, 1)).chunk(), Limits{}); !isMalformed(err) {
		t.Errorf("short expand column: %v", err)
	}
	if _, _, err := ParseChange(withoutCol(tc, specExpand).chunk(), Limits{}); err != nil {
		t.Errorf("no expand column: %v", err)
	}
}
