package cmalloc

import (
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/automerge/automerge-go"

	"github.com/tandemhq/tandem/internal/testenv"
)

// cHeapInUse reads Stats, failing the test where they cannot be read: CI
// runs on glibc.
func cHeapInUse(t *testing.T) uint64 {
	t.Helper()
	inUse, _, ok := Stats()
	if !ok {
		t.Fatal("Stats cannot read the C heap: not glibc?")
	}
	return inUse
}

func TestLimitArenas(t *testing.T) {
	if !LimitArenas(runtime.GOMAXPROCS(0)) {
		t.Fatal("LimitArenas refused")
	}
	if LimitArenas(0) {
		t.Fatal("LimitArenas(0) was taken")
	}
}

// Documents dropped by Go free their C memory when collected; Stats sees
// it fall, and Trim hands the free pages back.
func TestStatsFollowAutomergeAndTrimReleases(t *testing.T) {
	before := cHeapInUse(t)
	docs := make([]*automerge.Doc, 500)
	text := strings.Repeat("x", 16<<10)
	for i := range docs {
		docs[i] = automerge.New()
		if err := docs[i].RootMap().Set("text", text); err != nil {
			t.Fatal(err)
		}
	}
	held := cHeapInUse(t)
	if held < before+500*16<<10 {
		t.Fatalf("500 documents of 16 KiB: C heap in use %d → %d", before, held)
	}
	runtime.KeepAlive(docs)
	docs = nil
	// The documents' C memory goes when their finalizers run, after a
	// collection: poll for it.
	freed := before + (held-before)/4
	inUse := held // at the last look
	defer func() {
		if inUse > freed {
			t.Logf("C heap still holds %d bytes (was %d before the documents, %d with them)", inUse, before, held)
		}
	}()
	testenv.WaitWithin(t, "the documents' C memory freed", 20*time.Second, func() bool {
		runtime.GC()
		inUse = cHeapInUse(t)
		return inUse <= freed
	})
	if _, free, _ := Stats(); free < (held-before)/2 {
		t.Fatalf("free in the arenas: %d, after freeing about %d", free, held-before)
	}
	if !Trim() {
		t.Fatal("Trim released nothing after the documents were freed")
	}
}
