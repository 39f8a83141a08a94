package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/gorilla/websocket"

	"github.com/tandemhq/tandem/transport/wire"
)

// The document scenario measures what one document costs a server: the
// memory it holds per typed change, a fresh reader's first sync, a find
// after the server restarted (cold), and one large paste.

// restarter stops a server and starts it again on the same address and
// data; it returns the new process's pid.
type restarter func() (pid int, err error)

// documentResult is what one document run measured.
type documentResult struct {
	changes    int
	messages   int           // sync messages the writer sent
	write      time.Duration // from the first change to the server's acknowledgement of the last
	savedBytes int           // the writer's automerge Save of the document
	rssBefore  int64         // the server and its children, before the document
	rssAfter   int64         // the same, once a reader held the whole document
	// The share of rssBefore and rssAfter that the server's child
	// processes hold (a Tandem node starts none of its own).
	workersBefore, workersAfter int64
	firstSync                   time.Duration // a fresh reader's find until it holds the document
	firstSyncOwn                time.Duration // the part of it the reader spent in its automerge
	// rssSteady is the RSS after --steady of editing the document with
	// a reader following, once the reader held it (0: not measured).
	rssSteady int64

	cold     time.Duration // a fresh reader's find after a restart; 0 if not measured
	coldOwn  time.Duration // the part of it the reader spent in its automerge
	coldNote string        // why cold is not measured
	rssCold0 int64         // after the restart, before the find
	rssCold1 int64         // after the find

	pasteBytes   int
	paste        time.Duration // the writer's first message until a reader holds the text
	pasteOwn     time.Duration // the part of it the writer and the reader spent in their automerge
	pasteRefusal string        // what the server did instead, if it refused
	rssPaste0    int64
	rssPaste1    int64
	rssPaste2    int64 // after --steady of editing the pasted text
	// pasteSteadyNote says why rssPaste2 was not read, if it was not.
	pasteSteadyNote string
}

func (r documentResult) perChange() float64 {
	return float64(r.rssAfter-r.rssBefore) / float64(max(r.changes, 1))
}

func (r documentResult) perChangeSteady() float64 {
	return float64(r.rssSteady-r.rssBefore) / float64(max(r.changes, 1))
}

func (r documentResult) perPastedChar() float64 {
	return float64(r.rssPaste1-r.rssPaste0) / float64(max(r.pasteBytes, 1))
}

func (r documentResult) perPastedCharSteady() float64 {
	return float64(r.rssPaste2-r.rssPaste0) / float64(max(r.pasteBytes, 1))
}

func runDocument(ctx context.Context, o options) error {
	r, err := measureDocument(ctx, o, nil, "needs --compare, which starts the server and can restart it")
	if err != nil {
		return err
	}
	printDocument(r)
	return nil
}

func printDocument(r documentResult) {
	mib := func(b int64) float64 { return float64(b) / (1 << 20) }
	fmt.Printf("writer               %d changes in %d sync messages (%.1f per message), %v\n",
		r.changes, r.messages, float64(r.changes)/float64(max(r.messages, 1)), r.write.Round(time.Millisecond))
	fmt.Printf("saved document       %d bytes (%.1f per change)\n", r.savedBytes, float64(r.savedBytes)/float64(max(r.changes, 1)))
	if r.rssBefore > 0 {
		fmt.Printf("server RSS           %.1f → %.1f MiB: %.0f bytes per change", mib(r.rssBefore), mib(r.rssAfter), r.perChange())
		if r.workersAfter > 0 {
			fmt.Printf(" (its workers %.1f → %.1f MiB)", mib(r.workersBefore), mib(r.workersAfter))
		}
		fmt.Println()
	}
	if r.rssSteady > 0 {
		fmt.Printf("steady RSS           %.1f MiB after editing on with a reader: %.0f bytes per change\n", mib(r.rssSteady), r.perChangeSteady())
	}
	fmt.Printf("first sync           %v (the reader's automerge %v, the rest %v)\n", r.firstSync.Round(time.Millisecond),
		r.firstSyncOwn.Round(time.Millisecond), (r.firstSync - r.firstSyncOwn).Round(time.Millisecond))
	if r.coldNote != "" {
		fmt.Printf("cold find            not measured: %s\n", r.coldNote)
	} else {
		fmt.Printf("cold find            %v (the reader's automerge %v, the rest %v; RSS %.1f → %.1f MiB)\n", r.cold.Round(time.Millisecond),
			r.coldOwn.Round(time.Millisecond), (r.cold - r.coldOwn).Round(time.Millisecond), mib(r.rssCold0), mib(r.rssCold1))
	}
	if r.pasteRefusal != "" {
		fmt.Printf("paste %d bytes   refused: %s\n", r.pasteBytes, r.pasteRefusal)
		return
	}
	fmt.Printf("paste %d bytes   %v (the clients' automerge %v, the rest %v)", r.pasteBytes, r.paste.Round(time.Millisecond),
		r.pasteOwn.Round(time.Millisecond), (r.paste - r.pasteOwn).Round(time.Millisecond))
	if r.rssPaste0 > 0 {
		fmt.Printf(", RSS %.1f → %.1f MiB: %.1f bytes per character", mib(r.rssPaste0), mib(r.rssPaste1), r.perPastedChar())
		if r.rssPaste2 > 0 {
			fmt.Printf("; steady %.1f MiB: %.1f", mib(r.rssPaste2), r.perPastedCharSteady())
		}
		if r.pasteSteadyNote != "" {
			fmt.Printf("; steady not read: editing on failed: %s", r.pasteSteadyNote)
		}
	}
	fmt.Println()
}

// measureDocument runs the scenario against o.urls[0]. With restart nil
// the cold find is skipped and coldNote says why.
func measureDocument(ctx context.Context, o options, restart restarter, coldNote string) (documentResult, error) {
	fmt.Printf("document: %d typed changes, then a paste of %d bytes\n", o.changes, o.pasteBytes)
	url := o.urls[0]
	r := documentResult{changes: o.changes, pasteBytes: o.pasteBytes}
	var workers int64 // the children's share of the last rss()
	rss := func() int64 {
		var total int64
		workers = 0
		for _, pid := range withChildren(o.serverPIDs) {
			b, _ := rssBytesOf(pid) // a worker may exit between the listing and the read
			total += b
			if !slices.Contains(o.serverPIDs, pid) {
				workers += b
			}
		}
		return total
	}

	// 0. A small document first, so that what only the server's first
	// document costs is not counted per change.
	if _, err := typedDocument(ctx, url, 1, 1); err != nil {
		return r, fmt.Errorf("warm-up: %w", err)
	}

	// 1. Typed changes, then a fresh reader.
	r.rssBefore = rss()
	r.workersBefore = workers
	doc := newDocID()
	w, err := dialPeer(url)
	if err != nil {
		return r, err
	}
	defer w.ws.Close()
	d := automerge.New()
	start := time.Now()
	r.messages, err = writeTyped(ctx, w, doc, d, o.changes, max(o.batch, 1))
	if err != nil {
		return r, fmt.Errorf("writer: %w", err)
	}
	r.write = time.Since(start)
	w.ws.Close()
	r.savedBytes = len(d.Save())
	heads := d.Heads()
	if r.firstSync, r.firstSyncOwn, err = readWholeTimed(ctx, url, doc, heads); err != nil {
		return r, fmt.Errorf("first sync: %w", err)
	}
	r.rssAfter = rss()
	r.workersAfter = workers
	if o.steady > 0 {
		steady, err := editSteadily(ctx, url, doc, d, o.steady, rss)
		if err != nil {
			return r, fmt.Errorf("steady editing: %w", err)
		}
		r.rssSteady = steady
		heads = d.Heads() // the cold find waits for what was typed since
	}

	// 2. The same find after a restart.
	if restart == nil {
		r.coldNote = coldNote
	} else {
		pid, err := restart()
		if err != nil {
			return r, fmt.Errorf("restart: %w", err)
		}
		o.serverPIDs = []int{pid}
		r.rssCold0 = rss()
		if r.cold, r.coldOwn, err = readWholeTimed(ctx, url, doc, heads); err != nil {
			return r, fmt.Errorf("cold find: %w", err)
		}
		r.rssCold1 = rss()
	}

	// 3. One large paste, from a steady state: the cold find's moment
	// is past.
	if o.steady > 0 {
		if _, err := editSteadily(ctx, url, doc, d, o.steady, rss); err != nil {
			return r, fmt.Errorf("steady editing before the paste: %w", err)
		}
	}
	// And the server's saves done (a document that goes quiet is saved,
	// a loaded one once it goes quiet): what they hold is not the paste's.
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if n, ok := savesPending(url); !ok || n == 0 {
			break
		}
	}
	r.rssPaste0 = rss()
	p, err := pasteOnce(ctx, url, o.pasteBytes)
	if err != nil {
		return r, fmt.Errorf("paste: %w", err)
	}
	r.paste, r.pasteOwn, r.pasteRefusal = p.took, p.own, p.refusal
	r.rssPaste1 = rss()
	if o.steady > 0 && r.pasteRefusal == "" {
		if steady, err := editSteadily(ctx, url, p.doc, p.d, o.steady, rss); err != nil {
			// Reported, not fatal: what was measured before stands.
			r.pasteSteadyNote = err.Error()
		} else {
			r.rssPaste2 = steady
		}
	}
	return r, nil
}

// typedText is what the writer types, one character a change, over again.
const typedText = "The quick brown fox jumps over the lazy dog, then types on. "

// writeTyped has a writer type n characters of typedText into a new
// text, one change each, as fast as it can but at most batch ahead of
// what it has sent, while it syncs them as automerge-repo does: one
// message in flight, the next carrying whatever accumulated meanwhile
// (with batch 1, one change a message, as from a typist slower than the
// server's round trip). It returns once the
// server acknowledged every change, with the messages it sent.
func writeTyped(ctx context.Context, w *peer, doc string, d *automerge.Doc, n, batch int) (int, error) {
	var mu sync.Mutex         // guards d, state, made and sent between the typist and the sync loop
	room := sync.NewCond(&mu) // signalled when sent moves
	state := automerge.NewSyncState(d)
	d.RootMap().Set("text", automerge.NewText(""))
	if _, err := d.Commit("create"); err != nil {
		return 0, err
	}
	typed := make(chan struct{}, 1) // a change was made since the sync loop last looked
	typing, stopTyping := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopTyping()
		mu.Lock()
		room.Broadcast()
		mu.Unlock()
		wg.Wait()
	}()
	var made, sent int // changes made, and made before the last message
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n && typing.Err() == nil; i++ {
			mu.Lock()
			for made-sent >= batch && typing.Err() == nil {
				room.Wait()
			}
			d.Path("text").Text().Append(typedText[i%len(typedText) : i%len(typedText)+1])
			d.Commit("type")
			made = i + 1
			mu.Unlock()
			select {
			case typed <- struct{}{}:
			default:
			}
		}
	}()
	messages := 0
	for {
		mu.Lock()
		m, ok := state.GenerateMessage()
		done := made == n
		if ok {
			sent = made
			room.Broadcast()
		}
		mu.Unlock()
		if !ok {
			if done {
				return messages, nil
			}
			select {
			case <-typed:
				continue
			case <-ctx.Done():
				return messages, ctx.Err()
			}
		}
		if err := w.send(&wire.Message{Type: wire.TypeSync, DocumentID: doc, Data: m.Bytes()}); err != nil {
			return messages, err
		}
		messages++
		reply, err := awaitSync(w, doc, time.Minute)
		if err != nil {
			return messages, err
		}
		mu.Lock()
		_, err = state.ReceiveMessage(reply)
		mu.Unlock()
		if err != nil {
			return messages, err
		}
	}
}

// typedDocument writes a document of n typed changes and has a reader
// find it; it returns the time the reader took.
func typedDocument(ctx context.Context, url string, n, batch int) (time.Duration, error) {
	w, err := dialPeer(url)
	if err != nil {
		return 0, err
	}
	defer w.ws.Close()
	doc, d := newDocID(), automerge.New()
	if _, err := writeTyped(ctx, w, doc, d, n, batch); err != nil {
		return 0, err
	}
	return readWhole(ctx, url, doc, d.Heads())
}

var (
	// errRefused is a server's refusal: an error message or a close.
	errRefused = errors.New("refused")
	// errUnavailable is a server's doc-unavailable.
	errUnavailable = errors.New("document unavailable")
)

// awaitSync reads until a sync message of doc arrives and returns its
// data. An error message or a close is errRefused, wrapped with what the
// server said.
func awaitSync(p *peer, doc string, timeout time.Duration) ([]byte, error) {
	p.ws.SetReadDeadline(time.Now().Add(timeout))
	defer p.ws.SetReadDeadline(time.Time{})
	for {
		m, err := p.recv()
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%w: close %d %q", errRefused, ce.Code, ce.Text)
		}
		if err != nil {
			return nil, err
		}
		switch {
		case m.Type == wire.TypeDocUnavailable && m.DocumentID == doc:
			return nil, errUnavailable
		case m.Type == wire.TypeError:
			return nil, fmt.Errorf("%w: error message %q", errRefused, m.ErrorMessage)
		case m.Type == wire.TypeSync && m.DocumentID == doc:
			return m.Data, nil
		}
	}
}

// readWhole has a fresh reader find doc and answer the server's sync
// messages until its heads are heads; it returns how long that took.
func readWhole(ctx context.Context, url, doc string, heads []automerge.ChangeHash) (time.Duration, error) {
	total, _, err := readWholeTimed(ctx, url, doc, heads)
	return total, err
}

// readWholeTimed is readWhole that also returns how much of the time the
// reader spent in its own automerge (taking the server's messages in and
// making its answers): the rest is the server's, and the wire's.
func readWholeTimed(ctx context.Context, url, doc string, heads []automerge.ChangeHash) (total, own time.Duration, err error) {
	want := hashSet(heads)
	p, err := dialPeer(url)
	if err != nil {
		return 0, 0, err
	}
	defer p.ws.Close()
	d := automerge.New()
	state := automerge.NewSyncState(d)
	start := time.Now()
	if err := p.send(&wire.Message{Type: wire.TypeRequest, DocumentID: doc, Data: mustFirst(state)}); err != nil {
		return 0, 0, err
	}
	for {
		if ctx.Err() != nil {
			return 0, 0, ctx.Err()
		}
		data, err := awaitSync(p, doc, time.Minute)
		if errors.Is(err, errUnavailable) {
			continue // the server sends the document if it appears
		}
		if err != nil {
			return 0, 0, err
		}
		t := time.Now()
		if _, err := state.ReceiveMessage(data); err != nil {
			return 0, 0, err
		}
		if slices.Equal(hashSet(d.Heads()), want) {
			own += time.Since(t)
			return time.Since(start), own, nil
		}
		m, ok := state.GenerateMessage()
		own += time.Since(t)
		if ok {
			if err := p.send(&wire.Message{Type: wire.TypeSync, DocumentID: doc, Data: m.Bytes()}); err != nil {
				return 0, 0, err
			}
		}
	}
}

// pasted is what pasteOnce did.
type pasted struct {
	doc     string
	d       *automerge.Doc // the writer's copy
	took    time.Duration  // from the writer's first message until a reader held the text
	own     time.Duration  // the part of it the writer and the reader spent in their automerge
	refusal string         // what the server did instead, if it refused
}

// pasteOnce creates a document whose text is size bytes, made in one
// change as repo.create({text}) makes it, syncs it, and times from the
// writer's first message until a fresh reader holds it. A server that
// refuses it yields the refusal and no error.
func pasteOnce(ctx context.Context, url string, size int) (pasted, error) {
	p := pasted{doc: newDocID(), d: automerge.New()}
	w, err := dialPeer(url)
	if err != nil {
		return p, err
	}
	defer w.ws.Close()
	d := p.d
	d.RootMap().Set("text", automerge.NewText(strings.Repeat("lorem ipsum ", size/12+1)[:size]))
	if _, err := d.Commit("paste"); err != nil {
		return p, err
	}
	state := automerge.NewSyncState(d)
	start := time.Now()
	for round := 0; ; round++ {
		t := time.Now()
		m, ok := state.GenerateMessage()
		var data []byte
		if ok {
			data = m.Bytes()
		}
		p.own += time.Since(t)
		if !ok {
			break
		}
		if round == 20 {
			p.refusal = fmt.Sprintf("not acknowledged after %d sync messages", round)
			return p, nil
		}
		if err := w.send(&wire.Message{Type: wire.TypeSync, DocumentID: p.doc, Data: data}); err != nil {
			return p, err
		}
		reply, err := awaitSync(w, p.doc, time.Minute)
		if errors.Is(err, errRefused) {
			p.refusal = strings.TrimPrefix(err.Error(), errRefused.Error()+": ")
			return p, nil
		}
		if err != nil {
			return p, err
		}
		t = time.Now()
		_, err = state.ReceiveMessage(reply)
		p.own += time.Since(t)
		if err != nil {
			return p, err
		}
	}
	_, own, err := readWholeTimed(ctx, url, p.doc, d.Heads())
	if err != nil {
		return p, fmt.Errorf("reader: %w", err)
	}
	p.own += own
	p.took = time.Since(start)
	return p, nil
}

// steadyRate is how fast editSteadily's typist types: a person typing.
const steadyRate = 10

// editSteadily has a typist type into doc's text, one character a
// change at steadyRate a second, and a fresh reader follow, both syncing
// as automerge-repo does, for dur: the document as it is while people
// use it, so that what a server holds then, not what it held for a
// moment while it sent the whole document, is what is read. It reads
// rss once a second over the second half of dur and returns the median:
// one reading catches the collector's and the runtime's moments.
func editSteadily(ctx context.Context, url, doc string, d *automerge.Doc, dur time.Duration, rss func() int64) (int64, error) {
	reader, err := dialPeer(url)
	if err != nil {
		return 0, err
	}
	defer reader.ws.Close()
	rd := automerge.New()
	rs := automerge.NewSyncState(rd)
	if err := reader.send(&wire.Message{Type: wire.TypeRequest, DocumentID: doc, Data: mustFirst(rs)}); err != nil {
		return 0, err
	}
	readCtx, stop := context.WithCancel(ctx)
	defer stop()
	readErr := make(chan error, 1)
	go func() {
		for readCtx.Err() == nil {
			data, err := awaitSync(reader, doc, time.Minute)
			if err != nil {
				if readCtx.Err() != nil {
					err = nil
				}
				readErr <- err
				return
			}
			if _, err := rs.ReceiveMessage(data); err != nil {
				readErr <- err
				return
			}
			if m, ok := rs.GenerateMessage(); ok {
				if err := reader.send(&wire.Message{Type: wire.TypeSync, DocumentID: doc, Data: m.Bytes()}); err != nil {
					readErr <- err
					return
				}
			}
		}
		readErr <- nil
	}()
	w, err := dialPeer(url)
	if err != nil {
		return 0, err
	}
	defer w.ws.Close()
	ws := automerge.NewSyncState(d)
	tick := time.NewTicker(time.Second / steadyRate)
	defer tick.Stop()
	start := time.Now()
	end := start.Add(dur)
	var readings []int64
	for i := 0; time.Now().Before(end); i++ {
		if i%steadyRate == 0 && time.Since(start) >= dur/2 {
			readings = append(readings, rss())
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case err := <-readErr:
			return 0, fmt.Errorf("reader: %w", err)
		case <-tick.C:
		}
		if i > 0 {
			d.Path("text").Text().Append(typedText[i%len(typedText) : i%len(typedText)+1])
			d.Commit("type")
		}
		for {
			m, ok := ws.GenerateMessage()
			if !ok {
				break
			}
			if err := w.send(&wire.Message{Type: wire.TypeSync, DocumentID: doc, Data: m.Bytes()}); err != nil {
				return 0, err
			}
			reply, err := awaitSync(w, doc, time.Minute)
			if err != nil {
				return 0, err
			}
			if _, err := ws.ReceiveMessage(reply); err != nil {
				return 0, err
			}
		}
	}
	if len(readings) == 0 {
		readings = append(readings, rss())
	}
	stop()
	reader.ws.Close()
	<-readErr // its connection ends with the run
	slices.Sort(readings)
	return readings[len(readings)/2], nil
}

func hashSet(hs []automerge.ChangeHash) []string {
	s := make([]string, len(hs))
	for i, h := range hs {
		s[i] = h.String()
	}
	slices.Sort(s)
	return s
}

// withChildren returns pids and every descendant of theirs (a server that
// runs workers).
func withChildren(pids []int) []int {
	all := slices.Clone(pids)
	for i := 0; i < len(all); i++ { // all grows as children are found
		all = append(all, childrenOf(all[i])...)
	}
	return all
}

// savesPending reads tandem_document_saves_pending from the /metrics of
// the server at wsURL (ws://host/ws); false from a server without it
// (the stock server).
func savesPending(wsURL string) (float64, bool) {
	base := "http://" + strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws://"), "/ws")
	c := http.Client{Timeout: 2 * time.Second}
	res, err := c.Get(base + "/metrics")
	if err != nil {
		return 0, false
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "tandem_document_saves_pending "); ok {
			n, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return n, err == nil
		}
	}
	return 0, false
}
