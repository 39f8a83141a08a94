package amcheck

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/automerge/automerge-go"
)

// textDoc is a hand-built change making root["t"] a text object (op 1)
// and typing "a" into it (op 2).
func textDoc() tchange {
	return tchange{
		actor: testActor, seq: 1, startOp: 1,
		cols: []tcol{
			{specObjActor, rle{}.nulls(1).run(1, 0)},
			{specObjCtr, rle{}.nulls(1).run(1, 1)},
			{specKeyCtr, rle{}.nulls(1).runI(1, 0)},
			{specKeyStr, rle{}.runS(1, "t").nulls(1)},
			{specInsert, bools(1, 1)},
			{specAction, rle{}.lit(actMakeText, actPut)},
			{specValMeta, rle{}.lit(valNull, 1<<4|valString)},
			{specValRaw, []byte("a")},
			{specPredNum, rle{}.run(2, 0)},
		},
	}
}

// mapKeyIntoText is a later change that puts a map key into that text
// object: well-formed, but automerge aborts applying it.
func mapKeyIntoText(dep [32]byte) tchange {
	return tchange{
		deps: [][32]byte{dep}, actor: testActor, seq: 2, startOp: 3,
		cols: []tcol{
			{specObjActor, rle{}.run(1, 0)},
			{specObjCtr, rle{}.run(1, 1)},
			{specKeyStr, rle{}.runS(1, "x")},
			{specInsert, bools(1)},
			{specAction, rle{}.run(1, actPut)},
			{specValMeta, rle{}.run(1, valTrue)},
			{specPredNum, rle{}.run(1, 0)},
		},
	}
}

// OpList lists what each op names: typing into a text made by an earlier
// change names that text and the element typed after.
func TestOpList(t *testing.T) {
	a, _, err := ParseChange(textDoc().chunk(), Limits{ListOps: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.OpList) != 2 || a.OpList[0].Action != MakeText || !a.OpList[0].MapKey || a.OpList[0].Key != "t" ||
		a.OpList[1].Obj != (OpID{Counter: 1}) || !a.OpList[1].Insert || a.OpList[1].Elem != (OpID{}) {
		t.Errorf("text doc: ops %+v", a.OpList)
	}

	d := automerge.New()
	d.RootMap().Set("text", automerge.NewText("hi"))
	d.Commit("")
	v, _ := d.RootMap().Get("text")
	v.Text().Insert(2, "!")
	d.Commit("")
	chs, err := d.Changes()
	if err != nil {
		t.Fatal(err)
	}
	first, _, err := ParseChange(chs[0].Save(), Limits{ListOps: true})
	if err != nil {
		t.Fatal(err)
	}
	typed, _, err := ParseChange(chs[1].Save(), Limits{ListOps: true, Canonical: true})
	if err != nil {
		t.Fatal(err)
	}
	text := OpID{Counter: uint32(first.StartOp)}
	want := Op{Obj: text, Elem: OpID{Counter: text.Counter + 2}, Insert: true, Action: Put, Value: ValueString}
	if len(typed.OpList) != 1 || typed.OpList[0].Obj != want.Obj || typed.OpList[0].Elem != want.Elem ||
		!typed.OpList[0].Insert || typed.OpList[0].Action != Put || typed.OpList[0].Value != ValueString {
		t.Errorf("typed change: ops %+v, want [%+v]", typed.OpList, want)
	}
}

// automerge-go writes its changes as the canonical check wants them: maps,
// lists, text, counters, deletions, overwrites.
func TestAutomergeGoChangesAreCanonical(t *testing.T) {
	d := automerge.New()
	d.RootMap().Set("text", automerge.NewText("hello"))
	d.RootMap().Set("n", 1)
	d.RootMap().Set("c", automerge.NewCounter(3))
	d.RootMap().Set("l", []any{1, "two", 3.0, true, nil})
	d.RootMap().Set("m", map[string]any{"a": "x", "b": []any{}})
	d.Commit("one")
	v, _ := d.RootMap().Get("text")
	v.Text().Splice(1, 2, "EY")
	c, _ := d.RootMap().Get("c")
	c.Counter().Inc(5)
	d.RootMap().Delete("n")
	l, _ := d.RootMap().Get("l")
	l.List().Set(1, "2")
	l.List().Delete(0)
	d.Commit("two")
	chs, err := d.Changes()
	if err != nil {
		t.Fatal(err)
	}
	for i, ch := range chs {
		if _, _, err := ParseChange(ch.Save(), Limits{ListOps: true, Canonical: true}); err != nil {
			t.Errorf("change %d: %v", i, err)
		}
	}
}

func TestBothKeyKindsInOneChange(t *testing.T) {
	a, _, err := ParseChange(textDoc().chunk(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	// One change addressing one object both ways is refused.
	both := mapKeyIntoText(a.Hash)
	both = withCol(both, specObjActor, rle{}.run(2, 0))
	both = withCol(both, specObjCtr, rle{}.run(2, 1))
	both = withCol(both, specKeyCtr, rle{}.nulls(1).runI(1, 0))
	both = withCol(both, specKeyStr, rle{}.runS(1, "x").nulls(1))
	both = withCol(both, specInsert, bools(1, 1))
	both = withCol(both, specAction, rle{}.run(2, actPut))
	both = withCol(both, specValMeta, rle{}.run(2, valTrue))
	both = withCol(both, specPredNum, rle{}.run(2, 0))
	if _, _, err := ParseChange(both.chunk(), Limits{}); !isMalformed(err) || !strings.Contains(err.Error(), "both by map key and by list position") {
		t.Errorf("both kinds: %v", err)
	}
}

// TestAbortOnWrongKeyKind shows, in a child process, why callers check
// what ops name against the document (OpList):
// automerge aborts the process applying a change that ParseChange
// accepts, because only the document knows the object is text.
func TestAbortOnWrongKeyKind(t *testing.T) {
	a := textDoc().chunk()
	ac, _, _ := ParseChange(a, Limits{})
	b := mapKeyIntoText(ac.Hash).chunk()
	if os.Getenv("AMCHECK_ABORT_CHILD") == "1" {
		automerge.LoadChanges(append(a, b...))
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("starts a child process")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAbortOnWrongKeyKind$")
	cmd.Env = append(os.Environ(), "AMCHECK_ABORT_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("automerge applied a map key in a text object without aborting:\n%s", out)
	}
	if !strings.Contains(string(out), "can only compare map keys") {
		t.Fatalf("the child failed (%v), but not with automerge's panic on a map key in a text:\n%s", err, out)
	}
}
