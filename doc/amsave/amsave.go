package amsave

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/automerge/automerge-go"
)

const (
	workerEnv = "TANDEM_WORKER"
	memoryEnv = "TANDEM_WORKER_MEMORY"
)

// Config bounds the workers. Zero fields take the defaults.
type Config struct {
	// MemoryBytes bounds a worker's memory (RLIMIT_DATA: what it has
	// written to, its heaps and stacks; not address space it only
	// reserved); default 2 GiB. automerge-go holds about 2 KB per typed
	// change while it loads them (200 MB for 100,000), and about 1 KB per
	// character of a paste made as one change (over 1 GiB for 1 MiB).
	MemoryBytes uint64
	// Timeout bounds a job; default 60 s.
	Timeout time.Duration
	// Executable is the binary run as the worker; default this process's
	// own (os.Executable).
	Executable string
	// Share is the most of one core's time the workers take over time;
	// default 0.25: after a job that took d, the next starts no sooner
	// than d × (1/Share − 1) after it. A document written fast would
	// otherwise be saved again and again while it grows.
	Share float64
}

// Saver runs save jobs in worker processes, one at a time.
type Saver struct {
	cfg  Config
	turn chan struct{}
	next time.Time // the next job starts no sooner; its turn's holder's
}

// New returns a Saver.
func New(cfg Config) (*Saver, error) {
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = 2 << 30
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	if cfg.Share <= 0 || cfg.Share > 1 {
		cfg.Share = 0.25
	}
	if cfg.Executable == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("the worker's executable: %w", err)
		}
		cfg.Executable = exe
	}
	return &Saver{cfg: cfg, turn: make(chan struct{}, 1)}, nil
}

// Save returns changes (change chunks one after another, each after its
// dependencies) as automerge saves the document they make. It waits for
// the job before it and the pause after it (Config.Share), and gives up
// when ctx ends. changes is called once the job has its turn, so that a
// caller that waits holds no copy, and its changes are the latest.
func (s *Saver) Save(ctx context.Context, changes func() ([]byte, error)) ([]byte, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()
	if wait := time.Until(s.next); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	in, err := changes()
	if err != nil {
		return nil, err
	}
	start := time.Now()
	defer func() {
		took := time.Since(start)
		s.next = time.Now().Add(time.Duration(float64(took) * (1/s.cfg.Share - 1)))
	}()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Executable)
	cmd.Env = append(os.Environ(), workerEnv+"=save", memoryEnv+"="+strconv.FormatUint(s.cfg.MemoryBytes, 10))
	cmd.Stdin = bytes.NewReader(in)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // it dies with the node
	cmd.WaitDelay = time.Second                                        // a killed worker's pipes close by then
	var out, stderr bytes.Buffer
	// A saved document is smaller than its changes (automerge compresses
	// it): more than this is no saved document.
	cmd.Stdout = &capped{w: &out, n: 2*len(in) + 1<<20}
	cmd.Stderr = &limited{w: &stderr, n: 4 << 10}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		said, _, _ := bytes.Cut(bytes.TrimSpace(stderr.Bytes()), []byte("\n"))
		return nil, fmt.Errorf("save worker: %w: %s", err, said)
	}
	return bytes.Clone(out.Bytes()), nil
}

// errTooMuch is a worker's output past its cap.
var errTooMuch = errors.New("the worker wrote more than a saved document of its changes can be")

// capped writes at most n bytes to w, and fails past them.
type capped struct {
	w io.Writer
	n int
}

func (c *capped) Write(p []byte) (int, error) {
	if len(p) > c.n {
		return 0, errTooMuch
	}
	c.n -= len(p)
	return c.w.Write(p)
}

// limited writes at most n bytes to w and drops the rest.
type limited struct {
	w io.Writer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if k := min(len(p), l.n); k > 0 {
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// ServeIfWorker does a worker's job and exits if this process was started
// as one (by a Saver); otherwise it returns at once. Call it first thing
// in main, and in TestMain of a package whose tests save.
func ServeIfWorker() {
	if os.Getenv(workerEnv) != "save" {
		return
	}
	if err := serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serve(in io.Reader, out io.Writer) error {
	// The out-of-memory killer takes the worker first, and the scheduler
	// runs it only on time the node and its peers leave (best effort: a
	// worker that cannot say so still works).
	os.WriteFile("/proc/self/oom_score_adj", []byte("1000"), 0)
	lowestPriority()
	if limit, err := strconv.ParseUint(os.Getenv(memoryEnv), 10, 64); err == nil && limit > 0 {
		var now syscall.Rlimit
		if err := syscall.Getrlimit(syscall.RLIMIT_DATA, &now); err != nil {
			return fmt.Errorf("read the worker's memory bound: %w", err)
		}
		limit = min(limit, now.Max) // a bound set above the node's is not raised
		if err := syscall.Setrlimit(syscall.RLIMIT_DATA, &syscall.Rlimit{Cur: limit, Max: now.Max}); err != nil {
			return fmt.Errorf("bound the worker's memory: %w", err)
		}
	}
	changes, err := io.ReadAll(in)
	if err != nil {
		return err
	}
	if len(changes) == 0 {
		return errors.New("no changes to save")
	}
	d, err := automerge.Load(changes)
	if err != nil {
		return fmt.Errorf("load the changes: %w", err)
	}
	saved := d.Save()
	heads := d.Heads()
	// A large loaded document goes before the saved one is loaded back:
	// the job then holds one at a time. (A small one is not worth the
	// collections.)
	if len(changes) >= 1<<20 {
		d, changes = nil, nil
		awaitFinalizers()
	}
	// A saved document is sent to peers that load it in place of the
	// changes: one that does not load back to the same heads (a change
	// automerge would write otherwise than it came) must not leave here.
	back, err := automerge.Load(saved)
	if err != nil {
		return fmt.Errorf("the saved document does not load: %w", err)
	}
	if !slices.Equal(back.Heads(), heads) {
		return errors.New("the saved document loads to other heads than its changes")
	}
	_, err = out.Write(saved)
	return err
}

// awaitFinalizers collects the garbage and waits, a second at most, for
// the finalizers that collection queued: automerge-go frees a document's
// memory in one. The runtime runs what is queued in batches, each whole
// before the next, so a sentinel queued by a second collection runs after
// everything the first queued.
func awaitFinalizers() {
	for range 2 {
		done := make(chan struct{})
		s := &sentinel{}
		runtime.SetFinalizer(s, func(*sentinel) { close(done) })
		s = nil
		runtime.GC()
		select {
		case <-done:
		case <-time.After(time.Second):
			return
		}
	}
}

// sentinel is an object whose finalizer says the finalizers queued with
// it have run. It holds a pointer: the runtime batches tiny objects
// without pointers, whose finalizers may never run.
type sentinel struct{ _ *int }

// lowestPriority gives every thread of the process the lowest priority.
// Linux keeps a nice value per thread, and a thread starts with its
// creator's: so every thread there is now, after which the ones made
// later inherit it.
func lowestPriority() {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return
	}
	for _, t := range tasks {
		if tid, err := strconv.Atoi(t.Name()); err == nil {
			syscall.Setpriority(syscall.PRIO_PROCESS, tid, 19)
		}
	}
}
