package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/sqlstore"
)

// An adminCommand is one subcommand for a host's operators and billing
// scripts, working on the same database as the server (which may be
// running).
type adminCommand struct {
	name, usage string
	run         func(ctx context.Context, store *sqlstore.Store, a adminArgs, stdout io.Writer) error
}

// adminArgs are the flags the subcommands share; each uses some.
type adminArgs struct {
	account, key, id, name, plan, month, ref, publicURL string
	config, stripeAPIBase                               string
	amount                                              int64
	days                                                int
}

// when prints a time of keys list, in UTC to the second, or "-" for none.
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.DateTime)
}

var adminCommands = []adminCommand{
	{"keys create", "--account ID [--name N]: make a key for the account and print it (shown once; only its hash is stored)",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, stdout io.Writer) error {
			return printLine(stdout)(s.CreateKey(ctx, a.account, a.name))
		}},
	{"keys list", "--account ID: the account's keys, the newest first: ID, hint, name, when made, last used and revoked (never the key)",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, stdout io.Writer) error {
			keys, err := s.ListKeys(ctx, a.account)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tHINT\tNAME\tCREATED\tLAST USED\tREVOKED")
			for _, k := range keys {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, cmp.Or(k.Hint, "-"), cmp.Or(k.Name, "-"), when(k.Created), when(k.LastUsed), when(k.Revoked))
			}
			return w.Flush()
		}},
	{"keys revoke", "--key KEY, or --account ID --id ID (from keys list): make the key fail from now on",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, _ io.Writer) error {
			if a.id != "" {
				return s.RevokeKeyID(ctx, a.account, a.id)
			}
			return s.RevokeKey(ctx, a.key)
		}},
	{"dashboard link", "--account ID [--public-url URL]: print a link that signs the account in to the dashboard, once, within 15 minutes",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, stdout io.Writer) error {
			if _, err := s.Balance(ctx, a.account); err != nil {
				return err
			}
			signIn, err := newSignIn(ctx, s, strings.TrimSuffix(a.publicURL, "/"), nil, nil)
			if err != nil {
				return err
			}
			return printLine(stdout)(signIn.Link(a.account))
		}},
	{"webhook-secret rotate", "--account ID: make a new webhook signing secret for the account and print it; the previous one signs beside it for 24 h",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, stdout io.Writer) error {
			return printLine(stdout)(s.RotateWebhookSecret(ctx, a.account))
		}},
	{"credits grant", "--account ID --amount N [--ref R]: add N credits (negative takes them away)",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, _ io.Writer) error {
			return s.GrantCredits(ctx, a.account, a.amount, a.ref)
		}},
	{"share-bonus grant", "--account ID --amount N [--ref R]: add N share-bonus images",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, _ io.Writer) error {
			return s.GrantShareBonus(ctx, a.account, a.amount, a.ref)
		}},
	{"plan set", "--account ID --plan NAME: move the account to a plan of the config file",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, _ io.Writer) error {
			return s.SetPlan(ctx, a.account, a.plan)
		}},
	{"billing check", "-config FILE [--public-url URL]: ask Stripe (" + stripeKeyEnv + ") whether the file's prices and the webhook endpoint at URL" + webhookPath + " are set up to sell",
		billingCheck},
	{"billing doubles", "-config FILE: ask Stripe (" + stripeKeyEnv + ") for the accounts with more than one live subscription, each billed: account, customer, subscriptions; cancel and refund all but one",
		billingDoubles},
	{"accounts opened", "[--days N]: the accounts people opened by email in the last N days (7), by day: when, account, address, the account whose share link brought it",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, stdout io.Writer) error {
			if a.days < 1 {
				return errors.New("--days: want 1 or more")
			}
			now := time.Now().UTC()
			opened, err := s.Opened(ctx, time.Date(now.Year(), now.Month(), now.Day()-(a.days-1), 0, 0, 0, 0, time.UTC))
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "OPENED\tACCOUNT\tEMAIL\tREFERRER")
			var days []string
			perDay := map[string]int{}
			for _, e := range opened {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", when(e.Opened), e.AccountID, e.Email, cmp.Or(e.Referrer, "-"))
				day := e.Opened.UTC().Format(time.DateOnly)
				if perDay[day]++; perDay[day] == 1 {
					days = append(days, day)
				}
			}
			if err := w.Flush(); err != nil {
				return err
			}
			for _, day := range days {
				fmt.Fprintf(stdout, "%s: %d opened\n", day, perDay[day])
			}
			return nil
		}},
	{"usage", "--account ID [--month YYYY-MM]: what the account spent and has left",
		func(ctx context.Context, s *sqlstore.Store, a adminArgs, stdout io.Writer) error {
			u, err := s.Usage(ctx, a.account, a.month)
			if err != nil {
				return err
			}
			b, err := s.Balance(ctx, a.account)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "account %s, plan %s, month %s\n", a.account, b.Plan.Name, u.Month)
			for _, pool := range []upscale.Pool{upscale.PoolUnlimited, upscale.PoolFree, upscale.PoolShareBonus, upscale.PoolCredit} {
				fmt.Fprintf(stdout, "  %-12s used %d\n", pool, u.ByPool[pool])
			}
			fmt.Fprintf(stdout, "left: free_pool %d, share_bonus %d, credit %d\n", b.Free, b.ShareBonus, b.Credits)
			return nil
		}},
}

// printLine returns a func that prints a command's one line of output
// (a key, a link, a secret) unless the command failed.
func printLine(stdout io.Writer) func(string, error) error {
	return func(line string, err error) error {
		if err == nil {
			_, err = fmt.Fprintln(stdout, line)
		}
		return err
	}
}

func isSubcommand(word string) bool {
	return slices.ContainsFunc(adminCommands, func(c adminCommand) bool { return strings.HasPrefix(c.name, word) })
}

// runSubcommand runs "standalone <command> [flags]".
func runSubcommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var cmd *adminCommand
	for i := range adminCommands {
		words := strings.Fields(adminCommands[i].name)
		if len(args) >= len(words) && slices.Equal(args[:len(words)], words) {
			cmd, args = &adminCommands[i], args[len(words):]
			break
		}
	}
	if cmd == nil {
		var b strings.Builder
		for _, c := range adminCommands {
			fmt.Fprintf(&b, "\n  standalone %s %s", c.name, c.usage)
		}
		return fmt.Errorf("unknown command %q; the admin commands are:%s", strings.Join(args, " "), b.String())
	}
	var st storage
	var a adminArgs
	fs := flag.NewFlagSet("standalone "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	st.addFlags(fs)
	fs.StringVar(&a.account, "account", "", "account ID")
	fs.StringVar(&a.key, "key", "", "API key")
	fs.StringVar(&a.id, "id", "", "a key's ID, as keys list shows it")
	fs.StringVar(&a.name, "name", "", "a name for the key, to tell it apart (at most 64 characters)")
	fs.StringVar(&a.plan, "plan", "", "plan name")
	fs.StringVar(&a.month, "month", upscale.Month(time.Now()), "calendar month, YYYY-MM (UTC)")
	fs.StringVar(&a.ref, "ref", "standalone-"+strings.ReplaceAll(cmd.name, " ", "-"), "reference kept in the journal, such as an invoice number")
	fs.Int64Var(&a.amount, "amount", 0, "number of units")
	fs.IntVar(&a.days, "days", 7, "days back from today (UTC), today included")
	fs.StringVar(&a.publicURL, "public-url", "http://127.0.0.1:8080", "base URL under which the server is reached, as its -public-url")
	fs.StringVar(&a.config, "config", "", "the server's JSON config file")
	fs.StringVar(&a.stripeAPIBase, "stripe-api-base", "", "for tests: an http URL on loopback where a Stripe test server (stripe-mock, a fake) answers")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	store, err := st.open(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	err = cmd.run(ctx, store, a, stdout)
	if errors.Is(err, upscale.ErrNotFound) {
		return fmt.Errorf("%s: %w (check --account, --key, --id or --plan)", cmd.name, err)
	}
	return err
}
