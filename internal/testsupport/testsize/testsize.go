// Package testsize chooses between the small sizes of the default test
// suite and the job-sized runs that SPECSTAR_LONG=1 asks for, so that one
// test covers the same code path in both and only its size changes.
package testsize

import (
	"os"
	"strconv"
)

// Env is the variable that asks for the long, job-sized tests.
const Env = "SPECSTAR_LONG"

// Long reports whether the job-sized tests were asked for ($SPECSTAR_LONG
// set to a true value such as 1).
func Long() bool {
	v, err := strconv.ParseBool(os.Getenv(Env))
	return err == nil && v
}

// Of returns long in a job-sized run and small otherwise.
func Of[T any](small, long T) T {
	if Long() {
		return long
	}
	return small
}
