package amtest

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// Oracle is stock automerge (the JS package stock clients run), in a
// node process the tests of a package share (oracle.mjs beside this
// file; the module's node_modules must be installed: npm ci).
type Oracle struct {
	mu  sync.Mutex
	in  *json.Encoder
	out *bufio.Scanner
}

var (
	oracleOnce sync.Once
	oracle     *Oracle
	oracleErr  error
)

// StockAutomerge returns the oracle, started on first use.
func StockAutomerge(t testing.TB) *Oracle {
	t.Helper()
	oracleOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		cmd := exec.Command("node", filepath.Join(filepath.Dir(file), "oracle.mjs"))
		in, err := cmd.StdinPipe()
		if err != nil {
			oracleErr = err
			return
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			oracleErr = err
			return
		}
		if oracleErr = cmd.Start(); oracleErr != nil {
			return
		}
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		oracle = &Oracle{in: json.NewEncoder(in), out: sc}
	})
	if oracleErr != nil {
		t.Fatalf("stock automerge (node oracle.mjs in doc/amcheck/amtest; run npm ci first): %v", oracleErr)
	}
	return oracle
}

// Call sends the oracle a request (see oracle.mjs for the ops) and reads
// its answer into res.
func (o *Oracle) Call(t testing.TB, req, res any) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.in.Encode(req); err != nil {
		t.Fatalf("stock automerge: %v", err)
	}
	if !o.out.Scan() {
		t.Fatalf("stock automerge ended: %v", o.out.Err())
	}
	if err := json.Unmarshal(o.out.Bytes(), res); err != nil {
		t.Fatalf("stock automerge answered %q: %v", o.out.Bytes(), err)
	}
}

func b64s(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = base64.StdEncoding.EncodeToString(b)
	}
	return out
}

// Trace returns a random editing session's changes, as stock automerge
// makes them, in the order they were made.
func (o *Oracle) Trace(t testing.TB, seed, steps int) [][]byte {
	var res struct{ Changes []string }
	o.Call(t, map[string]any{"op": "trace", "seed": seed, "steps": steps}, &res)
	out := make([][]byte, len(res.Changes))
	for i, s := range res.Changes {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// Applies reports whether stock automerge applies changes on top of base
// and keeps working on the result (materialize, save and load, sync to a
// fresh peer and to one at base).
func (o *Oracle) Applies(t testing.TB, base, changes [][]byte) (bool, string) {
	var res struct {
		OK  bool
		Err string
	}
	o.Call(t, map[string]any{"op": "apply", "base": b64s(base), "changes": b64s(changes)}, &res)
	return res.OK, res.Err
}

// Cases returns small editing sessions, by name, made to reach what
// random ones rarely do (see oracle.mjs).
func (o *Oracle) Cases(t testing.TB) map[string][][]byte {
	var res struct{ Cases map[string][]string }
	o.Call(t, map[string]any{"op": "cases"}, &res)
	out := make(map[string][][]byte, len(res.Cases))
	for name, cs := range res.Cases {
		for _, s := range cs {
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = append(out[name], b)
		}
	}
	return out
}

// Save returns the document the changes make, as stock automerge saves
// it.
func (o *Oracle) Save(t testing.TB, changes [][]byte) []byte {
	var res struct{ Doc string }
	o.Call(t, map[string]any{"op": "save", "changes": b64s(changes)}, &res)
	b, err := base64.StdEncoding.DecodeString(res.Doc)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Changes returns the changes stock automerge gives for the document it
// loads from doc (getAllChanges), in its order.
func (o *Oracle) Changes(t testing.TB, doc []byte) [][]byte {
	var res struct{ Changes []string }
	o.Call(t, map[string]any{"op": "changes", "doc": base64.StdEncoding.EncodeToString(doc)}, &res)
	out := make([][]byte, len(res.Changes))
	for i, c := range res.Changes {
		b, err := base64.StdEncoding.DecodeString(c)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// LoadsAs reports whether stock automerge loads doc as the document the
// changes make: the same heads, changes and content, and the same bytes
// when it saves it again.
func (o *Oracle) LoadsAs(t testing.TB, changes [][]byte, doc []byte) (bool, string) {
	var res struct {
		OK  bool
		Err string
	}
	o.Call(t, map[string]any{"op": "load", "changes": b64s(changes), "doc": base64.StdEncoding.EncodeToString(doc)}, &res)
	return res.OK, res.Err
}

// View returns the document the changes make, at heads (hex; nil: its
// own), as stock automerge's toJS shows it, in JSON.
func (o *Oracle) View(t testing.TB, changes [][]byte, heads []string) []byte {
	var res struct{ JSON string }
	o.Call(t, map[string]any{"op": "view", "changes": b64s(changes), "heads": heads}, &res)
	return []byte(res.JSON)
}

// Scalars returns a small session with every scalar type but bytes,
// some values overwritten concurrently (see oracle.mjs).
func (o *Oracle) Scalars(t testing.TB) [][]byte {
	var res struct{ Changes []string }
	o.Call(t, map[string]any{"op": "scalars"}, &res)
	out := make([][]byte, len(res.Changes))
	for i, s := range res.Changes {
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	return out
}

// Edit makes edits (as the REST API's PATCH takes them) with stock
// automerge's JS API in one change on the changes' document and returns
// what toJS shows of it then, in JSON; or why automerge refused them.
func (o *Oracle) Edit(t testing.TB, changes [][]byte, edits any) ([]byte, string) {
	var res struct{ JSON, Err string }
	o.Call(t, map[string]any{"op": "edit", "changes": b64s(changes), "edits": edits}, &res)
	return []byte(res.JSON), res.Err
}
