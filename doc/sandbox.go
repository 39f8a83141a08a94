package doc

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"os/exec"
	"sync"
	"time"

	"github.com/automerge/automerge-go"
	"github.com/prometheus/client_golang/prometheus"
)

// The sandbox: worker processes that apply a client's message to their own
// copy of the document before the room does. automerge's core aborts the
// process on a fault it does not expect (a Rust panic cannot be recovered
// across cgo); in a worker, that costs the worker and the one message, and
// the room refuses the message with the document untouched. The worker is
// this same binary started with a hidden argument (ServeSandbox), so it
// runs the very automerge the room runs.
//
// A worker keeps a copy of each document it checked recently. Each check
// carries the room's heads; a copy that is missing or elsewhere is caught
// up first from the room's document (the changes since its heads, or the
// whole document), so after a restart, a remote change or an eviction the
// copy is exact again. Each document always goes to the same worker.
//
// What a worker does with a message is what the room will do with it:
// receive it on a fresh sync state and generate the reply, generate for a
// peer that was level before it, list the changes since, and save them
// incrementally.

// SandboxConfig configures a Sandbox.
type SandboxConfig struct {
	// Command starts one worker; it must run ServeSandbox on its stdin
	// and stdout. Required.
	Command func() *exec.Cmd
	// Workers is how many worker processes share the documents; default 2.
	Workers int
	// Timeout bounds one check; a worker that takes longer is killed and
	// the message refused. Default 10 s.
	Timeout time.Duration
	// Logger receives the sandbox's logs; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the sandbox's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Sandbox runs the worker processes. It is safe for concurrent use.
type Sandbox struct {
	cfg     SandboxConfig
	seed    maphash.Seed
	workers []*sandboxWorker
	faults  prometheus.Counter
	starts  prometheus.Counter
	checks  prometheus.Histogram
	// catchUps counts copies brought to the room's document, by the
	// changes since their heads or by the whole document.
	catchUps *prometheus.CounterVec
}

// errSandboxFault marks a message that ended the worker checking it.
var errSandboxFault = errors.New("automerge failed on this message in the sandbox")

// NewSandbox returns a sandbox; workers start on first use.
func NewSandbox(cfg SandboxConfig) (*Sandbox, error) {
	if cfg.Command == nil {
		return nil, errors.New("doc: SandboxConfig.Command is required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 2
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	s := &Sandbox{
		cfg:  cfg,
		seed: maphash.MakeSeed(),
		faults: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_sandbox_faults_total",
			Help: "Client messages that ended a sandbox worker (refused; the document untouched).",
		}),
		starts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tandem_sandbox_starts_total",
			Help: "Sandbox worker processes started.",
		}),
		checks: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tandem_sandbox_check_seconds",
			Help:    "Time to check one client message in the sandbox, catching its copy up included.",
			Buckets: prometheus.ExponentialBuckets(0.00005, 2, 16),
		}),
		catchUps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tandem_sandbox_catchups_total",
			Help: "Sandbox copies caught up with the room's document, by what was sent: changes or the whole document.",
		}, []string{"kind"}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(s.faults, s.starts, s.checks, s.catchUps)
	}
	for range cfg.Workers {
		s.workers = append(s.workers, &sandboxWorker{sb: s})
	}
	return s, nil
}

// check applies msg to the sandbox's copy of the document first, at the
// room's heads. read runs a function on the room's document, under the
// room's lock, to catch the copy up. The document must not
// change until the room has applied msg (the room's applyMu). An error
// wrapping errSandboxFault means the message ended the worker; any other
// error means the sandbox could not check it.
func (s *Sandbox) check(documentID string, heads []automerge.ChangeHash, msg []byte, read func(func(*automerge.Doc))) error {
	start := time.Now()
	defer func() { s.checks.Observe(time.Since(start).Seconds()) }()
	w := s.workers[maphash.String(s.seed, documentID)%uint64(len(s.workers))]
	return w.check(documentID, heads, msg, read)
}

// Close stops the workers. It is safe to call twice.
func (s *Sandbox) Close() error {
	for _, w := range s.workers {
		w.mu.Lock()
		w.stop()
		w.mu.Unlock()
	}
	return nil
}

// Requests and replies between the room and a worker: a frame is a 4-byte
// big-endian length and that many bytes, the first of which is the kind.
const (
	sbCheck    = 'C' // document id, heads, message: apply it
	sbCatchUp  = 'U' // document id, full flag, data
	sbOK       = 'K'
	sbBehind   = 'B' // the copy's heads (none: no copy); the room decides how to catch it up
	sbRejected = 'E' // automerge returned an error (no fault): its text
)

type sandboxWorker struct {
	sb *Sandbox

	mu  sync.Mutex // guards everything below; one request at a time
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Reader
}

func (w *sandboxWorker) start() error {
	cmd := w.sb.cfg.Command()
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start sandbox worker: %w", err)
	}
	w.sb.starts.Inc()
	w.cmd, w.in, w.out = cmd, in, bufio.NewReader(out)
	return nil
}

// stop ends the worker process, if any. The caller holds w.mu.
func (w *sandboxWorker) stop() {
	if w.cmd == nil {
		return
	}
	w.in.Close()
	w.cmd.Process.Kill()
	w.cmd.Wait()
	w.cmd = nil
}

// call sends one request and reads the reply. An error means the worker is
// gone (or was killed for taking too long); it has been stopped.
func (w *sandboxWorker) call(req []byte) ([]byte, error) {
	if w.cmd == nil {
		if err := w.start(); err != nil {
			return nil, err
		}
	}
	p := w.cmd.Process
	timer := time.AfterFunc(w.sb.cfg.Timeout, func() { p.Kill() })
	defer timer.Stop()
	reply, err := w.roundTrip(req)
	if err != nil {
		w.stop()
		return nil, err
	}
	return reply, nil
}

func (w *sandboxWorker) roundTrip(req []byte) ([]byte, error) {
	if err := writeFrame(w.in, req); err != nil {
		return nil, err
	}
	return readFrame(w.out)
}

func (w *sandboxWorker) check(documentID string, heads []automerge.ChangeHash, msg []byte, read func(func(*automerge.Doc))) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	req := appendBytes(appendHeads(appendBytes([]byte{sbCheck}, []byte(documentID)), heads), msg)
	retried := false
	for attempt := 0; attempt < 4; attempt++ {
		reply, err := w.call(req)
		if err != nil {
			if !retried {
				// The worker may have died before this message (killed
				// from outside, say): a fresh one tells.
				retried = true
				continue
			}
			w.sb.faults.Inc()
			w.sb.cfg.Logger.Warn("sandbox worker failed on a client message", "document", documentID, "err", err)
			return fmt.Errorf("%w: %v", errSandboxFault, err)
		}
		switch reply[0] {
		case sbOK:
			return nil
		case sbRejected:
			return fmt.Errorf("%w: %s", ErrBadSyncMessage, reply[1:])
		case sbBehind:
			if err := w.catchUp(documentID, read, reply[1:]); err != nil {
				return fmt.Errorf("sandbox: catch up document %s: %w", documentID, err)
			}
		default:
			w.stop()
			return fmt.Errorf("sandbox: unexpected reply %q", reply[0])
		}
	}
	return fmt.Errorf("sandbox: the copy of document %s does not catch up", documentID)
}

// catchUp brings the worker's copy, at the heads theirs, to the room's
// document: the changes since those heads when the room has them all
// (they may be heads of the copy but no longer of the room), the whole
// document otherwise (no copy, or one with changes the room lacks).
func (w *sandboxWorker) catchUp(documentID string, read func(func(*automerge.Doc)), theirs []byte) error {
	since, ok := readHeads(theirs)
	full := !ok || len(since) == 0
	var data []byte
	read(func(doc *automerge.Doc) {
		for _, h := range since {
			if _, err := doc.Change(h); err != nil {
				full = true
			}
		}
		if !full {
			if cs, err := doc.Changes(since...); err == nil {
				data = automerge.SaveChanges(cs)
				return
			}
			full = true
		}
		data = doc.Save()
	})
	req := appendBytes([]byte{sbCatchUp}, []byte(documentID))
	if full {
		req = append(req, 1)
	} else {
		req = append(req, 0)
	}
	req = appendBytes(req, data)
	reply, err := w.call(req)
	if err != nil {
		return err
	}
	if reply[0] != sbOK {
		return fmt.Errorf("worker answered %q: %s", reply[0], reply[1:])
	}
	kind := "changes"
	if full {
		kind = "document"
	}
	w.sb.catchUps.WithLabelValues(kind).Inc()
	return nil
}

// Framing.

const maxSandboxFrame = 1 << 30

var errWriteFrame = errors.New("write to sandbox worker")

func writeFrame(w io.Writer, b []byte) error {
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return fmt.Errorf("%w: %v", errWriteFrame, err)
	}
	if _, err := w.Write(b); err != nil {
		return fmt.Errorf("%w: %v", errWriteFrame, err)
	}
	return nil
}

func readFrame(r *bufio.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size == 0 || size > maxSandboxFrame {
		return nil, fmt.Errorf("sandbox frame of %d bytes", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	return b, nil
}

// frameReader reads the fields of a request or reply.
type frameReader struct {
	b   []byte
	err error
}

func (r *frameReader) bytes() []byte {
	if r.err != nil {
		return nil
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k) {
		r.err = errors.New("truncated sandbox frame")
		return nil
	}
	v := r.b[k : k+int(n)]
	r.b = r.b[k+int(n):]
	return v
}

func (r *frameReader) heads() []automerge.ChangeHash {
	if r.err != nil {
		return nil
	}
	n, k := binary.Uvarint(r.b)
	if k <= 0 || n > uint64(len(r.b)-k)/32 {
		r.err = errors.New("truncated sandbox frame")
		return nil
	}
	r.b = r.b[k:]
	hs := make([]automerge.ChangeHash, n)
	for i := range hs {
		copy(hs[i][:], r.b[:32])
		r.b = r.b[32:]
	}
	return hs
}

func (r *frameReader) byte1() byte {
	if r.err != nil || len(r.b) == 0 {
		r.err = errors.New("truncated sandbox frame")
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

func readHeads(b []byte) ([]automerge.ChangeHash, bool) {
	r := &frameReader{b: b}
	hs := r.heads()
	return hs, r.err == nil
}
