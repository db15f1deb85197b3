package recent

import (
	"cmp"
	"testing"
	"time"
)

type record struct {
	id string
	at time.Time
	n  int
}

// TestRecords: a record is kept by account and ID, updated from the one
// kept, listed by the order and filter asked, and forgotten past the
// retention, both from lists and from memory.
func TestRecords(t *testing.T) {
	start := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	now := start
	r := New(time.Hour, func() time.Time { return now }, func(x record) time.Time { return x.at })
	count := func(id string, at time.Time) func(record) record {
		return func(kept record) record { return record{id: id, at: at, n: kept.n + 1} }
	}
	r.Put("a", "x", count("x", start))
	r.Put("a", "x", count("x", start.Add(time.Minute)))
	r.Put("a", "y", count("y", start.Add(2*time.Minute)))
	r.Put("b", "z", count("z", start))
	all := func(record) bool { return true }
	latest := func(p, q record) int { return cmp.Or(q.at.Compare(p.at), cmp.Compare(p.id, q.id)) }
	if got := r.List("a", all, latest, 10); len(got) != 2 || got[0].id != "y" || got[1] != (record{"x", start.Add(time.Minute), 2}) {
		t.Errorf("a's records: %+v", got)
	}
	if got := r.List("a", func(x record) bool { return x.id == "x" }, latest, 10); len(got) != 1 {
		t.Errorf("a's x: %+v", got)
	}
	if got := r.List("a", all, latest, 1); len(got) != 1 || got[0].id != "y" {
		t.Errorf("the latest of a's: %+v", got)
	}
	now = start.Add(time.Hour + 90*time.Second)
	if got := r.List("a", all, latest, 10); len(got) != 1 || got[0].id != "y" {
		t.Errorf("a's past an hour after x: %+v", got)
	}
	if _, kept := r.byAccount["b"]; kept {
		t.Error("b's record past the retention is still in memory")
	}
}

// TestRecordsPerAccount: past PerAccount records of an account, the
// oldest goes; a limit of zero or less lists them all.
func TestRecordsPerAccount(t *testing.T) {
	start := time.Date(2026, time.March, 1, 0, 0, 0, 0, time.UTC)
	r := New(time.Hour, func() time.Time { return start }, func(x record) time.Time { return x.at })
	for i := range PerAccount + 1 {
		at := start.Add(-time.Duration(PerAccount-i) * time.Millisecond)
		r.Put("a", at.String(), func(record) record { return record{id: at.String(), at: at} })
	}
	got := r.List("a", func(record) bool { return true }, func(p, q record) int { return p.at.Compare(q.at) }, -1)
	if len(got) != PerAccount || !got[0].at.Equal(start.Add(-time.Duration(PerAccount-1)*time.Millisecond)) {
		t.Errorf("%d records, the oldest %v; want %d, the first gone", len(got), got[0].at, PerAccount)
	}
}
