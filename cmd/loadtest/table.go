package main

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// row is one scenario's line of the table.
type row struct {
	scenario   string
	requests   int
	count      map[int]int // by HTTP status; 0 is no answer
	statuses   string
	successes  int
	successP50 time.Duration
	successP99 time.Duration
	refusalP99 time.Duration
	memory     string
	notes      string
	ledger     string
	ok         bool
	missed     []string
}

func newRow(reqs []request) row {
	r := row{requests: len(reqs), count: map[int]int{}, ok: true}
	var successes, refusals []time.Duration
	for _, q := range reqs {
		r.count[q.status]++
		switch q.status {
		case 200:
			successes = append(successes, q.took)
		case 503:
			refusals = append(refusals, q.took)
		}
	}
	var parts []string
	for _, status := range slices.Sorted(maps.Keys(r.count)) {
		name := fmt.Sprint(status)
		if status == 0 {
			name = "no answer"
		}
		parts = append(parts, fmt.Sprintf("%s×%d", name, r.count[status]))
	}
	r.statuses = strings.Join(parts, " ")
	r.successes = len(successes)
	r.successP50, r.successP99 = percentile(successes, 0.50), percentile(successes, 0.99)
	r.refusalP99 = percentile(refusals, 0.99)
	return r
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(int(p*float64(len(d))), len(d)-1)]
}

// want records a target and whether it was met.
func (r *row) want(met bool, format string, args ...any) {
	if !met {
		r.ok = false
		r.missed = append(r.missed, fmt.Sprintf(format, args...))
	}
}

func (r *row) checkLedger(rig *rig, before ledger) error {
	text, ok, err := rig.check(before, r.successes)
	r.ledger = text
	r.want(ok, "ledger exact (charged = stored = successes, nothing open)")
	return err
}

func (r row) verdict() string {
	if r.ok {
		return "all targets met"
	}
	return "missed: " + strings.Join(r.missed, "; ")
}

func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| scenario | requests | statuses | 200 p50 / p99 | 503 p99 | memory | ledger | notes | targets |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %d | %s | %v / %v | %v | %s | %s | %s | %s |\n", r.scenario, r.requests, r.statuses,
			r.successP50.Round(time.Millisecond), r.successP99.Round(time.Millisecond), r.refusalP99.Round(time.Microsecond*100),
			r.memory, r.ledger, r.notes, r.verdict())
	}
}
