package riverqueue

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/upscalekit/upscale"
	"github.com/upscalekit/upscale/accounts"
)

// The River queue of the dashboard's mail.
const mailQueueName = "upscale_mail"

var (
	_ accounts.Outbox = (*Queue[*sql.Tx])(nil)
	_ accounts.Outbox = (*Queue[pgx.Tx])(nil)
)

// mailArgs is a mail as River keeps it: a job of kind "upscale_mail" in
// the queue "upscale_mail". It holds a sign-in link until River cleans it
// away after Retention; the link stops working long before.
type mailArgs struct {
	Mail    accounts.Mail `json:"mail"`
	Expires time.Time     `json:"expires"`
}

func (mailArgs) Kind() string { return "upscale_mail" }

// Post implements accounts.Outbox: the mail is a River job, sent by
// whichever process sends mail (SendMail) on the database, retried while
// the mail server is unavailable, until expires.
func (q *Queue[TTx]) Post(ctx context.Context, m accounts.Mail, expires time.Time) error {
	_, err := q.client.Insert(ctx, mailArgs{Mail: m, Expires: expires}, &river.InsertOpts{Queue: mailQueueName, MaxAttempts: maxDeliveries})
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: insert a mail: %w", err))
	}
	return nil
}

// SendMail starts sending the mail posted on the database with mailer, at
// most concurrency at once, and returns the function that stops it, as
// Work's does.
func (q *Queue[TTx]) SendMail(ctx context.Context, concurrency int, mailer accounts.Mailer) (func(drain context.Context) error, error) {
	if mailer == nil {
		return nil, errors.New("riverqueue: SendMail needs a Mailer")
	}
	return q.work(ctx, handlers{send: mailer}, mailQueueName, concurrency)
}

// mailWorker sends mail for River: a mail the server could not take for
// now is an error, which River retries after accounts.MailBackoff, until it
// expires; one the server refused for good is cancelled.
type mailWorker struct {
	river.WorkerDefaults[mailArgs]
	send accounts.Mailer
	now  func() time.Time // the queue's clock, which mail expires by
}

// errMailExpired cancels a mail whose link expired before it was sent.
var errMailExpired = errors.New("riverqueue: the mail expired before it was sent")

func (w *mailWorker) Work(ctx context.Context, rj *river.Job[mailArgs]) error {
	if !w.now().Before(rj.Args.Expires) {
		return river.JobCancel(errMailExpired)
	}
	ctx, cancel := context.WithDeadline(ctx, rj.Args.Expires)
	defer cancel()
	err := w.send.Send(ctx, rj.Args.Mail)
	if err != nil && !errors.Is(err, upscale.ErrUnavailable) {
		return river.JobCancel(err)
	}
	return err
}

func (w *mailWorker) NextRetry(rj *river.Job[mailArgs]) time.Time {
	return time.Now().Add(accounts.MailBackoff(rj.Attempt))
}
