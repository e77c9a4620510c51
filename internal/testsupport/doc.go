// Package testsupport holds, in its subpackages, what only tests and
// benchmarks import: real servers per test (s3test, pgtest, natscluster,
// natstest, redistest), fault tools (lazyfs, fsprobe), fixtures and
// generators (testfixtures, synth, specstarpg, streamhistory) and helpers
// (freeport, waitfor, testtmp, testsize, gobuild). The commands link none
// of it; the rest of internal/ is what they run (layout_test.go checks
// both).
package testsupport
