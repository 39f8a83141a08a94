package store

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tandemhq/tandem/internal/testenv"
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

// A load copies a document out of the file: it does not leave the
// file's pages resident in the process.
func TestTheFilesPagesAreNotHeldAfterALoad(t *testing.T) {
	dir := t.TempDir()
	s := openBolt(t, dir)
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

// A write that reads the file through the mapping (a compaction's Covers
// looks at every chunk) lets go of what it read, also when it comes right
// after another write let go: the drop it skipped comes dropEvery later.
func TestACompactionsPagesAreNotHeldAfterABurstOfWrites(t *testing.T) {
	s := openBolt(t, t.TempDir())
	path := s.db.Path()
	ctx := context.Background()
	chunk := bytes.Repeat([]byte("x"), 64<<10)
	w := Write{DocumentID: "doc"}
	for range 256 { // 16 MiB
		w.Chunks = append(w.Chunks, chunk)
	}
	if err := s.Write(ctx, []Write{w}); err != nil {
		t.Fatal(err)
	}
	var sum int
	compaction := Write{DocumentID: "doc", Snapshot: []byte("s"), Covers: func(c []byte) bool {
		for i := 0; i < len(c); i += 4096 { // a byte a page: every page read
			sum += int(c[i])
		}
		return false
	}}
	s.dropped.Store(time.Now().UnixNano()) // another write let go just before
	if err := s.Write(ctx, []Write{compaction}); err != nil {
		t.Fatal(err)
	}
	if sum == 0 {
		t.Fatal("the compaction read nothing")
	}
	testenv.WaitFor(t, "the compaction's pages let go", func() bool { return mappedKiB(t, path) <= 256 })
}
