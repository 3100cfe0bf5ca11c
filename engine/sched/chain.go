package sched

import (
	"fmt"
	"slices"

	"github.com/modrun/modrun/mod"
)

// ChainRunner is an ArgmaxRunner that runs several decode steps of the
// same sequences in one go (engine/vulkan's Stepper: one submission, so
// the host's round trip is paid once for them): each row's token at a step
// is the one its argmax (or draw, DrawRunner) gave at the step before.
type ChainRunner interface {
	ArgmaxRunner
	// ChainSteps is the most steps StepChain runs (1: it chains none).
	ChainSteps() int
	// StepChain runs rows, each its sequence's only one and an Argmax
	// row, then up to steps-1 more steps of them, row i at step s at
	// position Pos+s with the id it gave at step s-1, a draw's with the
	// uniform number us[i][s] (us[i] nil for a greedy row; us[i][0] is
	// rows[i].U). It gives the ids of each step it ran ([steps run][rows],
	// at least one step; ArgmaxNonFinite as StepArgmax) and their routing
	// ([steps run][rows][routed layers], nil for a dense model), the
	// routed tables' lengths advanced as Step does. The scheduler has
	// reserved the pages of every step.
	StepChain(rows []Row, steps int, us [][]float64, blockTokens int) (ids [][]int32, routes [][][]mod.Route, err error)
}

// chainLen is how many steps the planned rows run as one chain (1: none):
// the runner chains, no sequence waits to start or for pages, nor is about
// to be added (Arriving: the chain would hold back its start, or take
// pages ahead from it), and every
// running sequence decodes one row with its draw on the runner (Argmax);
// no more than any of them may draw (MaxTokens) or hold (the context),
// and only where the pool has every step's pages without evicting a
// cached prefix (the chain's extra pages are then reserved).
func (s *Scheduler) chainLen(rows []Row) int {
	if s.chain == nil || len(s.queue) > 0 || len(rows) != len(s.active) || (s.Arriving != nil && s.Arriving()) {
		return 1
	}
	n := s.chain.ChainSteps()
	for _, r := range rows {
		q := r.Seq
		// An Argmax row is its sequence's last (a sequence's rows are
		// consecutive, the others without logits): one a sequence, its
		// decode row. A sequence its caller may hold back is not run ahead.
		// Nor is a sequence's first decode step chained: sequences that
		// start together (a burst of requests, bench --parallel) join a
		// step or two apart, and a chain that began as the first one
		// decoded would hold the others' prompts back for its length.
		if !r.Argmax || q.req.Paused != nil || len(q.out) < 2 {
			return 1
		}
		n = min(n, s.lay.ContextLen-r.Pos)
		if left := q.DrawsLeft(); left >= 0 {
			n = min(n, left)
		}
	}
	if n < 2 {
		return 1
	}
	need := 0
	for _, r := range rows {
		q := r.Seq
		need += q.Dense.need(s.pool, q.fed+n)
		for j := range q.Routed {
			need += q.Routed[j].need(s.pool, q.Routed[j].Len+n)
		}
	}
	if need > s.pool.Free() {
		return 1
	}
	for _, r := range rows {
		q := r.Seq
		q.Dense.reserve(s.pool, q.fed+n, s.run.CopyPage)
		for j := range q.Routed {
			q.Routed[j].reserve(s.pool, q.Routed[j].Len+n, s.run.CopyPage)
		}
	}
	return n
}

// stepChain runs rows as a chain of up to n steps (chainLen) and books
// each step as Step would have, step by step: a sequence that ends at a
// step (a stop token, MaxTokens, its callback) takes none of the later
// steps' tokens, which ran on in its own pages past its end. A draw's
// number for step s is taken from its sampler only when step s's token is
// booked (Peek before the chain), so a sampler is left where the
// sequence's own steps leave it.
func (s *Scheduler) stepChain(rows []Row, counts map[*Seq][]int, n int) {
	us := make([][]float64, len(rows))
	for i, r := range rows {
		if r.Temp > 0 {
			us[i] = append([]float64{r.U}, r.Seq.req.Sampler.(DeviceSampler).Peek(n-1)...)
		}
	}
	ids, routes, err := s.chain.StepChain(rows, n, us, s.pool.blockTokens)
	if err == nil {
		err = s.checkChain(rows, n, ids, routes)
	}
	if err != nil { // the backend failed: every sequence of the chain ends with its error
		for _, r := range rows {
			s.finish(r.Seq, StopError, err)
		}
		return
	}
	s.stats.Chains++
	s.stats.ChainedSteps += len(ids)
	base := make([][]int, len(rows)) // each row's routed tables' lengths before the step booked
	for i, r := range rows {
		base[i] = slices.Clone(counts[r.Seq])
	}
	for st := range ids {
		if st > 0 {
			s.countStep(rows)
		}
		for i, r := range rows {
			q := r.Seq
			if q.done {
				continue
			}
			row := Row{Seq: q, Pos: r.Pos + st, Token: q.tokens[r.Pos+st], Logits: true, Argmax: true, Draw: r.Draw}
			var rt [][]mod.Route
			if routes != nil {
				rt = routes[st][i : i+1]
			}
			s.book(q, []Row{row}, base[i], rt)
			if rt != nil {
				for j, x := range rt[0] {
					if x.Selected {
						base[i][j]++
					}
				}
			}
			pk := pick{id: ids[st][i], finite: ids[st][i] != ArgmaxNonFinite, greedy: true, row: -1}
			if r.Temp > 0 {
				ds := q.req.Sampler.(DeviceSampler)
				if st > 0 {
					ds.Uniform() // us[i][st], the number step st drew with
				}
				if pk.finite {
					ds.Drawn(pk.id)
				}
			}
			s.draw(q, nil, pk)
		}
	}
}

// countStep counts a chain's step after its first (Step counted that).
func (s *Scheduler) countStep(rows []Row) {
	s.stats.Steps++
	s.stats.Rows += len(rows)
	if len(rows) > 1 {
		s.stats.SharedSteps++
	}
}

// checkChain says whether a chain gave what its rows asked for: one to n
// steps of an id in the vocabulary (or ArgmaxNonFinite) a row, and each
// step's routing for a routed model.
func (s *Scheduler) checkChain(rows []Row, n int, ids [][]int32, routes [][][]mod.Route) error {
	if len(ids) < 1 || len(ids) > n {
		return fmt.Errorf("sched: the step runner ran %d steps of a chain of at most %d", len(ids), n)
	}
	if (routes == nil) != (s.lay.RoutedLayers == 0) || (routes != nil && len(routes) != len(ids)) {
		return fmt.Errorf("sched: the step runner gave the routing of %d of a chain's %d steps", len(routes), len(ids))
	}
	for st, step := range ids {
		if len(step) != len(rows) || (routes != nil && len(routes[st]) != len(rows)) {
			return fmt.Errorf("sched: the step runner gave %d ids for a chain step of %d rows", len(step), len(rows))
		}
		for _, id := range step {
			if id != ArgmaxNonFinite && (id < 0 || int(id) >= s.lay.NVocab) {
				return fmt.Errorf("sched: the step runner's argmax %d is outside the vocabulary [0, %d)", id, s.lay.NVocab)
			}
		}
	}
	return nil
}
