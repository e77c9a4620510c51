// Package progress reports how far a long-running command has come: a
// redrawn status line on a terminal, periodic structured log lines
// (log/slog) otherwise.
package progress

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Meter tracks records and bytes against an optional byte total.
type Meter struct {
	mu       sync.Mutex
	what     string
	total    int64 // bytes expected, 0 if unknown
	totalRec int64 // records expected, 0 if unknown (ETA by records)
	start    time.Time
	last     time.Time
	every    time.Duration
	term     io.Writer // non-nil when drawing on a terminal
	log      *slog.Logger
	drawn    bool
	records  int64
	bytes    int64
	finished bool
}

// IsTerminal reports whether f is a character device (an interactive
// terminal), without pulling in a terminal library.
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// New starts a meter for a job named what with total expected bytes (0 if
// unknown). It draws on stderr if stderr is a terminal (and log does not
// write JSON) and logs to log otherwise.
func New(what string, total int64, log *slog.Logger) *Meter {
	m := &Meter{what: what, total: total, start: time.Now(), log: log, every: 10 * time.Second}
	if _, isJSON := log.Handler().(*slog.JSONHandler); IsTerminal(os.Stderr) && !isJSON { // JSON logs: every stderr line an object
		m.term = os.Stderr
		m.every = 200 * time.Millisecond
	}
	m.last = m.start
	return m
}

// NewCount starts a meter whose ETA comes from an expected record count
// rather than bytes.
func NewCount(what string, totalRecords int64, log *slog.Logger) *Meter {
	m := New(what, 0, log)
	m.totalRec = totalRecords
	return m
}

// Update records the position reached and reports it if it is time to.
func (m *Meter) Update(records, bytes int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.records, m.bytes = records, bytes
	if now := time.Now(); now.Sub(m.last) >= m.every {
		m.last = now
		m.report(now, false)
	}
}

// Done reports the final position and ends the status line.
func (m *Meter) Done() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished {
		return
	}
	m.finished = true
	m.report(time.Now(), true)
}

// Stop ends the meter for work that may have failed: with err nil it is
// Done; otherwise the final line says the work failed (at INFO, with
// its counts: the command prints the error), so a failed command never
// reports "done".
func (m *Meter) Stop(err error) {
	if err == nil {
		m.Done()
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.finished {
		return
	}
	m.finished = true
	if m.term != nil {
		if m.drawn {
			fmt.Fprintln(m.term)
		}
		return // the command prints the error itself
	}
	if m.log != nil {
		// INFO, without the error: the command prints the error once, on
		// one line (a WARN here printed it twice).
		m.log.Info(m.what+" failed", "records", m.records, "bytes", m.bytes)
	}
}

func (m *Meter) report(now time.Time, final bool) {
	elapsed := now.Sub(m.start).Seconds()
	rate := 0.0
	if elapsed > 0 {
		rate = float64(m.bytes) / elapsed
	}
	recRate := 0.0
	if elapsed > 0 {
		recRate = float64(m.records) / elapsed
	}
	eta := time.Duration(-1)
	if m.total > 0 && rate > 0 && m.bytes <= m.total {
		eta = time.Duration(float64(m.total-m.bytes) / rate * float64(time.Second)).Round(time.Second)
	}
	if m.totalRec > 0 && recRate > 0 && m.records <= m.totalRec {
		eta = time.Duration(float64(m.totalRec-m.records) / recRate * float64(time.Second)).Round(time.Second)
	}
	if m.term != nil {
		if final && !m.drawn {
			return // too quick to have drawn anything: print nothing
		}
		line := fmt.Sprintf("%s: %d records, %s", m.what, m.records, Bytes(m.bytes))
		if m.totalRec > 0 {
			line = fmt.Sprintf("%s: %d of %d records, %s", m.what, m.records, m.totalRec, Bytes(m.bytes))
		}
		if m.total > 0 {
			line += fmt.Sprintf(" of %s (%.0f%%)", Bytes(m.total), 100*float64(m.bytes)/float64(m.total))
		}
		line += fmt.Sprintf(", %s/s, %.0f rec/s", Bytes(int64(rate)), recRate)
		if eta >= 0 && !final {
			line += fmt.Sprintf(", ETA %s", eta)
		}
		fmt.Fprintf(m.term, "\r\033[K%s", line)
		if final {
			fmt.Fprintln(m.term)
		}
		m.drawn = true
		return
	}
	if m.log == nil {
		return
	}
	attrs := []any{"records", m.records, "bytes", m.bytes, "bytes_per_sec", int64(rate), "records_per_sec", int64(recRate)}
	if m.total > 0 {
		attrs = append(attrs, "total_bytes", m.total)
	}
	if m.totalRec > 0 {
		attrs = append(attrs, "total_records", m.totalRec)
	}
	if eta >= 0 && !final {
		attrs = append(attrs, "eta", eta.String())
	}
	msg := m.what + " progress"
	if final {
		msg = m.what + " done"
	}
	m.log.Info(msg, attrs...)
}

// Bytes formats a byte count with binary units.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for v := n / unit; v >= unit; v /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
