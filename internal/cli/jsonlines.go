package cli

import (
	"bytes"
	"encoding/json"
	"io"
	"sync"
	"time"
)

// StderrFor is where a command writes its diagnostics: stderr itself, or
// with --log-format json (LogFormat(args)) a writer that turns every line
// not already a JSON object (the final error line, a usage message) into
// one with the fields the JSON logger writes, so that every line on stderr
// is one JSON object. done writes a last line left without its newline.
func StderrFor(stderr io.Writer, args []string) (w io.Writer, done func()) {
	if LogFormat(args) != LogJSON {
		return stderr, func() {}
	}
	j := &jsonLines{w: stderr, now: time.Now}
	return j, j.flush
}

// jsonLines is StderrFor's writer for --log-format json.
type jsonLines struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	now func() time.Time
}

// Write implements io.Writer: complete lines are written at once, a
// partial one waits for its newline (or flush).
func (j *jsonLines) Write(p []byte) (int, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.buf = append(j.buf, p...)
	for {
		i := bytes.IndexByte(j.buf, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := j.buf[:i]
		err := j.line(line)
		j.buf = j.buf[i+1:]
		if err != nil {
			return len(p), err
		}
	}
}

// flush writes what is left without a newline.
func (j *jsonLines) flush() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if len(j.buf) > 0 {
		_ = j.line(j.buf)
		j.buf = nil
	}
}

// line writes one line: as it is when it is a JSON object already (the
// logger's), else as {"time", "level": "ERROR", "msg"}; blank lines are
// dropped.
func (j *jsonLines) line(line []byte) error {
	if len(bytes.TrimSpace(line)) == 0 {
		return nil
	}
	if line[0] == '{' && json.Valid(line) {
		_, err := j.w.Write(append(line, '\n'))
		return err
	}
	b, err := json.Marshal(struct {
		Time  string `json:"time"`
		Level string `json:"level"`
		Msg   string `json:"msg"`
	}{j.now().Format(time.RFC3339Nano), "ERROR", string(bytes.TrimRight(line, "\r"))})
	if err != nil {
		return err
	}
	_, err = j.w.Write(append(b, '\n'))
	return err
}
