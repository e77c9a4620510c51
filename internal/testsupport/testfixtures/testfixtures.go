// Package testfixtures finds the golden files that the reference SpecStar
// implementation wrote, kept in the repository under testdata/fixtures, so
// that every package's tests read the same ground truth from any clone.
package testfixtures

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the fixtures directory: $SPECSTAR_FIXTURES if set, otherwise
// testdata/fixtures under the repository root (the nearest directory above
// the test's working directory that holds go.mod). A test that needs the
// fixtures fails, never skips, when they cannot be found.
func Dir(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("SPECSTAR_FIXTURES"); d != "" {
		return d
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			dir := filepath.Join(d, "testdata", "fixtures")
			if _, err := os.Stat(filepath.Join(dir, "MANIFEST.json")); err != nil {
				t.Fatalf("fixtures: the repository at %s lacks testdata/fixtures/MANIFEST.json: %v", d, err)
			}
			return dir
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Fatalf("fixtures: no go.mod above %s, so no testdata/fixtures; set SPECSTAR_FIXTURES", wd)
	return ""
}

// Path joins elements onto Dir.
func Path(t testing.TB, elem ...string) string {
	t.Helper()
	return filepath.Join(append([]string{Dir(t)}, elem...)...)
}

// Read returns a fixture file's bytes.
func Read(t testing.TB, elem ...string) []byte {
	t.Helper()
	b, err := os.ReadFile(Path(t, elem...))
	if err != nil {
		t.Fatalf("fixtures: %v", err)
	}
	return b
}
