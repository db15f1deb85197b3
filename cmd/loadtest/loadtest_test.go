package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/upscalekit/upscale/internal/testservers"
)

func TestMain(m *testing.M) { testservers.Main(m) }

// TestShortForm runs a short form of make loadtest with every test, so
// that the tool the docs cite cannot rot unseen (its jobs scenario once
// stopped starting and nobody knew): three scenarios, ten seconds of
// overload from 20 clients, on the real rig (the standalone, PostgreSQL
// and versitygw behind their proxies). Each must run to its end with its
// ledger exact; its speed targets are make loadtest's, on a machine to
// itself, and are only logged here.
func TestShortForm(t *testing.T) {
	*duration, *clients = 10*time.Second, 20
	r, err := newRig()
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	for _, name := range []string{"overload", "sigterm", "fair-jobs"} {
		i := slices.IndexFunc(scenarios, func(sc scenario) bool { return sc.name == name })
		res, err := scenarios[i].run(r)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if slices.ContainsFunc(res.missed, func(m string) bool { return strings.HasPrefix(m, "ledger exact") }) {
			t.Errorf("%s: the ledger is not exact: %s", name, res.ledger)
		}
		t.Logf("%s: %s; %s; %s", name, res.statuses, res.notes, res.verdict())
	}
}
