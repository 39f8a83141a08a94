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

// levels reads the level of each package of the module from the table
// in cmd/tandem/ARCHITECTURE.md (rows "| level | `pkg`, `pkg` |"), the one
// place it is written: a package may import only packages on lower
// levels, and packages on one level do not import each other (doc and
// awareness know nothing of each other, nor the WebSocket server of the
// Redis bus). "dir/*" places every package under dir.
func levels(t *testing.T) (exact map[string]int, under map[string]int) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root(t), "cmd/tandem/ARCHITECTURE.md"))
	if err != nil {
		t.Fatal(err)
	}
	exact, under = map[string]int{}, map[string]int{}
	row := regexp.MustCompile(`(?m)^\| (\d+) \| (.+) \|$`)
	name := regexp.MustCompile("`([^`]+)`")
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		level, _ := strconv.Atoi(m[1])
		for _, n := range name.FindAllStringSubmatch(m[2], -1) {
			if dir, ok := strings.CutSuffix(n[1], "/*"); ok {
				under[dir] = level
			} else {
				exact[n[1]] = level
			}
		}
	}
	if len(exact) < 10 {
		t.Fatalf("read only %d packages from ARCHITECTURE.md's level table", len(exact))
	}
	return exact, under
}

// levelOf returns a package's level from the table, if it has one.
func levelOf(exact, under map[string]int, dir string) (int, bool) {
	if l, ok := exact[dir]; ok {
		return l, true
	}
	for d, l := range under {
		if strings.HasPrefix(dir, d+"/") {
			return l, true
		}
	}
	return 0, false
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
	exact, under := levels(t)
	all := packages(t)
	for dir := range exact {
		if _, ok := all[dir]; !ok {
			t.Errorf("ARCHITECTURE.md's level table names %s, which is not a package", dir)
		}
	}
	for dir, p := range all {
		r, ok := levelOf(exact, under, dir)
		if !ok {
			t.Errorf("package %s has no level in ARCHITECTURE.md's level table: place it", dir)
			continue
		}
		for imp, file := range p.imports {
			ir, ok := levelOf(exact, under, imp)
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
