package riverqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/upscalekit/upscale"
)

// jobArgs is an upscale job as River keeps it.
type jobArgs struct {
	Tag          string         `json:"tag"` // the random part of the job's ID
	AccountID    string         `json:"accountId" river:"unique"`
	KeyID        string         `json:"keyId,omitempty"`
	Submission   string         `json:"submission,omitempty" river:"unique"`
	Params       upscale.Params `json:"params"`
	Source       string         `json:"source"`
	SourcePixels int64          `json:"sourcePixels,omitempty"`
	Reservation  string         `json:"reservation"`
	Pool         upscale.Pool   `json:"pool"`
	Webhook      string         `json:"webhook,omitempty"`
	Created      time.Time      `json:"created"`
	Expires      time.Time      `json:"expires"`
}

func (jobArgs) Kind() string { return "upscale" }

// output is what a run records: the result and how it was made, or the
// problem; or, while the job has not ended, what its run prepared. Settled
// marks a job that ended with its settlement done (or with nothing to
// settle), which the settling sweep skips.
type output struct {
	Result   *upscale.Response `json:"result,omitempty"`
	Engine   string            `json:"engine,omitempty"`
	Problem  *upscale.Problem  `json:"problem,omitempty"`
	Prepared *prepared         `json:"prepared,omitempty"`
	Settled  bool              `json:"settled,omitempty"`
}

// prepared is an upscale.PreparedResult as River keeps it.
type prepared struct {
	Key         string            `json:"key"`
	Result      *upscale.Response `json:"result,omitempty"`
	Engine      string            `json:"engine,omitempty"`
	LinkExpires time.Time         `json:"linkExpires"`
}

// Submit implements upscale.JobQueue.
func (q *Queue[TTx]) Submit(ctx context.Context, job upscale.Job) (upscale.Job, error) {
	args := jobArgs{
		Tag: strings.ToLower(rand.Text()), AccountID: job.AccountID, KeyID: job.KeyID, Submission: job.Submission, Params: job.Params,
		Source: job.Source, SourcePixels: job.SourcePixels, Reservation: job.Reservation, Pool: job.Pool, Webhook: job.Webhook,
		Created: job.Created, Expires: job.Expires,
	}
	opts := &river.InsertOpts{Queue: queueName, MaxAttempts: upscale.MaxJobAttempts, Priority: min(max(job.Priority, 1), upscale.JobPriorities)}
	if job.Submission != "" {
		// River's unique jobs: one job per account and Submission in
		// every state, until the job is cleaned away after Retention.
		opts.UniqueOpts = river.UniqueOpts{ByArgs: true, ByState: rivertype.JobStates()}
	}
	res, err := q.client.Insert(ctx, args, opts)
	if err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: insert: %w", err))
	}
	kept, err := q.job(res.Job)
	if err != nil || !res.UniqueSkippedAsDuplicate || q.opts.Now().Before(kept.Expires) || kept.Status == upscale.JobRunning {
		if err == nil {
			kept, err = q.stand(ctx, kept, res.Job.ID)
		}
		return kept, err
	}
	// The Submission's job expired, and is forgotten as Get forgets it;
	// River only cleans it away later.
	if _, err := q.client.JobDelete(ctx, res.Job.ID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: delete the expired job %q: %w", kept.ID, err))
	}
	return q.Submit(ctx, job)
}

// jobID formats a job's ID.
func jobID(riverID int64, tag string) string {
	return "job_" + strconv.FormatInt(riverID, 10) + "_" + tag
}

// row reads accountID's job id: ErrNotFound for an ID that does not
// parse, a job that does not exist, of another kind, tag or account, or
// expired.
func (q *Queue[TTx]) row(ctx context.Context, accountID, id string, read func(context.Context, int64) (*rivertype.JobRow, error)) (*rivertype.JobRow, upscale.Job, error) {
	notFound := fmt.Errorf("riverqueue: job %q: %w", id, upscale.ErrNotFound)
	number, tag, ok := strings.Cut(strings.TrimPrefix(id, "job_"), "_")
	riverID, err := strconv.ParseInt(number, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, "job_") {
		return nil, upscale.Job{}, notFound
	}
	row, err := read(ctx, riverID)
	if errors.Is(err, rivertype.ErrNotFound) {
		return nil, upscale.Job{}, notFound
	}
	if err != nil {
		return nil, upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: job %q: %w", id, err))
	}
	job, err := q.job(row)
	if err != nil || row.Kind != (jobArgs{}).Kind() || job.ID != jobID(riverID, tag) || job.AccountID != accountID || !q.opts.Now().Before(job.Expires) {
		return nil, upscale.Job{}, notFound
	}
	return row, job, nil
}

// Get implements upscale.JobQueue.
func (q *Queue[TTx]) Get(ctx context.Context, accountID, id string) (upscale.Job, error) {
	row, job, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return upscale.Job{}, err
	}
	return q.stand(ctx, job, row.ID)
}

// jobsAhead counts the available jobs River fetches before the job
// riverID: those of its queue with a lower priority, or the same and an
// earlier schedule (then a lower ID), as River's fetch orders them.
const jobsAhead = `SELECT count(*) FROM river_job j JOIN river_job me ON me.id = $1
WHERE j.queue = me.queue AND j.state = 'available' AND (j.priority < me.priority OR (j.priority = me.priority
	AND (j.scheduled_at < me.scheduled_at OR (j.scheduled_at = me.scheduled_at AND j.id < me.id))))`

// stand returns job, whose River ID is riverID, with its Position while it
// is queued.
func (q *Queue[TTx]) stand(ctx context.Context, job upscale.Job, riverID int64) (upscale.Job, error) {
	if job.Status != upscale.JobQueued {
		return job, nil
	}
	var ahead int
	if err := q.driver.GetExecutor().QueryRow(ctx, jobsAhead, riverID).Scan(&ahead); err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: job %q's position: %w", job.ID, err))
	}
	job.Position = &ahead
	return job, nil
}

// Cancel implements upscale.JobQueue. River cancels a queued job at once,
// and a running one's run through its context, in whichever process it
// runs (within two seconds where the database cannot notify, SQLite).
func (q *Queue[TTx]) Cancel(ctx context.Context, accountID, id string) (upscale.Job, error) {
	row, job, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return upscale.Job{}, err
	}
	if job.Status.Done() || (job.Status == upscale.JobQueued && job.Prepared.Delivers(q.opts.Now())) {
		return q.stand(ctx, job, row.ID)
	}
	if row, err = q.client.JobCancel(ctx, row.ID); err != nil {
		return upscale.Job{}, classify(ctx, fmt.Errorf("riverqueue: cancel job %q: %w", id, err))
	}
	// A job canceled while it waited is settled by its canceler and, in
	// case that failed, by the sweep too, which then changes nothing.
	return q.job(row)
}

// CountJobs implements upscale.JobCounter: the queue's available and
// running jobs (a job waiting out a retry's backoff is neither), the
// oldest available one's submission and their source pixels.
func (q *Queue[TTx]) CountJobs(ctx context.Context) (upscale.JobCounts, error) {
	exec := q.driver.GetExecutor()
	counts, err := exec.JobCountByQueueAndState(ctx, &riverdriver.JobCountByQueueAndStateParams{QueueNames: []string{queueName}})
	if err != nil {
		return upscale.JobCounts{}, classify(ctx, fmt.Errorf("riverqueue: count jobs: %w", err))
	}
	var jobs upscale.JobCounts
	for _, c := range counts {
		jobs.Queued, jobs.Running = jobs.Queued+int(c.CountAvailable), jobs.Running+int(c.CountRunning)
	}
	if jobs.Queued == 0 {
		return jobs, nil
	}
	var oldest string
	err = exec.QueryRow(ctx, `SELECT coalesce(sum(CAST(args ->> 'sourcePixels' AS BIGINT)), 0),
		coalesce((SELECT args ->> 'created' FROM river_job WHERE queue = $1 AND state = 'available' ORDER BY id LIMIT 1), '')
		FROM river_job WHERE queue = $1 AND state = 'available'`, queueName).Scan(&jobs.QueuedPixels, &oldest)
	if err != nil {
		return upscale.JobCounts{}, classify(ctx, fmt.Errorf("riverqueue: count queued work: %w", err))
	}
	jobs.OldestQueued, _ = time.Parse(time.RFC3339Nano, oldest) // zero if the job ended since
	return jobs, nil
}

// CountAccountJobs implements upscale.JobCounter.
func (q *Queue[TTx]) CountAccountJobs(ctx context.Context, accountID string) (int, error) {
	n, err := q.countAccount(ctx, jobArgs{}.Kind(), accountID)
	if err != nil {
		return 0, classify(ctx, fmt.Errorf("riverqueue: count the account's jobs: %w", err))
	}
	return n, nil
}

// countAccount counts accountID's River jobs of kind that have not ended.
func (q *Queue[TTx]) countAccount(ctx context.Context, kind, accountID string) (int, error) {
	var n int
	err := q.driver.GetExecutor().QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1 AND args ->> 'accountId' = $2
		AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`, kind, accountID).Scan(&n)
	return n, err
}

// Ping implements upscale.Pinger: the queue's database answers.
func (q *Queue[TTx]) Ping(ctx context.Context) error {
	if err := q.driver.GetExecutor().Ping(ctx); err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: ping: %w", err))
	}
	return nil
}

// Prepare implements upscale.JobQueue: the job's output, written now.
func (q *Queue[TTx]) Prepare(ctx context.Context, accountID, id string, p upscale.PreparedResult) error {
	row, _, err := q.row(ctx, accountID, id, q.client.JobGet)
	if err != nil {
		return err
	}
	out := output{Prepared: &prepared{Key: p.Key, Result: p.Result, Engine: p.Engine, LinkExpires: p.LinkExpires}}
	if _, err := q.client.JobUpdate(ctx, row.ID, &river.JobUpdateParams{Output: out}); err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: prepare job %q: %w", id, err))
	}
	return nil
}

// job is the upscale job a River row holds.
func (q *Queue[TTx]) job(row *rivertype.JobRow) (upscale.Job, error) {
	var args jobArgs
	if err := json.Unmarshal(row.EncodedArgs, &args); err != nil {
		return upscale.Job{}, fmt.Errorf("riverqueue: job %d's arguments: %w", row.ID, err)
	}
	job := upscale.Job{
		ID: jobID(row.ID, args.Tag), AccountID: args.AccountID, KeyID: args.KeyID, Params: args.Params, Source: args.Source, SourcePixels: args.SourcePixels,
		Reservation: args.Reservation, Pool: args.Pool, Priority: row.Priority, Webhook: args.Webhook, Created: args.Created, Expires: args.Expires,
		Status: upscale.JobQueued,
	}
	if row.AttemptedAt != nil {
		job.Started = *row.AttemptedAt
	}
	if row.FinalizedAt != nil {
		job.Finished = *row.FinalizedAt
	}
	out, err := outputOf(row)
	if err != nil {
		return upscale.Job{}, err
	}
	// A Result always stands, however River ended the job: its unit was
	// charged. A job River ended with a stored result and no run to
	// settle it yet is running: its settlement delivers that result.
	switch {
	case row.State == rivertype.JobStateRunning:
		job.Status = upscale.JobRunning
	case !finalized(row.State):
	case out.Result != nil:
		job.Status, job.Result, job.Engine = upscale.JobSucceeded, out.Result, out.Engine
	case !out.Settled && out.Prepared != nil && out.Prepared.Result != nil && q.opts.Now().Before(out.Prepared.LinkExpires):
		job.Status = upscale.JobRunning
	case row.State == rivertype.JobStateCancelled:
		job.Status = upscale.JobCanceled
	case row.State == rivertype.JobStateDiscarded && out.Problem == nil:
		// Given up after its attempts; its settlement records this.
		job.Status, job.Problem = upscale.JobFailed, upscale.GivenUpProblem()
	default:
		job.Status, job.Problem = upscale.JobFailed, cmp.Or(out.Problem, upscale.RunnerProblem())
	}
	if p := out.Prepared; p != nil && !out.Settled {
		job.Prepared = &upscale.PreparedResult{Key: p.Key, Result: p.Result, Engine: p.Engine, LinkExpires: p.LinkExpires}
	}
	return job, nil
}

// finalized reports whether River has ended a job in state.
func finalized(state rivertype.JobState) bool {
	return state == rivertype.JobStateCancelled || state == rivertype.JobStateCompleted || state == rivertype.JobStateDiscarded
}

// outputOf is the output a River row's run recorded, if any.
func outputOf(row *rivertype.JobRow) (output, error) {
	var out output
	if raw := row.Output(); raw != nil {
		if err := json.Unmarshal(raw, &out); err != nil {
			return output{}, fmt.Errorf("riverqueue: job %d's output: %w", row.ID, err)
		}
	}
	return out, nil
}
