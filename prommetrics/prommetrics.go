// Package prommetrics exports what an upscale.Handler measures to
// Prometheus, through a Registerer the host chooses: never the global
// registry unless the host passes prometheus.DefaultRegisterer itself.
//
//	metrics, err := prommetrics.New(registry)
//	handler, err := upscale.New(upscale.Config{..., Metrics: metrics})
//
// The metrics, all prefixed upscale_ and in base units:
//
//	requests_total{code,pool}        counter: code "ok", "accepted" (a job submitted), "replayed", a problem code or "caller_gone"; pool charged or "none"
//	request_duration_seconds         histogram of whole requests
//	step_duration_seconds{step}      histogram: fetch, queue, engine, store
//	source_bytes_total               counter: bytes of the sources enlarged
//	output_bytes_total               counter: bytes of the results
//	in_flight_requests               gauge: requests being served, in any step
//	queued_requests                  gauge: admitted, fetching or waiting for the engine
//	engine_requests                  gauge: in the engine
//	admission_capacity_requests      gauge: most requests admitted at once (then 503 overloaded)
//	memory_in_use_bytes              gauge: bytes of the memory budget requests hold
//	memory_budget_bytes              gauge: Config.Capacity.MemoryBudget
//	job_duration_seconds{status,phase} histogram of ended jobs: phase wait (submission to run) or run
//	queued_jobs                      gauge: jobs waiting to run, in every process (-1: the queue cannot count)
//	running_jobs                     gauge: jobs running, in every process (-1: the queue cannot count)
//	oldest_queued_job_age_seconds    gauge: how long the job queued longest has waited
//	queued_job_source_megapixels     gauge: the queued jobs' source megapixels together
//
// No label names a key or an account, so the number of series is fixed.
package prommetrics

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/upscalekit/upscale"
)

// Buckets are the bounds, in seconds, of the duration histograms: 5 ms to
// 5 minutes, past the longest sensible engine timeout (the default is
// 60 s), so that requests cut off at the deadline fall in a bucket below
// +Inf and the deadline shows in the distribution.
var Buckets = []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 45, 60, 90, 120, 180, 300}

// JobBuckets are the bounds, in seconds, of the job histogram: 100 ms to
// a day, a job's longest life (Config.JobTTL).
var JobBuckets = []float64{0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400}

// Metrics is an upscale.Metrics for one Handler.
type Metrics struct {
	requests        *prometheus.CounterVec
	requestDuration prometheus.Histogram
	stepDuration    *prometheus.HistogramVec
	sourceBytes     prometheus.Counter
	outputBytes     prometheus.Counter
	jobDuration     *prometheus.HistogramVec
	load            atomic.Pointer[func() upscale.Load]
}

var _ upscale.Metrics = (*Metrics)(nil)

// New registers the metrics with reg. It fails if reg already has metrics
// of the same names, for instance those of another Handler: give each
// Handler its own registry, or give each its own label by wrapping reg
// with prometheus.WrapRegistererWith.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "upscale_requests_total",
			Help: "Finished upscale requests, by outcome (ok, replayed for an Idempotency-Key's kept answer, a problem code, or caller_gone) and by the pool charged (none when not charged).",
		}, []string{"code", "pool"}),
		requestDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "upscale_request_duration_seconds",
			Help:    "Time from the request's arrival to its answer.",
			Buckets: Buckets,
		}),
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "upscale_step_duration_seconds",
			Help:    "Time spent in each step of a request: fetch (the source's download), queue (waiting for the engine), engine, store (saving the result).",
			Buckets: Buckets,
		}, []string{"step"}),
		sourceBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upscale_source_bytes_total",
			Help: "Bytes of the source images enlarged.",
		}),
		outputBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "upscale_output_bytes_total",
			Help: "Bytes of the enlarged images stored.",
		}),
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "upscale_job_duration_seconds",
			Help:    "Ended jobs of the job form, by how they ended (succeeded, failed, canceled): phase wait is from submission until a worker last took the job, run is that run.",
			Buckets: JobBuckets,
		}, []string{"status", "phase"}),
	}
	gauge := func(name, help string, read func(upscale.Load) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 {
			if load := m.load.Load(); load != nil {
				return read((*load)())
			}
			return 0
		})
	}
	collectors := []prometheus.Collector{
		m.requests, m.requestDuration, m.stepDuration, m.sourceBytes, m.outputBytes, m.jobDuration,
		gauge("upscale_in_flight_requests", "Requests being served, in any step.",
			func(l upscale.Load) float64 { return float64(l.InFlight) }),
		gauge("upscale_job_waiters", "Answers held open for their job (Prefer: wait), each holding a place of its account's share.",
			func(l upscale.Load) float64 { return float64(l.JobWaiters) }),
		gauge("upscale_queued_requests", "Admitted requests fetching their source or waiting for the engine.",
			func(l upscale.Load) float64 { return float64(l.Queued) }),
		gauge("upscale_engine_requests", "Requests the engine is working on.",
			func(l upscale.Load) float64 { return float64(l.InEngine) }),
		gauge("upscale_admission_capacity_requests", "Most requests admitted at once; more are refused with 503 overloaded.",
			func(l upscale.Load) float64 { return float64(l.QueueCapacity) }),
		gauge("upscale_memory_in_use_bytes", "Bytes of the memory budget that requests hold: sources and the engine's estimated working memory.",
			func(l upscale.Load) float64 { return float64(l.MemoryInUse) }),
		gauge("upscale_memory_budget_bytes", "The memory budget (Config.Capacity.MemoryBudget).",
			func(l upscale.Load) float64 { return float64(l.MemoryBudget) }),
		gauge("upscale_queued_jobs", "Jobs waiting to run now, in every process of the queue; -1 when the queue cannot count them.",
			func(l upscale.Load) float64 { return float64(l.JobsQueued) }),
		gauge("upscale_running_jobs", "Jobs running, in every process of the queue; -1 when the queue cannot count them.",
			func(l upscale.Load) float64 { return float64(l.JobsRunning) }),
		gauge("upscale_oldest_queued_job_age_seconds", "How long the job queued longest has waited since its submission; 0 with none queued. A signal to add workers by.",
			func(l upscale.Load) float64 { return l.OldestQueuedJob.Seconds() }),
		gauge("upscale_queued_job_source_megapixels", "The queued jobs' source megapixels together: the work waiting, a signal to add workers by.",
			func(l upscale.Load) float64 { return float64(l.JobsQueuedPixels) / 1e6 }),
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Every step's series exists from the start, so that rates are defined
	// before the first request of each kind.
	for _, step := range []upscale.Step{upscale.StepFetch, upscale.StepQueue, upscale.StepEngine, upscale.StepStore} {
		m.stepDuration.WithLabelValues(string(step))
	}
	return m, nil
}

// Attach implements upscale.Metrics; upscale.New calls it.
func (m *Metrics) Attach(load func() upscale.Load) { m.load.Store(&load) }

// RequestDone implements upscale.Metrics.
func (m *Metrics) RequestDone(code string, pool upscale.Pool, took time.Duration) {
	if pool == "" {
		pool = "none"
	}
	m.requests.WithLabelValues(code, string(pool)).Inc()
	m.requestDuration.Observe(took.Seconds())
}

// StepDone implements upscale.Metrics.
func (m *Metrics) StepDone(step upscale.Step, took time.Duration) {
	m.stepDuration.WithLabelValues(string(step)).Observe(took.Seconds())
}

// ImageDone implements upscale.Metrics.
func (m *Metrics) ImageDone(sourceBytes, outputBytes int) {
	m.sourceBytes.Add(float64(sourceBytes))
	m.outputBytes.Add(float64(outputBytes))
}

// JobDone implements upscale.Metrics.
func (m *Metrics) JobDone(status upscale.JobStatus, waited, ran time.Duration) {
	m.jobDuration.WithLabelValues(string(status), "wait").Observe(waited.Seconds())
	if ran > 0 {
		m.jobDuration.WithLabelValues(string(status), "run").Observe(ran.Seconds())
	}
}
