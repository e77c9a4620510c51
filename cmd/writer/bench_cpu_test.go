package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The CPU the processes of BenchmarkTailLoad use, read from /proc.

// clockTick is the unit of /proc/PID/stat's times: USER_HZ, 100 on every
// Linux architecture Go runs on.
const clockTick = 10 * time.Millisecond

// procStat is what /proc/PID/stat says of one process.
type procStat struct {
	ppid             int
	cpu              time.Duration // utime + stime, every thread of the process
	sys              time.Duration // stime alone: in the kernel
	reaped           time.Duration // cutime + cstime: children it waited for
	comm, cmdlineTag string
}

// readProcStat reads /proc/PID/stat (and, for the postgres processes, the
// title in cmdline: "postgres: walsender ...").
func readProcStat(pid int) (procStat, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return procStat{}, fmt.Errorf("process %d: %w", pid, err)
	}
	s := string(raw)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return procStat{}, fmt.Errorf("process %d: /proc stat %q", pid, s)
	}
	// After the comm: state(3) ppid(4) ... utime(14) stime(15) cutime(16) cstime(17).
	f := strings.Fields(s[end+1:])
	if len(f) < 15 {
		return procStat{}, fmt.Errorf("process %d: /proc stat %q", pid, s)
	}
	n := func(i int) int64 { v, _ := strconv.ParseInt(f[i-3], 10, 64); return v }
	st := procStat{
		ppid:   int(n(4)),
		cpu:    time.Duration(n(14)+n(15)) * clockTick,
		sys:    time.Duration(n(15)) * clockTick,
		reaped: time.Duration(n(16)+n(17)) * clockTick,
		comm:   s[open+1 : end],
	}
	if cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil {
		st.cmdlineTag = strings.TrimRight(strings.ReplaceAll(string(cl), "\x00", " "), " ")
	}
	return st, nil
}

// processCPU is the CPU (user + system) process pid has used so far, and
// its system (kernel) part.
func processCPU(pid int) (cpu, sys time.Duration, err error) {
	st, err := readProcStat(pid)
	return st.cpu, st.sys, err
}

// clusterCPU is the CPU a Postgres cluster has used so far: the
// postmaster's and every living child's, plus what the postmaster's
// exited children used (their cutime/cstime, accounted to it when it
// reaps them), by kind of process: "walsender" (the tail's logical
// replication), "backend" (client sessions: the load's writes, a
// Postgres sink, the benchmark's looks) and "background" (postmaster,
// checkpointer, WAL writer, autovacuum, exited processes).
func clusterCPU(postmaster int) (map[string]time.Duration, error) {
	pm, err := readProcStat(postmaster)
	if err != nil {
		return nil, fmt.Errorf("postmaster: %w", err)
	}
	out := map[string]time.Duration{"background": pm.cpu + pm.reaped}
	dirs, err := filepath.Glob("/proc/[0-9]*")
	if err != nil {
		return nil, err
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil || pid == postmaster {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.ppid != postmaster {
			continue // gone meanwhile, or not the cluster's
		}
		kind := "background"
		switch title := strings.TrimPrefix(st.cmdlineTag, "postgres: "); {
		case strings.HasPrefix(title, "walsender"):
			kind = "walsender"
		case strings.Contains(title, "127.0.0.1(") || strings.Contains(title, "[local]"):
			kind = "backend"
		}
		out[kind] += st.cpu
	}
	return out, nil
}

// selfCPU is the CPU this process (the load generator and the
// benchmark's watchers) has used so far, and its system part.
func selfCPU() (cpu, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), time.Duration(ru.Stime.Nano())
}

// cpuSample is the CPU each process of a tail-load run has used so far.
type cpuSample struct {
	tail, replicator, self          time.Duration
	tailSys, replicatorSys, selfSys time.Duration
	postgres                        map[string]time.Duration
}

// sampleCPU reads every process's CPU at once.
func sampleCPU(tailPID, replPID, postmaster int) (cpuSample, error) {
	var s cpuSample
	var err error
	if s.tail, s.tailSys, err = processCPU(tailPID); err != nil {
		return s, fmt.Errorf("writer tail: %w", err)
	}
	if s.replicator, s.replicatorSys, err = processCPU(replPID); err != nil {
		return s, fmt.Errorf("replicator: %w", err)
	}
	if s.postgres, err = clusterCPU(postmaster); err != nil {
		return s, fmt.Errorf("postgres: %w", err)
	}
	s.self, s.selfSys = selfCPU()
	return s, nil
}

// perWrite is the CPU used between two samples in microseconds per write.
func perWrite(before, after time.Duration, writes int64) float64 {
	if writes == 0 {
		return 0
	}
	return float64(after-before) / float64(time.Microsecond) / float64(writes)
}
