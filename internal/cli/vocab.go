package cli

import (
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// VocabRow is one command's row of the README's command-line vocabulary
// table: the flags naming what it reads, what it writes, and the
// deprecated spellings it still accepts.
type VocabRow struct {
	Reads, Writes, Deprecated []string
}

var flagToken = regexp.MustCompile("--[a-z][a-z-]*")

// ParseVocabulary reads the table under the "Command-line vocabulary"
// heading of a README: | `command` | reads | writes | deprecated |.
func ParseVocabulary(readme string) (map[string]VocabRow, error) {
	_, after, ok := strings.Cut(readme, "Command-line vocabulary")
	if !ok {
		return nil, fmt.Errorf("no \"Command-line vocabulary\" section")
	}
	rows := map[string]VocabRow{}
	started := false
	for _, line := range strings.Split(after, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") {
			if started {
				break
			}
			continue
		}
		started = true
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 4 || !strings.Contains(cells[0], "`") {
			continue // the header and the separator
		}
		name := strings.Trim(strings.TrimSpace(cells[0]), "`")
		rows[name] = VocabRow{Reads: flagToken.FindAllString(cells[1], -1), Writes: flagToken.FindAllString(cells[2], -1),
			Deprecated: flagToken.FindAllString(cells[3], -1)}
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("the \"Command-line vocabulary\" section has no table")
	}
	return rows, nil
}

// CheckVocabulary compares a command's flag set with its row: the source
// and sink flags must be those the row lists, and the deprecated ones
// exactly those whose help says so. It returns the mismatches.
func CheckVocabulary(command string, fs *flag.FlagSet, row VocabRow) []string {
	var got, dep []string
	fs.VisitAll(func(f *flag.Flag) {
		if g := GroupOf(command, f.Name); g == GroupSource || g == GroupSink {
			got = append(got, "--"+f.Name)
		}
		if strings.Contains(f.Usage, DeprecatedMark) {
			dep = append(dep, "--"+f.Name)
		}
	})
	want := slices.Concat(row.Reads, row.Writes, row.Deprecated)
	var bad []string
	if !sameSet(got, want) {
		bad = append(bad, fmt.Sprintf("%s: source and sink flags %v, the README lists %v", command, sorted(got), sorted(want)))
	}
	if !sameSet(dep, row.Deprecated) {
		bad = append(bad, fmt.Sprintf("%s: deprecated flags %v, the README lists %v", command, sorted(dep), sorted(row.Deprecated)))
	}
	return bad
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}

func sameSet(a, b []string) bool { return slices.Equal(sorted(a), sorted(b)) }
