package layout

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const module = "github.com/tandemhq/tandem"

// rank places each package of the module on a level: a package may import
// only packages on lower levels. Packages on one level do not import each
// other: doc and awareness know nothing of each other, nor the WebSocket
// server of the Redis bus.
var rank = map[string]int{
	"internal/auth":      0,
	"internal/lifecycle": 0,
	"internal/testenv":   0,
	"internal/layout":    0,
	"internal/smallmap":  0,
	"internal/gctune":    0,
	"internal/cmalloc":   0,
	"transport/wire":     0,
	"doc/amcheck":        0,
	"doc/amsync":         0,
	"doc/amsave":         0,
	"doc/store":          0, // the document stores, below doc, which names them in its Config
	"doc/amcheck/amtest": 1, // test changes, for doc's tests and the bench
	"doc":                1,
	"awareness":          1,
	"web/notify":         1,
	"awareness/lastseen": 2, // presence's stores, for awareness's interface
	"awareness/history":  2, // presence history: stores for awareness's interface, and their reading
	"transport":          2,
	"transport/redisbus": 2,
	"web":                3,
	"cmd/tandem":         4,
	"cmd/tandem-bench":   4,
}

type pkg struct {
	dir     string // relative to the module root
	name    string
	files   []string // non-test .go files
	imports map[string]string
}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("the module root is not two levels up: %v", err)
	}
	return dir
}

// packages reads every package of the module (node_modules excluded).
func packages(t *testing.T) map[string]*pkg {
	t.Helper()
	base := root(t)
	out := map[string]*pkg{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(base, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if name == "node_modules" || name == "testdata" || (strings.HasPrefix(name, ".") && path != base) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		rel, _ := filepath.Rel(base, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		p := out[rel]
		if p == nil {
			p = &pkg{dir: rel, name: f.Name.Name, imports: map[string]string{}}
			out[rel] = p
		}
		p.files = append(p.files, name)
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if after, ok := strings.CutPrefix(path, module+"/"); ok {
				p.imports[after] = name
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 10 {
		t.Fatalf("found only %d packages", len(out))
	}
	return out
}

// Imports go one way: from a level to the levels below it, never up and
// never across.
func TestImportsGoOneWay(t *testing.T) {
	for dir, p := range packages(t) {
		r, ok := rank[dir]
		if !ok {
			t.Errorf("package %s has no level in this test's rank: place it", dir)
			continue
		}
		for imp, file := range p.imports {
			ir, ok := rank[imp]
			if !ok {
				continue // reported as a package of its own
			}
			if ir >= r {
				t.Errorf("%s/%s imports %s: level %d imports level %d", dir, file, imp, r, ir)
			}
		}
	}
}

var fileRef = regexp.MustCompile(`\b([\w./-]+\.(?:go|md))\b`)

// Every package has a doc.go holding its package comment (and no other
// file holds one), and every file a doc.go names exists.
func TestEveryPackageHasATrueDocGo(t *testing.T) {
	base := root(t)
	for dir, p := range packages(t) {
		data, err := os.ReadFile(filepath.Join(base, dir, "doc.go"))
		if err != nil {
			t.Errorf("%s has no doc.go", dir)
			continue
		}
		want := "// Package " + p.name + " "
		if p.name == "main" {
			want = "// Command " + filepath.Base(dir) + " "
		}
		if !bytes.HasPrefix(data, []byte(want)) {
			t.Errorf("%s/doc.go does not start with %q", dir, want)
		}
		for _, f := range p.files {
			if f == "doc.go" {
				continue
			}
			other, _ := os.ReadFile(filepath.Join(base, dir, f))
			if regexp.MustCompile(`(?m)^// (Package|Command) \S+ `).Match(other) {
				t.Errorf("%s/%s holds a package comment too: keep it in doc.go", dir, f)
			}
		}
		for _, m := range fileRef.FindAllStringSubmatch(string(data), -1) {
			ref := m[1]
			if _, err := os.Stat(filepath.Join(base, dir, ref)); err == nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(base, ref)); err == nil {
				continue
			}
			t.Errorf("%s/doc.go names %s, which is not there", dir, ref)
		}
	}
}
