package upscale

import "time"

// Metrics receives what a Handler measures; package prommetrics exports it
// to Prometheus. Its methods are called as requests and jobs go, on their
// own goroutines (a request's, a job worker's), so they must be quick and
// safe for concurrent use. Nothing passed to them names a key or an
// account.
type Metrics interface {
	// Attach is called once, by New, with a function that reads the
	// handler's current load, for gauges read when metrics are collected.
	Attach(load func() Load)
	// RequestDone counts one finished request. code is "ok" for a success,
	// "accepted" for a job submitted (202) or its submission answered
	// again, "replayed" for an Idempotency-Key's kept answer, the problem
	// code of an error, or "caller_gone" when the caller left before the
	// answer; pool is the pool charged, "" when none was.
	RequestDone(code string, pool Pool, took time.Duration)
	// StepDone records how long one step of a request took.
	StepDone(step Step, took time.Duration)
	// ImageDone records the sizes of the source and result of one
	// enlarged image.
	ImageDone(sourceBytes, outputBytes int)
	// JobDone records a job that ended (succeeded, failed or canceled):
	// how long it waited from its submission until a worker last took it,
	// and how long that run took (zero for one canceled while queued).
	JobDone(status JobStatus, waited, ran time.Duration)
}

// Step names a timed part of a request.
type Step string

// The timed steps, in the order a request goes through them.
const (
	StepFetch  Step = "fetch"  // downloading the source
	StepQueue  Step = "queue"  // waiting for one of the engine's slots
	StepEngine Step = "engine" // the Upscaler's work
	StepStore  Step = "store"  // BlobStore.Put of the result
)

// Load is what a Handler is doing at one moment.
type Load struct {
	// InFlight is how many requests are being served, in any step;
	// JobWaiters how many of them are answers held open for their job
	// (Prefer: wait), each holding a place of its account's share.
	InFlight, JobWaiters int
	// Queued is how many admitted requests are fetching their source or
	// waiting for the engine; InEngine how many the Upscaler works on.
	Queued, InEngine int
	// QueueCapacity is Config.Capacity.EngineConcurrency + Config.Capacity.QueueLength: more
	// admitted requests than this are refused as overloaded.
	QueueCapacity int
	// MemoryInUse is how many bytes of Config.Capacity.MemoryBudget requests hold.
	MemoryInUse, MemoryBudget int64
	// JobsQueued is how many jobs wait to run now, and JobsRunning how
	// many run, in every process of the JobQueue (a JobCounter), as
	// counted at most a second ago; both -1 when the queue cannot say.
	JobsQueued, JobsRunning int
	// OldestQueuedJob is how long the job queued longest has waited since
	// its submission, and JobsQueuedPixels the queued jobs' source pixels
	// together (JobCounts): the signals an autoscaler adds workers by.
	// Both are 0 when none is queued or the queue cannot say.
	OldestQueuedJob  time.Duration
	JobsQueuedPixels int64
}

// noMetrics is the Metrics of a Handler configured without any.
type noMetrics struct{}

func (noMetrics) Attach(func() Load)                              {}
func (noMetrics) RequestDone(string, Pool, time.Duration)         {}
func (noMetrics) StepDone(Step, time.Duration)                    {}
func (noMetrics) ImageDone(int, int)                              {}
func (noMetrics) JobDone(JobStatus, time.Duration, time.Duration) {}
