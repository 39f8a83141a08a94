package amdoc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
)

// randomEdits picks edits that apply to a document as View shows it
// (trace's shape: text, m, l, c).
func randomEdits(r *rand.Rand, content map[string]any) []Edit {
	text, _ := content["text"].(string)
	units := len(utf16.Encode([]rune(text)))
	list, _ := content["l"].([]any)
	m, _ := content["m"].(map[string]any)
	var edits []Edit
	for range 1 + r.IntN(4) {
		switch r.IntN(7) {
		case 0, 1:
			at := r.IntN(units + 1)
			del := min(r.IntN(3), units-at)
			ins := []string{"", "x", " world", "é👋", "ab\ncd"}[r.IntN(5)]
			edits = append(edits, Edit{Op: "splice", Path: []any{"text"}, Index: at, Delete: del, Insert: ins})
			units += len(utf16.Encode([]rune(ins))) - del
		case 2:
			k := fmt.Sprint("k", r.IntN(6))
			v := []any{json.Number("7"), json.Number("2.5"), "str", true, nil, map[string]any{"n": json.Number("1"), "t": "y"}, []any{json.Number("1"), "z"}}[r.IntN(7)]
			edits = append(edits, Edit{Op: "put", Path: []any{"m", k}, Value: v})
			if m != nil {
				m[k] = v
			}
		case 3:
			if keys := slices.Sorted(maps.Keys(m)); len(keys) > 0 {
				k := keys[r.IntN(len(keys))]
				edits = append(edits, Edit{Op: "delete", Path: []any{"m", k}})
				delete(m, k)
			}
		case 4:
			edits = append(edits, Edit{Op: "increment", Path: []any{"c"}, Value: json.Number(fmt.Sprint(r.IntN(9) - 4))})
		case 5:
			at := r.IntN(len(list) + 1)
			edits = append(edits, Edit{Op: "splice", Path: []any{"l"}, Index: at, Insert: []any{json.Number("5"), "s"}})
			list = append(list, nil, nil)
		case 6:
			if len(list) > 0 {
				i := r.IntN(len(list))
				if r.IntN(2) == 0 {
					edits = append(edits, Edit{Op: "put", Path: []any{"l", json.Number(fmt.Sprint(i))}, Value: json.Number("42")})
				} else {
					edits = append(edits, Edit{Op: "delete", Path: []any{"l", json.Number(fmt.Sprint(i))}})
					list = list[1:]
				}
			}
		}
	}
	return edits
}

// TestAnEditIsTheChangeAutomergesJSAPIMakes makes random edits on random
// editing sessions, each as one change: amcheck's Canonical rule admits
// it, stock automerge applies it, and the document then shows what the
// same edits made with automerge's JS API show.
func TestAnEditIsTheChangeAutomergesJSAPIMakes(t *testing.T) {
	o := amtest.StockAutomerge(t)
	r := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	for seed := 1; seed <= 40; seed++ {
		changes := o.Trace(t, seed, 20+seed*3)
		before, err := View(ctx, join(changes))
		if err != nil {
			t.Fatal(err)
		}
		edits := randomEdits(r, before)
		actor := []byte(fmt.Sprintf("api-actor-%06d", seed))
		chunk, hash, err := Change(ctx, join(changes), actor, 1_800_000_000, edits)
		if err != nil {
			t.Fatalf("seed %d: %v (edits %+v)", seed, err, edits)
		}
		c, _, err := amcheck.ParseChange(chunk, amcheck.Limits{ListOps: true, Canonical: true})
		if err != nil {
			t.Fatalf("seed %d: the change is not as automerge encodes one: %v", seed, err)
		}
		if c.Hash != hash {
			t.Fatalf("seed %d: the hash returned is not the change's", seed)
		}
		if ok, why := o.Applies(t, changes, [][]byte{chunk}); !ok {
			t.Fatalf("seed %d: stock automerge does not apply the change: %s", seed, why)
		}
		after, err := View(ctx, join(append(changes, chunk)))
		if err != nil {
			t.Fatal(err)
		}
		want, why := o.Edit(t, changes, edits)
		if why != "" {
			t.Fatalf("seed %d: automerge's JS API refuses the edits: %s", seed, why)
		}
		if ok, g, w := sameJSON(t, after, want); !ok {
			t.Errorf("seed %d: edits %s\n got %s\nwant %s", seed, mustJSON(edits), g, w)
		}
		if ok, _, w := sameJSON(t, after, o.View(t, append(changes, chunk), nil)); !ok {
			t.Errorf("seed %d: stock automerge shows the change otherwise: %s", seed, w)
		}
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// A bad edit is refused with what is wrong, and nothing is made.
func TestABadEditIsRefusedWithItsReason(t *testing.T) {
	o := amtest.StockAutomerge(t)
	changes := join(o.Trace(t, 3, 10))
	ctx := context.Background()
	tests := []struct {
		edit Edit
		want string
	}{
		{Edit{Op: "move"}, "op must be"},
		{Edit{Op: "put"}, "path must name"},
		{Edit{Op: "put", Path: []any{"nope", "k"}, Value: json.Number("1")}, `no key "nope"`},
		{Edit{Op: "splice", Path: []any{"text"}, Index: 10_000}, "past the text's end"},
		{Edit{Op: "splice", Path: []any{"text"}, Index: 0, Delete: 10_000}, "cannot delete"},
		{Edit{Op: "splice", Path: []any{"m"}}, "splice edits a text or a list"},
		{Edit{Op: "increment", Path: []any{"text"}}, "not a counter"},
		{Edit{Op: "put", Path: []any{"text", "x"}}, "edited with splice"},
		{Edit{Op: "put", Path: []any{"l", json.Number("99")}}, "outside the list"},
		{Edit{Op: "delete", Path: []any{"m", "missing"}}, `no key "missing"`},
		{Edit{Op: "put", Path: []any{"k"}, Value: nested(MaxEditDepth + 2)}, "nests deeper"},
		{Edit{Op: "put", Path: []any{json.Number("1")}}, "non-empty string"},
		{Edit{Op: "put", Path: []any{"k"}, Value: json.Number("1e400")}, "not a number"},
	}
	for _, tt := range tests {
		_, _, err := Change(ctx, changes, []byte("new-actor"), 0, []Edit{tt.edit})
		if !errors.Is(err, ErrBadEdit) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want ErrBadEdit with %q", tt.edit, err, tt.want)
		}
	}
	// A splice inside a character (one of a surrogate pair).
	_, _, err := Change(ctx, changes, []byte("a1"), 0, []Edit{{Op: "put", Path: []any{"e"}, Value: "👋"}})
	if err != nil {
		t.Fatal(err)
	}
	chunk, _, _ := Change(ctx, changes, []byte("a1"), 0, []Edit{{Op: "put", Path: []any{"e"}, Value: "👋"}})
	with := append(append([]byte{}, changes...), chunk...)
	if _, _, err := Change(ctx, with, []byte("a2"), 0, []Edit{{Op: "splice", Path: []any{"e"}, Index: 1, Insert: "x"}}); !errors.Is(err, ErrBadEdit) {
		t.Errorf("a splice inside a surrogate pair: %v", err)
	}
	if _, _, err := Change(ctx, with, []byte("a1"), 0, []Edit{{Op: "put", Path: []any{"k"}, Value: true}}); err == nil {
		t.Error("an actor that made a change of the document was taken again")
	}
}

func nested(n int) any {
	var v any = json.Number("1")
	for range n {
		v = []any{v}
	}
	return v
}

// The ops one change may make are bounded, and so is what making the
// most costs: a paste of MaxChangeOps characters allocates about 170
// bytes a character besides the document (held to 300), and one more is
// refused before it is held.
func TestTheOpsOfAChangeAreBounded(t *testing.T) {
	o := amtest.StockAutomerge(t)
	changes := join(o.Trace(t, 5, 10))
	ctx := context.Background()
	huge := strings.Repeat("x", MaxChangeOps+1)
	if _, _, err := Change(ctx, changes, []byte("a1"), 0, []Edit{{Op: "splice", Path: []any{"text"}, Index: 0, Insert: huge}}); !errors.Is(err, ErrBadEdit) || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("a paste of %d characters: %v", len(huge), err)
	}
	many := make([]any, MaxChangeOps)
	for i := range many {
		many[i] = json.Number("1")
	}
	if _, _, err := Change(ctx, changes, []byte("a2"), 0, []Edit{{Op: "put", Path: []any{"k"}, Value: many}}); !errors.Is(err, ErrBadEdit) {
		t.Fatalf("a list of %d values: %v", len(many), err)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	chunk, _, err := Change(ctx, changes, []byte("a3"), 0, []Edit{{Op: "splice", Path: []any{"text"}, Index: 0, Insert: huge[:MaxChangeOps]}})
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	perOp := float64(after.TotalAlloc-before.TotalAlloc) / MaxChangeOps
	t.Logf("a paste of %d characters: a change of %d bytes, %.0f bytes allocated a character", MaxChangeOps, len(chunk), perOp)
	if perOp > 300 {
		t.Fatalf("%.0f bytes allocated a character, over 300", perOp)
	}
}

// In a text holding a block marker (automerge's splitBlock), an index
// counts the marker as one, as automerge's JS API and its toJS do.
func TestATextIndexCountsABlockMarkerAsOne(t *testing.T) {
	o := amtest.StockAutomerge(t)
	changes := o.Cases(t)["textWithBlock"]
	edits := []Edit{{Op: "splice", Path: []any{"text"}, Index: 8, Insert: "X"}}
	chunk, _, err := Change(context.Background(), join(changes), []byte("api-actor-block"), 1_800_000_000, edits)
	if err != nil {
		t.Fatal(err)
	}
	after, err := View(context.Background(), join(append(changes, chunk)))
	if err != nil {
		t.Fatal(err)
	}
	want, why := o.Edit(t, changes, edits)
	if why != "" {
		t.Fatalf("automerge's JS API refuses the edit: %s", why)
	}
	if ok, g, w := sameJSON(t, after, want); !ok {
		t.Errorf("got %s\nwant %s", g, w)
	}
}

// A put with a type makes the scalar automerge's JS API would for it: a
// counter that a later increment adds to, a timestamp, bytes, a string
// that is not a text, and integers past 2^53 exactly. Stock automerge
// applies the changes and shows what the view does.
func TestATypedPutMakesThatScalar(t *testing.T) {
	o := amtest.StockAutomerge(t)
	ctx := context.Background()
	base := o.Trace(t, 5, 10)
	puts := []Edit{
		{Op: "put", Path: []any{"likes"}, Value: json.Number("3"), Type: "counter"},
		{Op: "put", Path: []any{"at"}, Value: "2026-12-07T03:00:00.5Z", Type: "timestamp"},
		{Op: "put", Path: []any{"ms"}, Value: json.Number("1700000000123"), Type: "timestamp"},
		{Op: "put", Path: []any{"blob"}, Value: "AAEC/w==", Type: "bytes"},
		{Op: "put", Path: []any{"id"}, Value: "not a text", Type: "string"},
		{Op: "put", Path: []any{"f"}, Value: json.Number("2"), Type: "float"},
		{Op: "increment", Path: []any{"likes"}, Value: json.Number("2")},
	}
	first, _, err := Change(ctx, join(base), []byte("typed-actor-1"), 1_800_000_000, puts)
	if err != nil {
		t.Fatal(err)
	}
	changes := append(base, first)
	second, _, err := Change(ctx, join(changes), []byte("typed-actor-2"), 1_800_000_001,
		[]Edit{{Op: "increment", Path: []any{"likes"}, Value: json.Number("10")}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := o.Applies(t, base, [][]byte{first, second}); !ok {
		t.Fatalf("stock automerge does not apply the typed puts: %s", why)
	}
	changes = append(changes, second)
	var stock map[string]any
	dec := json.NewDecoder(bytes.NewReader(o.View(t, changes, nil)))
	dec.UseNumber()
	if err := dec.Decode(&stock); err != nil {
		t.Fatal(err)
	}
	// Integers past 2^53 are BigInts in JS, which JSON.stringify refuses:
	// stock automerge applies them, and the view shows them exactly.
	third, _, err := Change(ctx, join(changes), []byte("typed-actor-3"), 1_800_000_002, []Edit{
		{Op: "put", Path: []any{"big"}, Value: json.Number("9007199254740993"), Type: "int"},
		{Op: "put", Path: []any{"ubig"}, Value: json.Number("18446744073709551615"), Type: "uint"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ok, why := o.Applies(t, changes, [][]byte{third}); !ok {
		t.Fatalf("stock automerge does not apply the large integers: %s", why)
	}
	got, err := View(ctx, join(append(changes, third)))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"likes": "15", "at": `"2026-12-07T03:00:00.500Z"`, "ms": `"2023-11-14T22:13:20.123Z"`,
		"blob": `"AAEC/w=="`, "id": `"not a text"`, "big": "9007199254740993",
		"ubig": "18446744073709551615", "f": "2",
	} {
		if g := mustJSON(got[k]); g != want {
			t.Errorf("%s shows %s, want %s", k, g, want)
		}
	}
	// Stock automerge agrees where JSON.stringify shows a value as the
	// view does (it shows bytes as an object of indices).
	for _, k := range []string{"likes", "at", "ms", "f"} {
		if g, s := mustJSON(got[k]), mustJSON(stock[k]); g != s {
			t.Errorf("%s: the view shows %s, stock automerge %s", k, g, s)
		}
	}
	if s, ok := stock["id"].(string); !ok || s != "not a text" {
		t.Errorf("stock automerge shows the string as %v", stock["id"])
	}
	for _, bad := range []Edit{
		{Op: "put", Path: []any{"k"}, Value: "x", Type: "counter"},
		{Op: "put", Path: []any{"k"}, Value: json.Number("1.5"), Type: "int"},
		{Op: "put", Path: []any{"k"}, Value: json.Number("-1"), Type: "uint"},
		{Op: "put", Path: []any{"k"}, Value: "!!", Type: "bytes"},
		{Op: "put", Path: []any{"k"}, Value: "yesterday", Type: "timestamp"},
		{Op: "put", Path: []any{"k"}, Value: json.Number("8640000000000001"), Type: "timestamp"},
		{Op: "put", Path: []any{"k"}, Value: json.Number("-9223372036854775808"), Type: "timestamp"},
		{Op: "put", Path: []any{"k"}, Value: json.Number("1"), Type: "decimal"},
		{Op: "splice", Path: []any{"text"}, Insert: "x", Type: "string"},
	} {
		if _, _, err := Change(ctx, join(base), []byte("typed-actor-4"), 0, []Edit{bad}); !errors.Is(err, ErrBadEdit) {
			t.Errorf("%+v: %v, want ErrBadEdit", bad, err)
		}
	}
}

// Several changes made in one pass are each made on the one before, as
// Change would make them one at a time; a bad one in between is refused
// alone, and what it did before it failed is in none of the others.
// Stock automerge applies them.
func TestChangesAreMadeEachOnTheOneBefore(t *testing.T) {
	o := amtest.StockAutomerge(t)
	ctx := context.Background()
	base := o.Trace(t, 7, 20)
	splice := func(s string) Edit { return Edit{Op: "splice", Path: []any{"text"}, Index: 0, Insert: s} }
	made := Changes(ctx, join(base), []Edits{
		{Actor: []byte("batch-actor-1"), Time: 1, Edits: []Edit{splice("a")}},
		{Actor: []byte("batch-actor-2"), Time: 2, Edits: []Edit{splice("b"), {Op: "increment", Path: []any{"text"}}}},
		{Actor: []byte("batch-actor-3"), Time: 3, Edits: []Edit{splice("c"), {Op: "put", Path: []any{"k"}, Value: json.Number("1")}}},
		{Actor: []byte("batch-actor-1"), Time: 4, Edits: []Edit{splice("d")}},
	})
	if made[0].Err != nil || made[2].Err != nil {
		t.Fatalf("good batches failed: %v, %v", made[0].Err, made[2].Err)
	}
	if !errors.Is(made[1].Err, ErrBadEdit) || made[3].Err == nil {
		t.Fatalf("a bad batch and a reused actor: %v, %v; want both refused", made[1].Err, made[3].Err)
	}
	c, _, err := amcheck.ParseChange(made[2].Chunk, amcheck.Limits{ListOps: true, Canonical: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Deps) != 1 || c.Deps[0] != made[0].Hash {
		t.Fatalf("the third change depends on %x, want only the first's %x", c.Deps, made[0].Hash)
	}
	if ok, why := o.Applies(t, base, [][]byte{made[0].Chunk, made[2].Chunk}); !ok {
		t.Fatalf("stock automerge does not apply the changes: %s", why)
	}
	got, err := View(ctx, join(append(base, made[0].Chunk, made[2].Chunk)))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := View(ctx, join(base))
	if got["text"] != "ca"+before["text"].(string) || mustJSON(got["k"]) != "1" {
		t.Fatalf("text %q and k %v after the changes", got["text"], got["k"])
	}
}
