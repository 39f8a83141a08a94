package doc

import (
	"bytes"
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tandemhq/tandem/doc/amcheck"
	"github.com/tandemhq/tandem/doc/amcheck/amtest"
	"github.com/tandemhq/tandem/doc/amdoc"
	"github.com/tandemhq/tandem/doc/amsync"
	"github.com/tandemhq/tandem/doc/store"
	"github.com/tandemhq/tandem/internal/testenv"
)

// jsFlags is the flags section stock JS automerge 3.5 ends each of its
// sync messages with: it reads a message's changes as one.
var jsFlags = []byte{0x02, 0x02, 0x84}

// savedDocument waits, up to 10 s, for the room's saved document, and
// returns how many changes it holds and its bytes.
func savedDocument(t testing.TB, r *room) (n int, saved []byte) {
	t.Helper()
	testenv.WaitFor(t, "the saved document", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		n, saved = r.log.Saved()
		return n > 0
	})
	return n, saved
}

// A large document is saved for new readers: a peer that
// has nothing and sends a flags section is sent the saved document and
// then the changes since, in one entry, which load to the document's
// heads; a peer whose messages carry no flags (automerge-go 0.5) is sent
// the changes.
func TestANewReaderOfALargeDocumentIsSentItSaved(t *testing.T) {
	all := amtest.Typing(savedMinChanges + 200)
	var snapshot []byte
	for _, c := range all {
		snapshot = append(snapshot, c...)
	}
	s := openStore(t, t.TempDir())
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Snapshot: snapshot}}); err != nil {
		t.Fatal(err)
	}
	h := newTestHub(t, s, Config{SaveDocument: amdoc.NewSaver(1).Save, SaveQuiet: time.Millisecond})
	r := roomOf(t, h, testDoc)
	n, saved := savedDocument(t, r)
	if n != len(all) {
		t.Fatalf("the saved document holds %d changes, want the %d loaded", n, len(all))
	}
	heads := r.docHeads()

	fresh := automerge.NewSyncState(automerge.New())
	request, _ := fresh.GenerateMessage()
	for _, tc := range []struct {
		name    string
		data    []byte
		entries int
	}{
		{"with flags", append(slices.Clone(request.Bytes()), jsFlags...), 1},
		{"without flags", request.Bytes(), len(all)},
	} {
		p := &fakePeer{id: tc.name, told: make(chan struct{}, 1)}
		if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: tc.data, Request: true}); err != nil {
			t.Fatal(err)
		}
		syncs := p.takeSyncs()
		if len(syncs) != 1 {
			t.Fatalf("%s: sent %d messages, want 1", tc.name, len(syncs))
		}
		m, err := amsync.Decode(syncs[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(m.Changes) != tc.entries {
			t.Fatalf("%s: the changes came in %d entries, want %d", tc.name, len(m.Changes), tc.entries)
		}
		if tc.entries != 1 {
			continue
		}
		if !bytes.HasPrefix(m.Changes[0], saved) {
			t.Fatalf("%s: the entry does not begin with the saved document", tc.name)
		}
		d, err := automerge.Load(m.Changes[0])
		if err != nil {
			t.Fatalf("%s: the entry does not load: %v", tc.name, err)
		}
		if !sameHeads(d.Heads(), heads) {
			t.Fatalf("%s: the entry loads to %v, want %v", tc.name, d.Heads(), heads)
		}
	}
}

// A document is saved once it has savedMinChanges changes (or
// savedMinBytes), and again only once its bytes have grown by more than an
// eighth since the last save was taken.
func TestADocumentIsSavedAgainAfterGrowingByAnEighth(t *testing.T) {
	all := amtest.Typing(2000)
	s := openStore(t, t.TempDir())
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Snapshot: slices.Concat(all[:900]...)}}); err != nil {
		t.Fatal(err)
	}
	saves := make(chan int, 10)
	h := newTestHub(t, s, Config{SaveDocument: countedSaves(saves), SaveQuiet: time.Hour})
	r := roomOf(t, h, testDoc)
	tried := func() int64 {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.saveTried
	}
	if tried() != 0 {
		t.Fatal("a document of 900 typed changes was saved")
	}
	apply := func(cs [][]byte) {
		t.Helper()
		if _, err := r.applyRemote(h, slices.Concat(cs...)); err != nil {
			t.Fatal(err)
		}
	}
	apply(all[900:1100])
	first := takeSave(t, saves)
	if want := len(slices.Concat(all[:1100]...)); first != want {
		t.Fatalf("the first save took %d bytes, want the 1,100 changes' %d", first, want)
	}
	savedDocument(t, r)   // the save is done
	apply(all[1100:1200]) // less than an eighth more
	if got := tried(); got != int64(first) {
		t.Fatalf("saved again after growing by %d of %d bytes", got-int64(first), first)
	}
	apply(all[1200:1300]) // past an eighth
	if second := takeSave(t, saves); second != len(slices.Concat(all[:1300]...)) {
		t.Fatalf("the second save took %d bytes, want the 1,300 changes' %d", second, len(slices.Concat(all[:1300]...)))
	}
}

// countedSaves saves documents (amdoc) and sends each save's size in
// bytes of changes to saves.
func countedSaves(saves chan<- int) func(context.Context, func() ([]byte, error)) ([]byte, error) {
	return func(_ context.Context, changes func() ([]byte, error)) ([]byte, error) {
		b, err := changes()
		if err != nil {
			return nil, err
		}
		saves <- len(b)
		return amdoc.Save(b)
	}
}

// takeSave waits, up to 10 s, for a save's size from countedSaves.
func takeSave(t testing.TB, saves <-chan int) int {
	t.Helper()
	select {
	case n := <-saves:
		return n
	case <-time.After(10 * time.Second):
		t.Fatal("no save within 10 s")
		return 0
	}
}

// A document just loaded is saved once it goes quiet; one that goes quiet
// is saved again if more than a sixteenth of it came since its last save,
// and not for less.
func TestADocumentThatGoesQuietIsSavedAgain(t *testing.T) {
	all := amtest.Typing(1200)
	saves := make(chan int, 10)
	stored := storeOf(t, slices.Concat(all[:1000]...))
	// Loaded, the document waits for quiet: a reader asked for it.
	waiting := newTestHub(t, stored, Config{SaveDocument: countedSaves(saves), SaveQuiet: time.Hour})
	r := roomOf(t, waiting, testDoc)
	r.mu.Lock()
	saving, armed := r.saving, r.quietDue
	r.mu.Unlock()
	if saving || !armed {
		t.Fatalf("just loaded, a save under way: %v; one waiting for quiet: %v", saving, armed)
	}
	if n := testutil.ToFloat64(waiting.savesPending); n != 1 {
		t.Fatalf("%v saves pending, want the one waiting for quiet", n)
	}
	waiting.Close(context.Background())

	h := newTestHub(t, stored, Config{SaveDocument: countedSaves(saves), SaveQuiet: 20 * time.Millisecond})
	r = roomOf(t, h, testDoc)
	if first := takeSave(t, saves); first != len(slices.Concat(all[:1000]...)) {
		t.Fatalf("the first save took %d bytes, want the 1,000 changes' %d", first, len(slices.Concat(all[:1000]...)))
	}
	savedDocument(t, r)
	quietArmed := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.quietDue
	}
	// 50 changes are less than a sixteenth of 1,050: no save is due.
	if _, err := r.applyRemote(h, slices.Concat(all[1000:1050]...)); err != nil {
		t.Fatal(err)
	}
	if quietArmed() {
		t.Fatal("a save waits for quiet after the document grew by less than a sixteenth")
	}
	// 150 more (a sixth, less than a third): saved once it goes quiet.
	if _, err := r.applyRemote(h, slices.Concat(all[1050:1200]...)); err != nil {
		t.Fatal(err)
	}
	select {
	case second := <-saves:
		if second != len(slices.Concat(all[:1200]...)) {
			t.Fatalf("the quiet save took %d bytes, want the 1,200 changes' %d", second, len(slices.Concat(all[:1200]...)))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no save within 10 s of the document going quiet")
	}
	testenv.WaitFor(t, "the saved document to hold the 1,200 changes", func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		n, _ := r.log.Saved()
		return n == 1200
	})
	if n := testutil.ToFloat64(h.savesPending); n != 0 {
		t.Fatalf("%v saves pending once the document is saved", n)
	}
}

// storeOf stores snapshot as the test document.
func storeOf(t testing.TB, snapshot []byte) store.Store {
	t.Helper()
	s := openStore(t, t.TempDir())
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Snapshot: snapshot}}); err != nil {
		t.Fatal(err)
	}
	return s
}

// storedTyping stores a snapshot of n typed changes as the test document.
func storedTyping(t testing.TB, n int) store.Store {
	t.Helper()
	var snapshot []byte
	for _, c := range amtest.Typing(n) {
		snapshot = append(snapshot, c...)
	}
	return storeOf(t, snapshot)
}

// A save under way ends when the hub closes, and is no failure.
func TestASaveUnderWayEndsWithTheHub(t *testing.T) {
	running := make(chan struct{})
	h := newTestHub(t, storedTyping(t, savedMinChanges+10), Config{SaveQuiet: time.Millisecond, SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		if _, err := changes(); err != nil {
			return nil, err
		}
		close(running)
		<-ctx.Done() // a job that would not end by itself
		return nil, ctx.Err()
	}})
	roomOf(t, h, testDoc)
	<-running
	closed := make(chan error, 1)
	go func() { closed <- h.Close(context.Background()) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the hub did not close within 10 s of a save under way")
	}
	if n := testutil.ToFloat64(h.savesFailed); n != 0 {
		t.Fatalf("%v saves counted as failed", n)
	}
}

// A room that leaves memory while its save waits for the saver is not
// copied for it, and the save is no failure.
func TestASaveOfAnEvictedRoomTakesNothing(t *testing.T) {
	turn := make(chan struct{})
	result := make(chan error, 1)
	started := make(chan struct{})
	h := newTestHub(t, storedTyping(t, savedMinChanges+10), Config{SaveQuiet: time.Millisecond, SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		close(started)
		<-turn // the saver is busy with another document
		b, err := changes()
		result <- err
		return b, err
	}})
	var once sync.Once
	release := func() { once.Do(func() { close(turn) }) }
	t.Cleanup(release) // a failure below must not leave the save waiting, and Close with it
	r := roomOf(t, h, testDoc)
	<-started
	// Eviction passes a room whose lock is taken this instant (a quiet
	// timer's, say) by, and takes it at a later pass.
	testenv.WaitFor(t, "the room evicted", func() bool {
		h.evictIdle(time.Now().Add(time.Hour))
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.evicted
	})
	release()
	if err := <-result; !errors.Is(err, errEvicted) {
		t.Fatalf("the evicted room's changes were taken: %v", err)
	}
	h.Close(context.Background())
	if n := testutil.ToFloat64(h.savesFailed); n != 0 {
		t.Fatalf("%v saves counted as failed", n)
	}
}

// A save is stored with the document: after a restart the first new
// reader is sent it at once, with no save made again.
func TestASavedDocumentIsStoredAndTakenBackAtLoad(t *testing.T) {
	s := storedTyping(t, savedMinChanges+10)
	h := newTestHub(t, s, Config{SaveDocument: amdoc.NewSaver(1).Save, SaveQuiet: time.Millisecond})
	_, saved := savedDocument(t, roomOf(t, h, testDoc))
	if err := h.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Load(context.Background(), testDoc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored.Saved, saved) {
		t.Fatal("the saved document was not stored with the document")
	}

	again := newTestHub(t, s, Config{}) // no saving: only the store can give it
	r := roomOf(t, again, testDoc)
	if n, _ := r.log.Saved(); n != savedMinChanges+11 {
		t.Fatalf("taken back at load: a saved document of %d changes, want %d", n, savedMinChanges+11)
	}
	fresh := automerge.NewSyncState(automerge.New())
	request, _ := fresh.GenerateMessage()
	p := &fakePeer{id: "reader", told: make(chan struct{}, 1)}
	if err := again.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: append(slices.Clone(request.Bytes()), jsFlags...), Request: true}); err != nil {
		t.Fatal(err)
	}
	m, err := amsync.Decode(p.takeSyncs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Changes) != 1 || !bytes.HasPrefix(m.Changes[0], saved) {
		t.Fatal("the first reader after the restart was not sent the stored saved document")
	}
}

// A stored saved document whose heads are not the log's first changes'
// (the snapshot lost changes it held, say) is not taken, and a new save
// is made.
func TestAStoredSavedDocumentThatDoesNotFitIsLeft(t *testing.T) {
	all := amtest.Typing(savedMinChanges + 10)
	d, err := automerge.Load(bytes.Join(all, nil))
	if err != nil {
		t.Fatal(err)
	}
	s := storedTyping(t, savedMinChanges) // ten changes fewer than the saved document holds
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Saved: d.Save()}}); err != nil {
		t.Fatal(err)
	}
	saves := make(chan struct{}, 1)
	h := newTestHub(t, s, Config{SaveQuiet: time.Millisecond, SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		b, err := changes()
		if err != nil {
			return nil, err
		}
		saves <- struct{}{}
		d, err := automerge.Load(b)
		if err != nil {
			return nil, err
		}
		return d.Save(), nil
	}})
	r := roomOf(t, h, testDoc)
	<-saves
	if n, _ := savedDocument(t, r); n != savedMinChanges+1 {
		t.Fatalf("a saved document of %d changes, want the log's %d", n, savedMinChanges+1)
	}
}

// A saved document whose write failed is not written again with the
// changes that follow: were it what the store refused, it would hold them
// back. The next save is stored in its turn.
func TestASavedDocumentThatFailedToBeStoredIsNotRetried(t *testing.T) {
	s := &store.Down{Store: storedTyping(t, savedMinChanges+10)}
	release := make(chan struct{})
	h := newTestHub(t, s, Config{SaveQuiet: time.Millisecond, SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		<-release
		b, err := changes()
		if err != nil {
			return nil, err
		}
		d, err := automerge.Load(b)
		if err != nil {
			return nil, err
		}
		return d.Save(), nil
	}})
	r := roomOf(t, h, testDoc)
	s.SetDown(true)
	close(release)
	savedDocument(t, r)
	if err := h.Flush(context.Background()); err == nil {
		t.Fatal("a write to a store that is down succeeded")
	}
	s.SetDown(false)
	if err := h.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored, err := s.Load(context.Background(), testDoc)
	if err != nil {
		t.Fatal(err)
	}
	if stored.Saved != nil {
		t.Fatal("the saved document was written again after its write failed")
	}
}

// A paste of 300,000 characters made as one change (automerge-go would
// hold about half a gigabyte saving it) is saved, and a new reader is sent
// it saved.
func TestALargePasteIsSavedForItsReaders(t *testing.T) {
	paste := amtest.Paste(300_000)
	h := newTestHub(t, storeOf(t, paste), Config{SaveDocument: amdoc.NewSaver(1).Save, SaveQuiet: time.Millisecond})
	r := roomOf(t, h, testDoc)
	n, saved := savedDocument(t, r)
	if n != 1 {
		t.Fatalf("a saved document of %d changes, want the paste's one", n)
	}
	d, err := automerge.Load(saved)
	if err != nil {
		t.Fatalf("the saved paste does not load: %v", err)
	}
	if got := d.Path("text").Text().Len(); got != 300_000 {
		t.Fatalf("the saved paste holds %d characters", got)
	}
	fresh := automerge.NewSyncState(automerge.New())
	request, _ := fresh.GenerateMessage()
	p := &fakePeer{id: "reader", told: make(chan struct{}, 1)}
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: append(slices.Clone(request.Bytes()), jsFlags...), Request: true}); err != nil {
		t.Fatal(err)
	}
	m, err := amsync.Decode(p.takeSyncs()[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Changes) != 1 || !bytes.Equal(m.Changes[0], saved) {
		t.Fatal("the new reader was not sent the saved paste")
	}
}

// A new reader of a document whose save lags far behind it waits for a
// save made for it rather than be sent much of the document as changes,
// which automerge 3 takes in several times slower; a reader whose
// automerge cannot read a saved document is answered at once.
func TestANewReaderWaitsForASaveRatherThanTakeItsChanges(t *testing.T) {
	const n = savedMinChanges + 500
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	h := newTestHub(t, storedTyping(t, n), Config{SaveQuiet: time.Hour, SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		started <- struct{}{}
		<-release
		b, err := changes()
		if err != nil {
			return nil, err
		}
		return amdoc.Save(b)
	}})
	r := roomOf(t, h, testDoc)
	request := func(p *fakePeer, flags bool) {
		t.Helper()
		fresh := automerge.NewSyncState(automerge.New())
		m, _ := fresh.GenerateMessage()
		data := slices.Clone(m.Bytes())
		if flags {
			data = append(data, jsFlags...)
		}
		if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: data, Request: true}); err != nil {
			t.Fatal(err)
		}
	}
	sent := func(p *fakePeer) int {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.syncs)
	}

	old := &fakePeer{id: "automerge-go"}
	request(old, false)
	testenv.WaitFor(t, "the reader with no flags answered", func() bool { return sent(old) == 1 })
	if len(started) != 0 {
		t.Fatal("a reader that cannot read a saved document had one made")
	}

	reader := &fakePeer{id: "automerge-3"}
	request(reader, true)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no save made for the reader within 10 s")
	}
	if got := sent(reader); got != 0 {
		t.Fatalf("the reader was sent %d messages before the save it waits for", got)
	}
	close(release)
	testenv.WaitFor(t, "the reader answered once the save is made", func() bool { return sent(reader) == 1 })
	m, err := amsync.Decode(reader.takeSyncs()[0])
	if err != nil {
		t.Fatal(err)
	}
	saved, doc := r.savedNow()
	if saved != n+1 || len(m.Changes) != 1 || !bytes.Equal(m.Changes[0], doc) {
		t.Fatalf("the reader was not sent the whole document saved (%d changes saved of %d)", saved, n+1)
	}
	if got := testutil.ToFloat64(h.readersWaited); got != 1 {
		t.Fatalf("%v readers counted as waiting for a save, want 1", got)
	}
}

// savedNow returns the room's saved document and how many changes it
// holds.
func (r *room) savedNow() (int, []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.Saved()
}

// loadWatcher is a peer that records how many changes the room's log held
// when each message was sent to it.
type loadWatcher struct {
	fakePeer
	h      *Hub
	logLen []int
}

func (p *loadWatcher) SendSync(id string, data []byte) {
	n := -1
	p.h.mu.Lock()
	r := p.h.rooms[id]
	p.h.mu.Unlock()
	if r != nil {
		n = r.log.Len() // the load runs on the goroutine that sends the early save
	}
	p.mu.Lock()
	p.logLen = append(p.logLen, n)
	p.mu.Unlock()
	p.fakePeer.SendSync(id, data)
}

// firstReaderAfterARestart stores storedTyping(t, stored) with a save of
// the first saved changes of amtest.Typing(savedMinChanges+10) (more than
// the store holds: a save of changes it lacks), opens a hub on it and has
// a reader that reads saved documents send the request that loads the
// room.
func firstReaderAfterARestart(t *testing.T, stored, saved int) (*Hub, *loadWatcher, []byte) {
	t.Helper()
	doc, err := amdoc.Save(bytes.Join(amtest.Typing(savedMinChanges + 10)[:saved], nil))
	if err != nil {
		t.Fatal(err)
	}
	s := storedTyping(t, stored)
	if err := s.Write(context.Background(), []store.Write{{DocumentID: testDoc, Saved: doc}}); err != nil {
		t.Fatal(err)
	}
	h := newTestHub(t, s, Config{SaveDocument: countedSaves(make(chan int, 10)), SaveQuiet: time.Hour})
	request, _ := automerge.NewSyncState(automerge.New()).GenerateMessage()
	p := &loadWatcher{fakePeer: fakePeer{id: "reader"}, h: h}
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: append(slices.Clone(request.Bytes()), jsFlags...), Request: true}); err != nil {
		t.Fatal(err)
	}
	return h, p, doc
}

// The first reader of a document that left memory is sent its stored
// save before the room has loaded its changes, when the save covers
// every stored change, and is not sent the document again once the room
// has; its answer is then answered as usual, with nothing more to send.
func TestTheFirstReaderAfterARestartIsSentTheStoredSaveBeforeTheLoad(t *testing.T) {
	h, p, saved := firstReaderAfterARestart(t, savedMinChanges+10, savedMinChanges+11)
	syncs := p.takeSyncs()
	if len(syncs) != 1 || p.logLen[0] != 0 {
		t.Fatalf("the reader was sent %d messages, the first when the log held %v changes; want one, before the load", len(syncs), p.logLen)
	}
	m, err := amsync.Decode(syncs[0])
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Changes) != 1 || !bytes.Equal(m.Changes[0], saved) {
		t.Fatal("the early message does not carry the stored save")
	}
	if got := testutil.ToFloat64(h.readersEarly); got != 1 {
		t.Fatalf("%v readers counted as sent early, want 1", got)
	}

	// The reader takes it in (as automerge 3 does: automerge-go's sync
	// reads change chunks only, so it loads the entry) and answers with its
	// heads: nothing more is due.
	doc, err := automerge.Load(m.Changes[0])
	if err != nil {
		t.Fatal(err)
	}
	if n := doc.Path("text").Text().Len(); n != savedMinChanges+10 {
		t.Fatalf("the reader holds %d characters", n)
	}
	answer, ok := automerge.NewSyncState(doc).GenerateMessage()
	if !ok {
		t.Fatal("the reader has nothing to answer")
	}
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: append(slices.Clone(answer.Bytes()), jsFlags...)}); err != nil {
		t.Fatal(err)
	}
	for _, b := range p.takeSyncs() {
		if m, err := amsync.Decode(b); err != nil || len(m.Changes) > 0 {
			t.Fatalf("after the reader answered it was sent changes again (%v)", err)
		}
	}
}

// A stored save that lags the stored changes is sent before the load all
// the same, naming its own heads; once the reader answers with them, it
// is sent the changes the save lacks.
func TestAStoredSaveThatLagsIsSentBeforeTheLoadAndTheRestAfter(t *testing.T) {
	h, p, saved := firstReaderAfterARestart(t, savedMinChanges+10, savedMinChanges)
	syncs := p.takeSyncs()
	if len(syncs) != 1 || p.logLen[0] != 0 {
		t.Fatalf("the reader was sent %d messages, the first when the log held %v changes; want one, before the load", len(syncs), p.logLen)
	}
	m, err := amsync.Decode(syncs[0])
	if err != nil || len(m.Changes) != 1 || !bytes.Equal(m.Changes[0], saved) {
		t.Fatalf("the early message does not carry the stored save (%v)", err)
	}
	doc, err := automerge.Load(saved)
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := automerge.NewSyncState(doc).GenerateMessage()
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: append(slices.Clone(answer.Bytes()), jsFlags...)}); err != nil {
		t.Fatal(err)
	}
	// automerge 3 reads the changes as one entry; automerge-go cannot, so
	// the entry is taken in here chunk by chunk.
	testenv.WaitFor(t, "the changes the save lacks", func() bool {
		for _, b := range p.takeSyncs() {
			m, err := amsync.Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			for _, entry := range m.Changes {
				if err := doc.LoadIncremental(entry); err != nil {
					t.Fatal(err)
				}
			}
		}
		return doc.Path("text").Text().Len() == savedMinChanges+10
	})
}

// A stored save whose heads the store does not hold (it holds fewer
// changes than the save) is not sent before the load.
func TestAStoredSaveOfChangesTheStoreLacksIsNotSentBeforeTheLoad(t *testing.T) {
	h, p, _ := firstReaderAfterARestart(t, savedMinChanges, savedMinChanges+11)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.logLen {
		if n == 0 {
			t.Fatal("the reader was sent a message before the load")
		}
	}
	if got := testutil.ToFloat64(h.readersEarly); got != 0 {
		t.Fatalf("%v readers counted as sent early", got)
	}
}

// A reader waits for a save savedReaderWait at most: a saver busy with
// other documents does not hold it. Then it is sent what there is.
func TestAReaderWaitsForASaveNoLongerThanItsDeadline(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	h := newTestHub(t, storedTyping(t, savedMinChanges+500), Config{SaveQuiet: time.Hour, SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil, errors.New("no save today")
	}})
	request, _ := automerge.NewSyncState(automerge.New()).GenerateMessage()
	p := &fakePeer{id: "reader", told: make(chan struct{}, 1)}
	start := time.Now()
	if err := h.Sync(context.Background(), p, SyncMessage{DocumentID: testDoc, Data: append(slices.Clone(request.Bytes()), jsFlags...), Request: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.told:
	case <-time.After(savedReaderWait + 10*time.Second):
		t.Fatal("the reader was not answered while the save it waited for did not come")
	}
	if waited := time.Since(start); waited < savedReaderWait {
		t.Fatalf("answered after %v, before its deadline", waited)
	}
	m, err := amsync.Decode(p.takeSyncs()[0])
	if err != nil || len(m.Changes) == 0 {
		t.Fatalf("the reader was not sent the document's changes (%v)", err)
	}
}

// A read that asks for the saved form (the REST API's /saved) is given
// the room's save when it holds every change, with no copy of the
// changes; once the document has grown past it, the changes. Size says
// which before the read.
func TestAReadForTheSavedFormIsGivenTheRoomsSave(t *testing.T) {
	s := storedTyping(t, savedMinChanges+10)
	var saves atomic.Int32
	// The first save is made; later ones wait for the hub's end, so that
	// the room's save stays behind the document once it grows.
	saveOnce := func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
		if saves.Add(1) > 1 {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		b, err := changes()
		if err != nil {
			return nil, err
		}
		return amdoc.Save(b)
	}
	h := newTestHub(t, s, Config{SaveDocument: saveOnce, SaveQuiet: time.Millisecond})
	_, saved := savedDocument(t, roomOf(t, h, testDoc))
	ctx := context.Background()
	size, err := h.Size(ctx, testDoc)
	if err != nil || !size.Saved || size.Ops == 0 || size.Bytes == 0 {
		t.Fatalf("Size = %+v, %v; want a saved document of some ops and bytes", size, err)
	}
	d, err := h.Read(ctx, testDoc, ReadQuery{Saved: true})
	if err != nil || !bytes.Equal(d.Saved, saved) || d.Changes != nil {
		t.Fatalf("Read(Saved) gave %d saved bytes and %d of changes (%v); want the save alone", len(d.Saved), len(d.Changes), err)
	}
	if d, _ := h.Read(ctx, testDoc, ReadQuery{}); d.Saved != nil || int64(len(d.Changes)) != size.Bytes {
		t.Fatalf("a read of the changes gave %d saved bytes and %d of changes; want %d of changes", len(d.Saved), len(d.Changes), size.Bytes)
	}

	// storedTyping(n) holds n+1 changes: the next is the (n+2)th.
	next := amtest.Typing(savedMinChanges + 12)[savedMinChanges+11]
	if _, err := h.Write(ctx, &fakePeer{id: "writer"}, testDoc, next); err != nil {
		t.Fatal(err)
	}
	if size, _ := h.Size(ctx, testDoc); size.Saved {
		t.Fatal("Size says the save holds every change after the document grew")
	}
	if d, _ := h.Read(ctx, testDoc, ReadQuery{Saved: true}); d.Saved != nil || len(d.Changes) == 0 {
		t.Fatal("a read for the saved form of a document grown past its save was not given its changes")
	}
}

// appliedObserver is an Observer whose Applied calls applied.
type appliedObserver struct {
	funcObserver
	applied func()
}

func (o *appliedObserver) Applied(Peer, iter.Seq[*amcheck.Change], bool) { o.applied() }

// The save of a paste starts as the room takes it, while the observer
// reads the changes and the message still holds the room: the save that
// a new reader will wait for does not wait for the observer too.
func TestAPastesSaveStartsWhileTheObserverReadsIt(t *testing.T) {
	paste := amtest.Paste(300_000)
	c, err := amcheck.ParseSyncChange(paste, amcheck.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	took := make(chan []byte, 1)
	obs := &appliedObserver{applied: func() {
		select {
		case <-took:
		case <-time.After(10 * time.Second):
			t.Error("the save took no changes while the observer read them")
		}
	}}
	h := newTestHub(t, openStore(t, t.TempDir()), Config{
		Observe:   func(Room) Observer { return obs },
		SaveQuiet: time.Hour,
		SaveDocument: func(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
			b, err := changes()
			if err == nil {
				took <- b
			}
			return amdoc.SaveContext(ctx, b)
		},
	})
	msg := (&amsync.Message{Heads: []amsync.Hash{c.Hash}, Have: []amsync.Have{{}}, Changes: [][]byte{paste}}).Encode()
	if err := h.Sync(context.Background(), &fakePeer{id: "writer"}, SyncMessage{DocumentID: testDoc, Data: msg}); err != nil {
		t.Fatal(err)
	}
	r := roomOf(t, h, testDoc)
	if n, _ := savedDocument(t, r); n != 1 {
		t.Fatalf("a saved document of %d changes, want the paste's one", n)
	}
}
