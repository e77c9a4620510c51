package scheme

import (
	"strings"
	"testing"
)

func TestOf(t *testing.T) {
	for _, c := range []struct {
		raw, scheme string
		ok          bool
	}{
		{"s3://b/p", "s3", true},
		{"disk:/x", "disk", true},
		{"dsk:/tmp/m5", "dsk", true},
		{"Postgres://h/db", "postgres", true},
		{"./dsk:x", "", false},
		{"/a:b", "", false},
		{"plain/path", "", false},
		{"1a:b", "", false},
		{":x", "", false},
	} {
		s, ok := Of(c.raw)
		if s != c.scheme || ok != c.ok {
			t.Errorf("Of(%q) = %q, %v; want %q, %v", c.raw, s, ok, c.scheme, c.ok)
		}
	}
}

func TestCheckListsTheSchemes(t *testing.T) {
	if err := Check("sink", "disk:/x", "disk", "s3"); err != nil {
		t.Fatalf("known scheme refused: %v", err)
	}
	if err := Check("sink", "/tmp/x", "disk"); err != nil {
		t.Fatalf("path refused: %v", err)
	}
	err := Check("sink", "dsk:/tmp/m5", "disk", "postgres", "s3")
	if err == nil {
		t.Fatal("dsk:/tmp/m5 accepted")
	}
	for _, want := range []string{`"dsk:"`, "disk, postgres, s3", "./dsk:/tmp/m5"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
}
