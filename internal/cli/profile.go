package cli

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// CPUProfileEnv names the environment variable that, set to a file name,
// makes a command write a CPU profile of its whole run to that file (read
// it with go tool pprof). It exists so that a benchmark can say where a
// built command's CPU goes (BenchmarkTailLoad's BENCH_TAIL_PROFILE); it
// is no flag because it is no part of the commands' vocabulary.
const CPUProfileEnv = "SPECSTAR_CPUPROFILE"

// StartCPUProfile starts the CPU profile CPUProfileEnv asks for, if any,
// and returns the function that ends it and closes its file (a no-op
// without one). A command's main calls it around its run.
func StartCPUProfile() (stop func() error, err error) {
	path := os.Getenv(CPUProfileEnv)
	if path == "" {
		return func() error { return nil }, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("$%s: %w", CPUProfileEnv, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("$%s %s: %w", CPUProfileEnv, path, err)
	}
	return func() error {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("$%s %s: %w", CPUProfileEnv, path, err)
		}
		return nil
	}, nil
}
