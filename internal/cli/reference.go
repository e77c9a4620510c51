package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ReferenceDir is where the generated command reference lives, from the
// repository's root: one page per command, made from its --help.
const ReferenceDir = "docs/cli"

// PageFile is the file of a command's reference page: "replicator dlq
// list" is replicator-dlq-list.md.
func PageFile(command string) string {
	return strings.Join(strings.Fields(command), "-") + ".md"
}

// generatedMark heads every generated page, saying how to remake it.
const generatedMark = "<!-- Generated from the command's --help by `go generate ./cmd/...`; do not edit. -->\n\n"

// ReferencePage is a command's page: its --help as the command prints it
// (usage, what it does, its flags with defaults, examples) and the exit
// status every command shares.
func ReferencePage(command, help string) []byte {
	var b strings.Builder
	b.WriteString(generatedMark)
	fmt.Fprintf(&b, "# %s\n\n```text\n%s\n```\n\n", command, strings.TrimRight(help, "\n"))
	b.WriteString("## Exit status\n\n| code | meaning |\n|---|---|\n" +
		"| 0 | done; equal; valid |\n" +
		"| 1 | differences, a failed check, or input that is missing or not valid (no retry changes it) |\n" +
		"| 2 | usage error, or an operational error (a store or the stream unreachable) |\n\n" +
		"The [exit status](../operating.md#exit-codes) table says which case each command meets.\n")
	return []byte(b.String())
}

// ReferenceIndex is the page of a program (replicator, writer): its usage
// and a link to each command's page.
func ReferenceIndex(program, usage string, commands []string) []byte {
	sort.Strings(commands)
	var b strings.Builder
	b.WriteString(generatedMark)
	fmt.Fprintf(&b, "# %s\n\n```text\n%s\n```\n\n## Commands\n\n", program, strings.TrimRight(usage, "\n"))
	for _, c := range commands {
		fmt.Fprintf(&b, "- [`%s`](%s)\n", c, PageFile(c))
	}
	return []byte(b.String())
}

// SyncReference compares the pages (file name to content) with the files
// of dir whose names start with prefix, and with write rewrites them (the
// go generate step); it returns what differs: a page missing, stale, or a
// file no command makes any more.
func SyncReference(dir, prefix string, pages map[string][]byte, write bool) ([]string, error) {
	var stale []string
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) && pages[e.Name()] == nil {
			stale = append(stale, e.Name()+": no command makes it")
			if write {
				if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
					return nil, err
				}
			}
		}
	}
	for name, want := range pages {
		path := filepath.Join(dir, name)
		got, err := os.ReadFile(path)
		if err == nil && bytes.Equal(got, want) {
			continue
		}
		stale = append(stale, name+": missing or stale")
		if write {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				return nil, err
			}
		}
	}
	sort.Strings(stale)
	return stale, nil
}
