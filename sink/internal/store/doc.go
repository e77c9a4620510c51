// Package store holds what every sink backend (disk, postgres, s3) shares:
// the Outcome of an Apply call, the InvalidError that sends a record to the
// dead-letter queue, the identifier checks that keep a record inside its
// store, and the replay rules (which revision supersedes which). It exists
// so the backends can share them without importing one another or the root
// sink package, which imports them all; the root re-exports what callers
// need.
package store
