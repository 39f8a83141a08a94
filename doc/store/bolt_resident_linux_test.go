package store

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
)

// mappedKiB is what this process holds resident of the files mapped from
// path, in KiB, read from /proc/self/smaps.
func mappedKiB(t *testing.T, path string) int {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	total, in := 0, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if fields := strings.Fields(line); len(fields) > 0 && strings.Contains(fields[0], "-") {
			in = strings.HasSuffix(line, path) // a mapping's first line
			continue
		}
		if in && strings.HasPrefix(line, "Rss:") {
			n, _ := strconv.Atoi(strings.Fields(line)[1])
			total += n
		}
	}
	return total
}

// A load copies a document out of the file and a write reads the tree
// through it: neither leaves the file's pages resident in the process.
func TestTheFilesPagesAreNotHeldAfterALoadOrAWrite(t *testing.T) {
	dir := t.TempDir()
	s := openBolt(t, dir)
	s.dropEvery = 0 // every write lets go, so that the last one's pages are not held either
	path := s.db.Path()
	ctx := context.Background()
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	for i := range 8 {
		w := Write{DocumentID: "doc" + strconv.Itoa(i)}
		for range 64 {
			w.Chunks = append(w.Chunks, chunk)
		}
		if err := s.Write(ctx, []Write{w}); err != nil {
			t.Fatal(err)
		}
	}
	if kib := mappedKiB(t, path); kib > 256 {
		t.Fatalf("%d KiB of the file resident after 32 MiB written, want at most 256", kib)
	}
	for i := range 8 {
		got, err := s.Load(ctx, "doc"+strconv.Itoa(i))
		if err != nil || len(got.Chunks) != 64 || !bytes.Equal(got.Chunks[63], chunk) {
			t.Fatalf("load: %d chunks, err %v", len(got.Chunks), err)
		}
	}
	if kib := mappedKiB(t, path); kib > 256 {
		t.Fatalf("%d KiB of the file resident after 32 MiB loaded, want at most 256", kib)
	}
}
