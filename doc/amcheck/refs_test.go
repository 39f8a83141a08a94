package amcheck

import (
	"bytes"
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

func TestRefsAndMade(t *testing.T) {
	a, _, err := ParseChange(textDoc().chunk(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Refs) != 0 || len(a.Made) != 1 || a.Made[0] != (ObjMade{Counter: 1, N: 1, Map: false}) {
		t.Errorf("text doc: refs %v made %v", a.Refs, a.Made)
	}
	b, _, err := ParseChange(mapKeyIntoText(a.Hash).chunk(), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Refs) != 1 || !bytes.Equal(b.Refs[0].Actor, testActor) || b.Refs[0].Counter != 1 || !b.Refs[0].MapKeys {
		t.Errorf("map key into text: refs %+v", b.Refs)
	}

	// Real changes: typing into a text made earlier refers to it.
	d := automerge.New()
	d.RootMap().Set("text", automerge.NewText("hi"))
	d.Commit("")
	v, _ := d.RootMap().Get("text")
	v.Text().Insert(2, "!")
	d.RootMap().Set("title", "x")
	d.Commit("")
	cs := checkAgainst(t, d)
	if len(cs[0].Refs) != 0 || len(cs[0].Made) != 1 || cs[0].Made[0].Counter != cs[0].StartOp || cs[0].Made[0].Map {
		t.Errorf("first change: refs %+v made %+v", cs[0].Refs, cs[0].Made)
	}
	want := ObjRef{Actor: cs[0].Actor, Counter: cs[0].StartOp, MapKeys: false}
	if len(cs[1].Refs) != 1 || !bytes.Equal(cs[1].Refs[0].Actor, want.Actor) || cs[1].Refs[0].Counter != want.Counter || cs[1].Refs[0].MapKeys {
		t.Errorf("second change: refs %+v, want [%+v]", cs[1].Refs, want)
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

// TestAbortOnWrongKeyKind shows, in a child process, what Refs is for:
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
		t.Logf("child failed (%v) without the expected panic message:\n%s", err, out)
	}
}
