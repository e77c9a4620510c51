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
	// Positional: a positional argument is a deprecated spelling.
	Positional bool
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
			Deprecated: flagToken.FindAllString(cells[3], -1), Positional: strings.Contains(cells[3], "positional")}
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

// DeprecatedUses returns the README lines (outside the vocabulary table)
// whose command line uses a spelling its row marks deprecated: a flag, or
// a positional argument where the row says "positional". The README shows
// current spellings only.
func DeprecatedUses(readme string, rows map[string]VocabRow) []string {
	var bad []string
	inBlock := false
	for n, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inBlock = !inBlock
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(line), "|") {
			continue // the table names the deprecated spellings
		}
		for name, row := range rows {
			i := indexCommand(line, name, inBlock)
			if i < 0 {
				continue
			}
			rest := line[i+len(name):]
			if j := strings.IndexAny(rest, "`#"); j >= 0 {
				rest = rest[:j] // the command ends with its backtick or comment
			}
			for _, f := range flagToken.FindAllString(rest, -1) {
				if slices.Contains(row.Deprecated, f) {
					bad = append(bad, fmt.Sprintf("README line %d: %s %s (deprecated): %s", n+1, name, f, strings.TrimSpace(line)))
				}
			}
			if row.Positional && positional(rest) != "" {
				bad = append(bad, fmt.Sprintf("README line %d: %s with the positional %s (deprecated): %s", n+1, name, positional(rest), strings.TrimSpace(line)))
			}
		}
	}
	slices.Sort(bad)
	return bad
}

// indexCommand is where the command name is invoked in line (as a word,
// not followed by a longer command's next word; outside a code block
// only in backticks), or -1.
func indexCommand(line, name string, inBlock bool) int {
	starts := "`"
	if inBlock {
		starts = " `/("
	}
	for off := 0; ; {
		i := strings.Index(line[off:], name)
		if i < 0 {
			return -1
		}
		i += off
		end := i + len(name)
		before := i == 0 && inBlock || i > 0 && strings.ContainsRune(starts, rune(line[i-1]))
		after := end == len(line) || line[end] == ' ' || line[end] == '`'
		if before && after && !strings.HasPrefix(line[end:], " list") && !strings.HasPrefix(line[end:], " replay") &&
			!strings.HasPrefix(line[end:], " info") && !strings.HasPrefix(line[end:], " apply") {
			return i
		}
		off = end
	}
}

// positional is the first argument of rest that is neither a flag nor a
// flag's value, or "".
func positional(rest string) string {
	prevFlag, optional := false, 0
	for _, tok := range strings.Fields(rest) {
		opens, closes := strings.Count(tok, "["), strings.Count(tok, "]")
		optional += opens - closes
		switch {
		case optional > 0 || opens+closes > 0: // [--flag VALUE]: optional, named
			prevFlag = false
		case strings.HasPrefix(tok, "-"):
			prevFlag = !strings.Contains(tok, "=") && tok != "--json" && tok != "-v" && tok != "--force" && tok != "--lenient"
		case prevFlag, tok == "\\", tok == "|", tok == "&&":
			prevFlag = false
		default:
			return tok
		}
	}
	return ""
}
