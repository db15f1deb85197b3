// Command loadtest runs the load and fault scenarios against the real
// standalone, with PostgreSQL and versitygw (S3) behind TCP proxies it can
// cut, and prints one table row per scenario: statuses, latencies, memory
// and the ledger check (the credits spent equal the successes, no
// reservation is left open, and the bucket holds one result per success
// and nothing else). make loadtest runs it: it takes several minutes and
// wants the machine to itself. A short form of three scenarios runs with
// make test (TestShortForm), so that it keeps working.
package main

import (
	"flag"
	"fmt"
	"os"
	"regexp"
	"time"
)

type scenario struct {
	name string
	run  func(r *rig) (row, error)
}

var scenarios = []scenario{
	{"overload", overload},
	{"big-sources", bigSources},
	{"slow-clients", slowClients},
	{"postgres-down", func(r *rig) (row, error) { return outage(r, "postgres-down", r.pgProxy) }},
	{"s3-down", func(r *rig) (row, error) { return outage(r, "s3-down", r.s3Proxy) }},
	{"sigterm", sigterm},
	{"engine-timeouts", engineTimeouts},
	{"slow-key", slowKey},
	{"slow-uploads", slowUploads},
	{"jobs", jobs},
	{"fair-jobs", fairJobs},
	{"mixed", mixed},
	{"waiters", waiters},
	{"dead-webhook", deadWebhook},
}

var (
	runOnly  = flag.String("run", ".", "regexp of the scenarios to run: "+names())
	duration = flag.Duration("duration", 60*time.Second, "how long the overload scenario offers load")
	clients  = flag.Int("clients", 200, "clients in the overload scenario")
	keep     = flag.Bool("keep", false, "keep the work directory, with each server's log, and print its path")
)

func names() string {
	s := ""
	for i, sc := range scenarios {
		if i > 0 {
			s += ", "
		}
		s += sc.name
	}
	return s
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run() error {
	only, err := regexp.Compile(*runOnly)
	if err != nil {
		return err
	}
	r, err := newRig()
	if err != nil {
		return err
	}
	defer r.close()
	var rows []row
	failed := false
	for _, sc := range scenarios {
		if !only.MatchString(sc.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "loadtest: %s ...\n", sc.name)
		res, err := sc.run(r)
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		res.scenario = sc.name
		if !res.ok {
			failed = true
		}
		rows = append(rows, res)
		fmt.Fprintf(os.Stderr, "loadtest: %s done: %s\n", sc.name, res.verdict())
	}
	printTable(os.Stdout, rows)
	if failed {
		return fmt.Errorf("a scenario missed its target; see the table")
	}
	return nil
}
