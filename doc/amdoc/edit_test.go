package amdoc

import (
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
