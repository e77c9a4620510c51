package postgres

import "testing"

// Test hooks for the external test package (conformance_test.go), which
// cannot live in this package: the root sink package it uses imports
// this one.

// FreshPrefix is pgPrefix: a fresh table prefix dropped when t ends.
func FreshPrefix(t testing.TB) string { return pgPrefix(t) }

// ServerDSN is the test server's DSN with a small pool.
func ServerDSN() string { return pgDSNWith("pool_max_conns=4") }

// Prefix is the table prefix s writes.
func (p *Sink) Prefix() string { return p.opts.TablePrefix }

// CopyAlways makes every Flush of p write by COPY, as a batch of
// pgCopyFrom rows or more does (and, while p is fresh, without reading).
func (p *Sink) CopyAlways() { p.copyFrom = 1 }
