package sched

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/modrun/modrun/mod"
)

// A step's draws: each sequence that gave logits draws its next token,
// greedy ones by argmax (here, or on the runner: ArgmaxRunner), sampled
// ones by their Sampler.

// argmaxFinite is the first index of x's largest value, and whether every
// value is finite, in one pass: the scheduler draws every sequence's token
// on one goroutine between steps, so with 8 sequences two passes over
// 32000 logits each were a step's serial tail.
func argmaxFinite(x []float32) (int32, bool) {
	var id int32
	best := x[0]
	for i, v := range x {
		if v-v != 0 { // NaN - NaN and Inf - Inf are NaN (mod.Finite)
			return 0, false
		}
		if v > best {
			best, id = v, int32(i)
		}
	}
	return id, true
}

// pick is a sequence's draw, made before the step's results are booked:
// id and finite are argmaxFinite's (or the runner's, ArgmaxRunner) for a
// greedy one, the sequence's Sampler's for the others (sampledPicks; id
// only when finite); row is its logits row (-1: an Argmax row).
type pick struct {
	id             int32
	finite, greedy bool
	row            int
	seq            *Seq
}

// greedyPicks draws the greedy sequences' tokens of a step, a pick for
// each row with Logits in row order: an Argmax row's from ids (the
// runner's), the others' from their logits rows, half of those on a
// second goroutine: at 8 sequences a scan of 32000 logits each was 9% of
// a step's CPU, all of it while the step runner's workers waited. A
// sampler draws in draw, on this goroutine, as it may hold state.
func (s *Scheduler) greedyPicks(rows []Row, logits []float32, ids []int32) []pick {
	nv := s.lay.NVocab
	s.picks = s.picks[:0]
	scans := 0 // greedy rows with their logits here
	d, a := 0, 0
	for _, r := range rows {
		switch {
		case !r.Logits:
		case r.Argmax:
			pk := pick{id: ids[a], finite: ids[a] != ArgmaxNonFinite, greedy: true, row: -1}
			if r.Temp > 0 && pk.finite { // a DeviceSampler's draw, made on the runner
				r.Seq.req.Sampler.(DeviceSampler).Drawn(pk.id)
			}
			s.picks = append(s.picks, pk)
			a++
		default:
			greedy := r.Seq.req.Sampler == nil
			if greedy {
				scans++
			}
			s.picks = append(s.picks, pick{greedy: greedy, row: d, seq: r.Seq})
			d++
		}
	}
	scan := func(picks []pick) {
		for i := range picks {
			if pk := &picks[i]; pk.greedy && pk.row >= 0 {
				pk.id, pk.finite = argmaxFinite(logits[pk.row*nv : (pk.row+1)*nv])
			}
		}
	}
	n := len(s.picks)
	if scans < 2 {
		scan(s.picks)
		return s.picks
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		scan(s.picks[n/2:])
	}()
	scan(s.picks[:n/2])
	wg.Wait()
	return s.picks
}

// sampledPicks draws the sampled sequences' tokens of a step (the picks
// that greedyPicks left), on up to workers goroutines side by side: each
// sequence has its own Sampler, and a draw is a pass or two over its
// logits (engine.Sampler: ~0.14 ms at 32,000 tokens, ~0.6 ms at 128,256
// on a 2-core VM), which one after another made a step of 16 sampled
// sequences wait 2-10 ms on this goroutine while the device waited for
// the next step. A row with a logit not finite draws nothing (draw ends
// its sequence).
func (s *Scheduler) sampledPicks(picks []pick, logits []float32, workers int) {
	nv := s.lay.NVocab
	todo := s.sampled[:0]
	for i, pk := range picks {
		if !pk.greedy { // a Sampler's sequence (an Argmax row is greedy)
			todo = append(todo, i)
		}
	}
	s.sampled = todo
	one := func(pk *pick) {
		row := logits[pk.row*nv : (pk.row+1)*nv]
		pk.finite = mod.Finite(row)
		if pk.finite {
			pk.id = pk.seq.req.Sampler.Sample(row)
		}
	}
	workers = min(workers, len(todo))
	if workers < 2 {
		for _, i := range todo {
			one(&picks[i])
		}
		return
	}
	var next atomic.Int64
	work := func() {
		for j := next.Add(1) - 1; j < int64(len(todo)); j = next.Add(1) - 1 {
			one(&picks[todo[j]])
		}
	}
	var wg sync.WaitGroup
	for w := 1; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			work()
		}()
	}
	work()
	wg.Wait()
}

// drawWorkers is how many goroutines draw a step's sampled sequences (a
// variable for the tests).
var drawWorkers = func() int { return runtime.GOMAXPROCS(0) }

// checkArgmax says whether an ArgmaxRunner's step gave what its rows
// asked for: an id in the vocabulary (or ArgmaxNonFinite) for each Argmax
// row, and a logits row for each other row with Logits.
func (s *Scheduler) checkArgmax(rows []Row, logits []float32, ids []int32) error {
	a, d := 0, 0
	for _, r := range rows {
		switch {
		case r.Argmax:
			a++
		case r.Logits:
			d++
		}
	}
	if len(ids) != a || len(logits) != d*s.lay.NVocab {
		return fmt.Errorf("sched: the step runner gave %d argmax ids and %d logits for %d argmax rows and %d rows of %d logits", len(ids), len(logits), a, d, s.lay.NVocab)
	}
	for _, id := range ids {
		if id != ArgmaxNonFinite && (id < 0 || int(id) >= s.lay.NVocab) {
			return fmt.Errorf("sched: the step runner's argmax %d is outside the vocabulary [0, %d)", id, s.lay.NVocab)
		}
	}
	return nil
}

// draw books q's next token, pk (made by greedyPicks and sampledPicks),
// and ends q on a stop.
func (s *Scheduler) draw(q *Seq, logits []float32, pk pick) {
	id, finite := pk.id, pk.finite
	if !finite {
		s.finish(q, StopError, fmt.Errorf("sched: %w", mod.NonFinite(q.fed-1)))
		return
	}
	if q.req.KeepLogits {
		q.Logits = append(q.Logits, slices.Clone(logits))
	}
	if slices.Contains(q.req.Stop, id) {
		s.finish(q, StopEOS, nil)
		return
	}
	q.out = append(q.out, id)
	if q.req.OnToken != nil {
		if err := q.req.OnToken(id); err != nil {
			s.finish(q, StopCallback, err)
			return
		}
	}
	switch {
	case q.fed >= s.lay.ContextLen:
		s.finish(q, StopContextFull, nil)
	case q.req.MaxTokens > 0 && len(q.out) >= q.req.MaxTokens:
		s.finish(q, StopMaxTokens, nil)
	default:
		q.tokens = append(q.tokens, id)
	}
}
