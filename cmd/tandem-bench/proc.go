package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
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

// cpuSecondsOf returns user+system CPU time of a process from /proc.
func cpuSecondsOf(pid int) (float64, error) {
	if pid <= 0 {
		return 0, nil
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15 of the line, 12 and 13 after the name.
	rest := string(b[strings.LastIndexByte(string(b), ')')+2:])
	f := strings.Fields(rest)
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / clockTicks, nil
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
