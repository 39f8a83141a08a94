package doc

import (
	"bufio"
	"container/list"
	"fmt"
	"io"
	"os"
	"os/exec"

	"github.com/automerge/automerge-go"
)

// sandboxCopies is how many documents a worker keeps a copy of; the least
// recently checked goes first, and is caught up again when it comes back.
const sandboxCopies = 128

// ServeSandbox is a sandbox worker's main loop: it answers the requests
// of a Sandbox on in and out until in ends. A fault in automerge ends the
// process, which is the point: the Sandbox sees it and refuses the message.
func ServeSandbox(in io.Reader, out io.Writer) error {
	r := bufio.NewReaderSize(in, 64<<10)
	w := bufio.NewWriterSize(out, 4<<10)
	sw := &sandboxCopyCache{byID: make(map[string]*list.Element), lru: list.New()}
	for {
		req, err := readFrame(r)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		reply := sw.handle(req)
		if err := writeFrame(w, reply); err != nil {
			return err
		}
		if err := w.Flush(); err != nil {
			return err
		}
	}
}

type sandboxCopy struct {
	id  string
	doc *automerge.Doc
}

type sandboxCopyCache struct {
	byID map[string]*list.Element
	lru  *list.List // of *sandboxCopy, most recent first
}

func (c *sandboxCopyCache) get(id string) *sandboxCopy {
	e := c.byID[id]
	if e == nil {
		return nil
	}
	c.lru.MoveToFront(e)
	return e.Value.(*sandboxCopy)
}

func (c *sandboxCopyCache) put(id string, d *automerge.Doc) {
	if e := c.byID[id]; e != nil {
		e.Value.(*sandboxCopy).doc = d
		c.lru.MoveToFront(e)
		return
	}
	c.byID[id] = c.lru.PushFront(&sandboxCopy{id: id, doc: d})
	for c.lru.Len() > sandboxCopies {
		old := c.lru.Remove(c.lru.Back()).(*sandboxCopy)
		delete(c.byID, old.id)
	}
}

func (c *sandboxCopyCache) handle(req []byte) []byte {
	fr := &frameReader{b: req[1:]}
	switch req[0] {
	case sbCheck:
		id := string(fr.bytes())
		heads := fr.heads()
		msg := fr.bytes()
		if fr.err != nil {
			return append([]byte{sbRejected}, fr.err.Error()...)
		}
		cp := c.get(id)
		if cp == nil {
			return []byte{sbBehind}
		}
		if ours := cp.doc.Heads(); !sameHeads(ours, heads) {
			return appendHeads([]byte{sbBehind}, ours)
		}
		if err := rehearse(cp.doc, msg); err != nil {
			return append([]byte{sbRejected}, err.Error()...)
		}
		return []byte{sbOK}
	case sbCatchUp:
		id := string(fr.bytes())
		full := fr.byte1() == 1
		data := fr.bytes()
		if fr.err != nil {
			return append([]byte{sbRejected}, fr.err.Error()...)
		}
		d, err := c.catchUp(id, full, data)
		if err != nil {
			return append([]byte{sbRejected}, err.Error()...)
		}
		c.put(id, d)
		return []byte{sbOK}
	}
	return append([]byte{sbRejected}, fmt.Sprintf("unknown request %q", req[0])...)
}

func (c *sandboxCopyCache) catchUp(id string, full bool, data []byte) (*automerge.Doc, error) {
	var d *automerge.Doc
	if full {
		var err error
		if d, err = automerge.Load(data); err != nil {
			return nil, err
		}
	} else {
		cp := c.get(id)
		if cp == nil {
			return nil, fmt.Errorf("no copy of %s to catch up", id)
		}
		d = cp.doc
		if len(data) > 0 {
			if err := d.LoadIncremental(data); err != nil {
				return nil, err
			}
		}
	}
	return d, nil
}

// rehearse does to d what a room does with a client's message: receive it
// on the peer's sync state and answer, list and save what it added, and
// answer a peer that was level with the document before it.
func rehearse(d *automerge.Doc, msg []byte) error {
	before := d.Heads()
	ss := automerge.NewSyncState(d)
	if _, err := ss.ReceiveMessage(msg); err != nil {
		return err
	}
	ss.GenerateMessage()
	if cs, err := d.Changes(before...); err == nil {
		automerge.SaveChanges(cs)
	}
	d.SaveIncremental()
	level := automerge.NewSyncState(d)
	if _, err := level.ReceiveMessage(levelAt(before)); err != nil {
		return err
	}
	level.GenerateMessage()
	return nil
}

// levelAt is the sync message of a peer whose document has exactly these
// heads: its heads, and a have entry with them as the last sync point.
func levelAt(heads []automerge.ChangeHash) []byte {
	b := appendHeads([]byte{syncMessageV1}, heads)
	b = append(b, 0) // need
	b = append(b, 1) // one have
	b = appendHeads(b, heads)
	b = append(b, 0) // an empty bloom filter
	b = append(b, 0) // no changes
	return b
}

// sandboxWorkerEnv marks a process started as a sandbox worker.
const sandboxWorkerEnv = "TANDEM_SANDBOX_WORKER"

// SandboxCommand starts a sandbox worker: this executable, marked by its
// environment, so it must call RunSandboxWorkerIfAsked before anything else
// (a program's main, or a test binary's TestMain).
func SandboxCommand() *exec.Cmd {
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), sandboxWorkerEnv+"=1")
	cmd.Stderr = os.Stderr // a fault's report lands in the node's log
	return cmd
}

// RunSandboxWorkerIfAsked serves as a sandbox worker and exits if this
// process was started as one, and returns at once otherwise.
func RunSandboxWorkerIfAsked() {
	if os.Getenv(sandboxWorkerEnv) != "1" {
		return
	}
	if err := ServeSandbox(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "tandem sandbox worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}
