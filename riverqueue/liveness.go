package riverqueue

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivertype"

	"github.com/upscalekit/upscale/accounts"
	"github.com/upscalekit/upscale/internal/periodic"
)

// A process that works the queue beats: a row of its own in the table
// upscale_queue_process, its time renewed every Lapse/6. Every working
// process, every beat, hands back the runs of processes whose beat is
// older than Lapse (or who have no row any more), as River's own rescuer
// would after RunTimeout and a minute: retryable, cancelled if a cancel was
// asked meanwhile, discarded once its attempts are spent. A run is thus
// never handed over for being slow, only for its process's silence, and
// RunTimeout is free to be long.
//
// River records which client ran a job (attempted_by): a working
// process's clients are named "<process>/<queue>", by which a run is
// traced to its process. A process judges another dead only by deleting
// its stale row, so a process that beat meanwhile is never judged dead.
// A process that has not beaten for half of Lapse, by its own clock and
// whatever its database does, stops its own job runs (they are handed
// back as by a stop), so that by the time others may hand them over they
// no longer run, nor write; one that finds its row gone does the same,
// and takes its row again unless a live twin holds it. One that finds a
// live twin in its row (it was paused past the twin's start: SIGSTOP, a
// frozen VM) is displaced for good: its River clients stop fetching at
// once, and its host's stops return ErrProcessIDInUse, for the process to
// exit; fetching on with its runs fenced would take each job only to
// snooze it.

// processTable is where the working processes beat. The times are Unix
// milliseconds of the processes' own clocks, which must agree within a
// small part of Lapse.
const processTable = `CREATE TABLE IF NOT EXISTS upscale_queue_process (
	id TEXT PRIMARY KEY,
	instance TEXT NOT NULL,
	beat_at BIGINT NOT NULL
)`

// errLapsed stops the runs of a process that may have been judged dead.
var errLapsed = errors.New("riverqueue: this process's beat lapsed; its runs are handed back")

// ErrProcessIDInUse is Work's, Deliver's and SendMail's error when
// another live process beats under Options.ProcessID, and their stops'
// once such a twin displaced this process (Queue.Displaced).
var ErrProcessIDInUse = errors.New("riverqueue: the process ID is in use by a live process")

// Displaced is closed once this process found a live twin in its row: a
// process under the same Options.ProcessID that started while this one
// was paused. Its River clients then fetch no more, its runs are stopped
// and handed back, and the stops of Work, Deliver and SendMail return an
// error wrapping ErrProcessIDInUse, as Work does after: the Queue works
// no more, and its process should exit, to be started again under an ID
// of its own.
func (q *Queue[TTx]) Displaced() <-chan struct{} { return q.live.displaced.Done() }

// liveness is a Queue's beat, while at least one of its River clients
// works, and its hand-back of other processes' runs.
type liveness[TTx any] struct {
	q        *Queue[TTx]
	id       string // processKey(Options.ProcessID)
	instance string // this run of the process, unlike id

	// turning serialises join and leave, which the beat does not take.
	turning sync.Mutex
	working map[*river.Client[TTx]]bool // the River clients working here
	beating *periodic.Job

	// displaced is done, its cause wrapping ErrProcessIDInUse, once a
	// live twin holds the process ID: the River clients run under it, and
	// stop with it, for good.
	displaced context.Context
	displace  context.CancelCauseFunc

	mu sync.Mutex
	// fence is the context of the runs starting now: done, with
	// errLapsed, while this process may have been judged dead, until it
	// holds its row again.
	fence    context.Context
	endFence context.CancelCauseFunc
	watchdog *time.Timer // stops the runs half a Lapse after the last beat
}

func newLiveness[TTx any](q *Queue[TTx]) *liveness[TTx] {
	l := &liveness[TTx]{q: q, id: processKey(q.opts.ProcessID), instance: strings.ToLower(rand.Text()), working: map[*river.Client[TTx]]bool{}}
	l.fence, l.endFence = context.WithCancelCause(context.Background())
	l.displaced, l.displace = context.WithCancelCause(context.Background())
	l.watchdog = time.AfterFunc(time.Hour, func() { l.stopRuns("it has not beaten for half its lapse") })
	l.watchdog.Stop()
	return l
}

// longestProcessKey keeps a River client ID, "<key>/upscale_webhooks",
// within River's 100 bytes.
const longestProcessKey = 64

// processKey is id, or, when longer than longestProcessKey, its start and
// digest.
func processKey(id string) string {
	if len(id) <= longestProcessKey {
		return id
	}
	digest := sha256.Sum256([]byte(id))
	return id[:longestProcessKey-33] + "~" + hex.EncodeToString(digest[:16])
}

// interval is how often the process beats and looks for lapsed runs.
func (l *liveness[TTx]) interval() time.Duration { return l.q.opts.Lapse / 6 }

// clientID is the River client ID of this process's client of queue.
func (l *liveness[TTx]) clientID(queue string) string { return l.id + "/" + queue }

// processOf is the process of a River client ID this package named, and
// false for another's.
func processOf(clientID string) (string, bool) {
	i := strings.LastIndex(clientID, "/")
	if i < 0 {
		return "", false
	}
	queue := clientID[i+1:]
	return clientID[:i], queue == queueName || queue == webhookQueueName || queue == mailQueueName
}

// join counts client, about to work; the first claims the process ID,
// hands back the runs a previous run of this process left, and starts
// beating. A displaced process joins no more: ErrProcessIDInUse.
func (l *liveness[TTx]) join(ctx context.Context, client *river.Client[TTx]) error {
	l.turning.Lock()
	defer l.turning.Unlock()
	if err := context.Cause(l.displaced); err != nil {
		return err
	}
	if len(l.working) > 0 {
		l.working[client] = true
		return nil
	}
	if err := l.claim(ctx); err != nil {
		return err
	}
	if err := l.q.handBack(ctx, func(process string) bool { return process == l.id }); err != nil {
		l.release(ctx)
		return err
	}
	l.working[client] = true
	l.beating = periodic.Start(l.interval(), l.beat)
	return nil
}

// leave counts client stopped; the last stops beating and removes the
// process's row, its runs all given back by the stops.
func (l *liveness[TTx]) leave(ctx context.Context, client *river.Client[TTx]) {
	l.turning.Lock()
	defer l.turning.Unlock()
	if delete(l.working, client); len(l.working) == 0 {
		l.beating.Stop()
		l.release(ctx)
	}
}

// claim takes the process ID's row. A row another instance beat within
// Lapse is either a process that just died, or a live one under the same
// ID: claim waits two beats and looks again (one beat late still shows).
func (l *liveness[TTx]) claim(ctx context.Context) error {
	instance, beatAt, err := l.row(ctx)
	if err != nil {
		return err
	}
	if instance != "" && l.fresh(beatAt) {
		select {
		case <-time.After(2 * l.interval()):
		case <-ctx.Done():
			return ctx.Err()
		}
		was := beatAt
		if instance, beatAt, err = l.row(ctx); err != nil {
			return err
		}
		if instance != "" && beatAt != was {
			return fmt.Errorf("%w: %q beats elsewhere; give each process its own ID", ErrProcessIDInUse, l.id)
		}
	}
	took, err := l.take(ctx, instance, beatAt)
	if err == nil && !took {
		err = fmt.Errorf("%w: %q was claimed by another process as this one started; give each process its own ID", ErrProcessIDInUse, l.id)
	}
	return err
}

// fresh reports whether a beat at beatAt is within Lapse.
func (l *liveness[TTx]) fresh(beatAt int64) bool {
	return time.Since(time.UnixMilli(beatAt)) < l.q.opts.Lapse
}

// row reads the process ID's row: an empty instance when there is none.
func (l *liveness[TTx]) row(ctx context.Context) (instance string, beatAt int64, err error) {
	err = l.q.driver.GetExecutor().QueryRow(ctx, `SELECT instance, beat_at FROM upscale_queue_process WHERE id = $1`, l.id).Scan(&instance, &beatAt)
	if noRows(err) {
		return "", 0, nil
	}
	if err != nil {
		return "", 0, classify(ctx, fmt.Errorf("riverqueue: read process %q's beat: %w", l.id, err))
	}
	return instance, beatAt, nil
}

// take makes the process ID's row this instance's, provided it is still
// as it was read (no row: instance empty), and reports whether it did;
// then it lifts the fence.
func (l *liveness[TTx]) take(ctx context.Context, instance string, beatAt int64) (bool, error) {
	now := time.Now()
	var id string
	err := l.q.driver.GetExecutor().QueryRow(ctx, `INSERT INTO upscale_queue_process (id, instance, beat_at) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET instance = excluded.instance, beat_at = excluded.beat_at
		WHERE upscale_queue_process.instance = $4 AND upscale_queue_process.beat_at = $5 RETURNING id`,
		l.id, l.instance, now.UnixMilli(), instance, beatAt).Scan(&id)
	if noRows(err) {
		return false, nil
	}
	if err != nil {
		return false, classify(ctx, fmt.Errorf("riverqueue: claim process %q: %w", l.id, err))
	}
	l.held(now)
	return true, nil
}

// held records that this instance holds its row, beaten at at: the runs
// starting from now run unfenced, and the watchdog stops them half a Lapse
// after at unless a later beat comes first. No other process has handed
// back a run of a process that still has its row.
func (l *liveness[TTx]) held(at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fence.Err() != nil {
		l.fence, l.endFence = context.WithCancelCause(context.Background())
	}
	l.watchdog.Reset(time.Until(at.Add(l.q.opts.Lapse / 2)))
}

// release removes this instance's row.
func (l *liveness[TTx]) release(ctx context.Context) {
	l.mu.Lock()
	l.watchdog.Stop()
	l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.interval())
	defer cancel()
	err := l.q.driver.GetExecutor().Exec(ctx, `DELETE FROM upscale_queue_process WHERE id = $1 AND instance = $2`, l.id, l.instance)
	if err != nil {
		l.q.opts.Logger.Warn("riverqueue: remove this process's beat; others forget it once it lapses", "process", l.id, "err", err)
	}
}

// beat renews the process's row, then hands back the runs of lapsed
// processes. A process whose row is gone stops its runs and takes its row
// again, unless a live twin holds it: then it is displaced, and beats no
// more.
func (l *liveness[TTx]) beat() {
	if l.displaced.Err() != nil {
		return // its row is the twin's; its stops remove nothing
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.interval())
	defer cancel()
	now := time.Now()
	var id string
	err := l.q.driver.GetExecutor().QueryRow(ctx, `UPDATE upscale_queue_process SET beat_at = $1 WHERE id = $2 AND instance = $3 RETURNING id`,
		now.UnixMilli(), l.id, l.instance).Scan(&id)
	switch {
	case noRows(err):
		l.stopRuns("its beat was gone: others judged it dead")
		err = l.retake(ctx)
		if errors.Is(err, ErrProcessIDInUse) {
			l.q.opts.Logger.Error("riverqueue: a live twin holds this process's ID; this process takes no more jobs, and should exit", "process", l.id, "err", err)
			l.displace(err)
			return
		}
		if err != nil {
			l.q.opts.Logger.Error("riverqueue: this process cannot beat; it runs no job until it can", "process", l.id, "err", err)
			return
		}
	case err != nil:
		l.q.opts.Logger.Warn("riverqueue: beat; tried again in a moment", "process", l.id, "err", err)
		return
	default:
		l.held(now)
	}
	cutoff := now.Add(-l.q.opts.Lapse).UnixMilli()
	if err := l.q.handBack(ctx, func(process string) bool { return l.lapsed(ctx, process, cutoff) }); err != nil {
		l.q.opts.Logger.Warn("riverqueue: hand back the runs of dead processes; tried again next beat", "err", err)
	}
}

// retake takes the process ID's row again after it was found gone, unless
// another live instance holds it.
func (l *liveness[TTx]) retake(ctx context.Context) error {
	instance, beatAt, err := l.row(ctx)
	if err != nil {
		return err
	}
	if instance != "" && l.fresh(beatAt) {
		return fmt.Errorf("%w: %q beats elsewhere; give each process its own ID", ErrProcessIDInUse, l.id)
	}
	if took, err := l.take(ctx, instance, beatAt); err != nil || !took {
		return cmp.Or(err, fmt.Errorf("%w: %q was claimed by another process", ErrProcessIDInUse, l.id))
	}
	return nil
}

// lapsed reports whether process is dead: it has no row (it was judged
// dead already, or stopped), or this process deleted its row, whose beat
// was before cutoff. A process that beat since its row was read is
// alive, and so is one whose row cannot be read.
func (l *liveness[TTx]) lapsed(ctx context.Context, process string, cutoff int64) bool {
	if process == l.id {
		return false
	}
	exec := l.q.driver.GetExecutor()
	var beatAt int64
	err := exec.QueryRow(ctx, `SELECT beat_at FROM upscale_queue_process WHERE id = $1`, process).Scan(&beatAt)
	if noRows(err) {
		return true
	}
	if err != nil {
		l.q.opts.Logger.Warn("riverqueue: read a process's beat", "process", process, "err", err)
		return false
	}
	if beatAt >= cutoff {
		return false
	}
	var id string
	err = exec.QueryRow(ctx, `DELETE FROM upscale_queue_process WHERE id = $1 AND beat_at = $2 RETURNING id`, process, beatAt).Scan(&id)
	if err != nil && !noRows(err) {
		l.q.opts.Logger.Warn("riverqueue: forget a dead process", "process", process, "err", err)
	}
	return err == nil
}

// stopRuns ends the runs under way with errLapsed, and those that start
// until the process holds its row again.
func (l *liveness[TTx]) stopRuns(why string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fence.Err() == nil {
		l.q.opts.Logger.Warn("riverqueue: this process stops its job runs, to be run again", "process", l.id, "why", why)
		l.endFence(errLapsed)
	}
}

// currentFence is the fence of a run starting now.
func (l *liveness[TTx]) currentFence() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fence
}

// handBack hands back the runs of this package's jobs whose process is
// dead by gone (it receives the process's ID), as River's rescuer does:
// cancelled when a cancel was asked meanwhile, retryable while attempts
// are left, else discarded. A run another process handed back and a third
// took since it was listed is left alone: its attempt began after it.
func (q *Queue[TTx]) handBack(ctx context.Context, gone func(process string) bool) error {
	list, err := q.client.JobList(ctx, river.NewJobListParams().Kinds(jobArgs{}.Kind(), webhookArgs{}.Kind(), mailArgs{}.Kind()).
		States(rivertype.JobStateRunning).First(10_000))
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: list the running jobs: %w", err))
	}
	judged := map[string]bool{}
	for _, row := range list.Jobs {
		if len(row.AttemptedBy) == 0 || row.AttemptedAt == nil {
			continue
		}
		process, ours := processOf(row.AttemptedBy[len(row.AttemptedBy)-1])
		if !ours {
			continue // River's rescuer's, after RunTimeout
		}
		dead, ok := judged[process]
		if !ok {
			dead = gone(process)
			judged[process] = dead
		}
		if dead {
			if err := q.handBackRun(ctx, row); err != nil {
				return err
			}
			q.opts.Logger.Info("riverqueue: a dead process's run handed back", "river_id", row.ID, "kind", row.Kind, "process", process)
		}
	}
	return nil
}

// handBackRun ends one run of a dead process, unless the job has been
// attempted again since it was read.
func (q *Queue[TTx]) handBackRun(ctx context.Context, row *rivertype.JobRow) error {
	now := time.Now().UTC()
	var meta struct {
		CancelAttemptedAt time.Time `json:"cancel_attempted_at"`
	}
	json.Unmarshal(row.Metadata, &meta) // no cancel asked: zero
	state, finalized, scheduled := rivertype.JobStateRetryable, (*time.Time)(nil), now.Add(backoff(row.Attempt-1))
	switch {
	case !meta.CancelAttemptedAt.IsZero():
		state, finalized, scheduled = rivertype.JobStateCancelled, &now, row.ScheduledAt
	case row.Attempt >= row.MaxAttempts:
		state, finalized, scheduled = rivertype.JobStateDiscarded, &now, row.ScheduledAt
	case row.Kind == (webhookArgs{}).Kind():
		scheduled = now.Add(q.opts.WebhookBackoff(row.Attempt))
	case row.Kind == (mailArgs{}).Kind():
		scheduled = now.Add(accounts.MailBackoff(row.Attempt))
	}
	attemptErr, err := json.Marshal(rivertype.AttemptError{At: now, Attempt: max(row.Attempt, 0), Error: "its process stopped beating"})
	if err != nil {
		return err
	}
	_, err = q.driver.GetExecutor().JobRescueMany(ctx, &riverdriver.JobRescueManyParams{
		ID: []int64{row.ID}, Error: [][]byte{attemptErr}, FinalizedAt: []*time.Time{finalized},
		ScheduledAt: []time.Time{scheduled}, State: []string{string(state)},
		StuckHorizon: row.AttemptedAt.Add(time.Millisecond),
	})
	if err != nil {
		return classify(ctx, fmt.Errorf("riverqueue: hand back River job %d: %w", row.ID, err))
	}
	return nil
}

// noRows reports whether err is either driver's "no rows".
func noRows(err error) bool {
	return errors.Is(err, sql.ErrNoRows) || errors.Is(err, pgx.ErrNoRows)
}
