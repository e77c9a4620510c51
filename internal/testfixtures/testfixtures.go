// Package testfixtures finds the golden files that the reference SpecStar
// implementation wrote (../shared/fixtures beside the repository), so that
// every package's tests read the same ground truth.
package testfixtures

import (
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the fixtures directory: $SPECSTAR_FIXTURES if set, otherwise
// shared/fixtures found beside the repository root. A test that needs the
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
		cand := filepath.Join(d, "..", "shared", "fixtures")
		if st, err := os.Stat(filepath.Join(cand, "MANIFEST.json")); err == nil && !st.IsDir() {
			return filepath.Clean(cand)
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	t.Fatalf("fixtures: cannot find shared/fixtures beside the repository (from %s); set SPECSTAR_FIXTURES", wd)
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
