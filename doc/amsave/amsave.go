// Package amsave saves a document's changes as automerge saves a document
// (one document chunk), in a worker process.
//
// A node holds a document as its changes and never runs automerge on the
// path of a message. Automerge 0.6 and later load a saved document several
// times faster than the same changes one by one, so a peer that has
// nothing is better sent the saved form (amsync.Log.SetSaved). Making it
// needs automerge, and automerge (C and Rust under cgo) can abort the
// whole process on input it trips over, or take memory the node does not
// count. So the saving runs in a process of its own: the node's own binary
// started again with TANDEM_WORKER=save (ServeIfWorker, first thing in
// main), which reads the changes on its stdin, loads them with
// automerge-go, writes the saved document on its stdout and exits. Its
// address space is bounded (Config.MemoryBytes) and a job is bounded in
// time; one job runs at a time. A worker that fails, for any reason,
// fails that job only.
package amsave

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
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
	// MemoryBytes bounds a worker's address space (RLIMIT_AS); default
	// 4 GiB. automerge-go holds about 2 KB per typed change while it
	// loads them.
	MemoryBytes uint64
	// Timeout bounds a job; default 60 s.
	Timeout time.Duration
	// Executable is the binary run as the worker; default this process's
	// own (os.Executable).
	Executable string
}

// Saver runs save jobs in worker processes, one at a time.
type Saver struct {
	cfg  Config
	turn chan struct{}
}

// New returns a Saver.
func New(cfg Config) (*Saver, error) {
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = 4 << 30
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
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
// the job before it, and gives up when ctx ends.
func (s *Saver) Save(ctx context.Context, changes []byte) ([]byte, error) {
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	defer func() { <-s.turn }()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Executable)
	cmd.Env = append(os.Environ(), workerEnv+"=save", memoryEnv+"="+strconv.FormatUint(s.cfg.MemoryBytes, 10))
	cmd.Stdin = bytes.NewReader(changes)
	var out, stderr bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &limited{w: &stderr, n: 4 << 10}
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		said, _, _ := bytes.Cut(bytes.TrimSpace(stderr.Bytes()), []byte("\n"))
		return nil, fmt.Errorf("save worker: %w: %s", err, said)
	}
	return out.Bytes(), nil
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
	if limit, err := strconv.ParseUint(os.Getenv(memoryEnv), 10, 64); err == nil && limit > 0 {
		if err := syscall.Setrlimit(syscall.RLIMIT_AS, &syscall.Rlimit{Cur: limit, Max: limit}); err != nil {
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
	_, err = out.Write(d.Save())
	return err
}
