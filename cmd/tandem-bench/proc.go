package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// clockTicks is the kernel's USER_HZ, 100 on Linux.
const clockTicks = 100

// cpuSeconds returns the user+system CPU time of processes from /proc,
// summed.
func cpuSeconds(pids []int) (float64, error) { return sumOver(pids, cpuSecondsOf) }

// rssBytes returns the resident set size of processes from /proc, summed.
func rssBytes(pids []int) (int64, error) { return sumOver(pids, rssBytesOf) }

// sumOver sums a figure of each process.
func sumOver[T float64 | int64](pids []int, of func(pid int) (T, error)) (T, error) {
	var total T
	for _, pid := range pids {
		v, err := of(pid)
		if err != nil {
			return 0, err
		}
		total += v
	}
	return total, nil
}

// cpuSecondsOf returns user+system CPU time of a process from /proc, its
// children's included (a node's save workers): those that have ended and
// those that run.
func cpuSecondsOf(pid int) (float64, error) {
	if pid <= 0 {
		return 0, nil
	}
	total, err := ownCPU(pid, true)
	if err != nil {
		return 0, err
	}
	for _, c := range withChildren([]int{pid})[1:] {
		v, _ := ownCPU(c, false) // it may have ended since
		total += v
	}
	return total, nil
}

// ownCPU returns a process's user+system CPU time, and with ended its
// children's that have ended.
func ownCPU(pid int, ended bool) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime, stime, cutime
	// and cstime are fields 14 to 17 of the line, 12 to 15 after the name.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)[11:15]
	if !ended {
		f = f[:2]
	}
	total := 0.0
	for _, x := range f {
		v, _ := strconv.ParseFloat(x, 64)
		total += v
	}
	return total / clockTicks, nil
}

// childrenOf returns the pids of a process's children that run.
func childrenOf(pid int) []int {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	var out []int
	for _, t := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, t.Name()))
		for _, f := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(f); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// rssBytesOf returns the resident set size of a process from /proc.
func rssBytesOf(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// raiseFileLimit raises this process's open-file limit to n, hard limit
// included if it may (as root), so that n connections fit; the servers
// --compare starts inherit it. It says so when it cannot.
func raiseFileLimit(n uint64) {
	var l syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l); err != nil || l.Cur >= n {
		return
	}
	want := syscall.Rlimit{Cur: n, Max: max(n, l.Max)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err != nil {
		want = syscall.Rlimit{Cur: l.Max, Max: l.Max}
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want)
		fmt.Fprintf(os.Stderr, "tandem-bench: open files limited to %d (%v): fewer connections fit\n", l.Max, err)
	}
}

// kernelSockets reads what the kernel holds for TCP sockets, both ends of
// a loopback connection included: buffer memory (/proc/net/sockstat) and
// the socket objects (TCP and socket inodes in /proc/slabinfo, root only;
// zero without it).
func kernelSockets() (buffers, objects int64) {
	if b, err := os.ReadFile("/proc/net/sockstat"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 0 && f[0] == "TCP:" {
				for i := 1; i+1 < len(f); i += 2 {
					if f[i] == "mem" {
						pages, _ := strconv.ParseInt(f[i+1], 10, 64)
						buffers = pages * int64(os.Getpagesize())
					}
				}
			}
		}
	}
	if b, err := os.ReadFile("/proc/slabinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) > 3 && (f[0] == "TCP" || f[0] == "sock_inode_cache") {
				active, _ := strconv.ParseInt(f[1], 10, 64)
				size, _ := strconv.ParseInt(f[3], 10, 64)
				objects += active * size
			}
		}
	}
	return buffers, objects
}

// loadAverages returns the machine's load averages over 1, 5 and 15
// minutes (zeros where /proc/loadavg cannot be read).
func loadAverages() [3]float64 {
	var l [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err == nil {
		fmt.Sscan(string(b), &l[0], &l[1], &l[2])
	}
	return l
}
