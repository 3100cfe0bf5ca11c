package server

import (
	"net/http"
	"strconv"
	"sync"

	"github.com/modrun/modrun"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// metrics are /metrics's series, in a registry of the server's own (two
// servers in one process, as in the tests, do not collide).
type metrics struct {
	reg               *prometheus.Registry
	requests          *prometheus.CounterVec
	promptTokens      prometheus.Counter
	cachedTokens      prometheus.Counter
	completionTokens  prometheus.Counter
	queue, active     prometheus.Gauge
	kvTokens, kvLimit prometheus.Gauge
	ttft, interToken  prometheus.Histogram
	routedSel, routed *prometheus.CounterVec
	routedFrac        *prometheus.GaugeVec
	mu                sync.Mutex
	selected, seen    map[int]float64 // per routed layer, for routedFrac
	layers            []int
	contextLen        int
}

func newMetrics() *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), selected: map[int]float64{}, seen: map[int]float64{}}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "modrun_requests_total", Help: "HTTP requests answered, by endpoint and status."}, []string{"endpoint", "status"})
	m.promptTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "modrun_prompt_tokens_total", Help: "Prompt tokens (BOS and chat template included), those the prefix cache served too."})
	m.cachedTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "modrun_prompt_tokens_cached_total", Help: "Prompt tokens the prefix cache served instead of running them (counted in modrun_prompt_tokens_total too)."})
	m.completionTokens = prometheus.NewCounter(prometheus.CounterOpts{Name: "modrun_completion_tokens_total", Help: "Tokens generated."})
	m.queue = prometheus.NewGauge(prometheus.GaugeOpts{Name: "modrun_queue_depth", Help: "Requests waiting for a generation slot (--parallel); beyond --queue they get 503."})
	m.active = prometheus.NewGauge(prometheus.GaugeOpts{Name: "modrun_active_sequences", Help: "Requests holding a generation slot, each one sequence. With --parallel above 1 on the CPU and Vulkan backends they share steps; otherwise they take turns."})
	m.kvTokens = prometheus.NewGauge(prometheus.GaugeOpts{Name: "modrun_kv_cache_tokens", Help: "Position of the last token a request ran: the length of the sequence the model last ran."})
	m.kvLimit = prometheus.NewGauge(prometheus.GaugeOpts{Name: "modrun_kv_cache_capacity_tokens", Help: "Positions one sequence's KV cache holds: the context length."})
	m.ttft = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "modrun_time_to_first_token_seconds", Help: "From a request's arrival to its first generated token (queueing and prompt included).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16)})
	m.interToken = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "modrun_inter_token_seconds", Help: "Between consecutive generated tokens of a request.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)})
	m.routedSel = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "modrun_routed_tokens_total", Help: "Tokens that went through a routed (MoD) layer's block."}, []string{"layer"})
	m.routed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "modrun_routing_decisions_total", Help: "Tokens a routed (MoD) layer decided on."}, []string{"layer"})
	m.routedFrac = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "modrun_routed_fraction", Help: "Fraction of the tokens a routed (MoD) layer decided on that went through its block, since the server started."}, []string{"layer"})
	for _, c := range []prometheus.Collector{m.requests, m.promptTokens, m.cachedTokens, m.completionTokens, m.queue, m.active, m.kvTokens, m.kvLimit,
		m.ttft, m.interToken, m.routedSel, m.routed, m.routedFrac, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		f(c)
	}
	return m
}

func (m *metrics) handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

// ready records the model's shape: the context length and the routed
// layers (their series exist from the start, at 0), and reads its KV page
// pool at each scrape when it has one (modrun serve --parallel above 1 on
// the CPU backend); without one the blocks are 0 and the cache is one
// contiguous sequence, modrun_kv_cache_tokens.
func (m *metrics) ready(model *modrun.Model) {
	info := model.Info()
	m.kvLimit.Set(float64(info.ContextLen))
	m.contextLen = info.ContextLen
	inUse := func() float64 { n, _, _ := model.KVPages(); return float64(n) }
	total := func() float64 { _, n, _ := model.KVPages(); return float64(n) }
	m.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "modrun_kv_blocks_in_use", Help: "KV cache pages holding some sequence's keys and values (their prefix cache included)."}, inUse),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "modrun_kv_blocks_total", Help: "KV cache pages in the pool (0: no pool, one sequence at a time)."}, total),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "modrun_steps_total", Help: "Forward passes of the generation loop (a step of many requests' rows counts once)."},
			func() float64 { n, _ := model.Steps(); return float64(n) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "modrun_chained_steps_total", Help: "Of modrun_steps_total, the decode steps run chained, several in one GPU submission (MODRUN_CHAIN: the Vulkan backend's batched steps)."},
			func() float64 { _, n := model.Steps(); return float64(n) }))
	m.mu.Lock()
	defer m.mu.Unlock()
	m.layers = append([]int(nil), info.RoutedLayers...)
	for _, l := range m.layers {
		label := strconv.Itoa(l)
		m.routedSel.WithLabelValues(label)
		m.routed.WithLabelValues(label)
		m.routedFrac.WithLabelValues(label)
	}
}

func (m *metrics) request(endpoint string, status int) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(status)).Inc()
}

func (m *metrics) tokens(prompt, completion, cached int) {
	m.promptTokens.Add(float64(prompt))
	m.cachedTokens.Add(float64(cached))
	m.completionTokens.Add(float64(completion))
}

// kv records the position of a token delivered: the cache holds it and
// those before, except that a last token drawn at the context's end never
// runs, so the count stops at the capacity.
func (m *metrics) kv(pos int) {
	m.kvTokens.Set(float64(min(pos+1, m.contextLen)))
}

// routes counts one token's routing decisions (one per routed layer).
func (m *metrics) routes(rs []modrun.Route) {
	if len(rs) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, r := range rs {
		label := strconv.Itoa(r.Layer)
		m.seen[r.Layer]++
		m.routed.WithLabelValues(label).Inc()
		if r.Selected {
			m.selected[r.Layer]++
			m.routedSel.WithLabelValues(label).Inc()
		}
		m.routedFrac.WithLabelValues(label).Set(m.selected[r.Layer] / m.seen[r.Layer])
	}
}
