package sched

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/internal/stats"
	"github.com/modrun/modrun/mod"
)

// drawFake is argmaxFake as a DrawRunner: a row with a temperature gives
// int32(U * nVocab) (a stand-in for the device's draw), counted.
type drawFake struct {
	*argmaxFake
	draws bool // DrawsOnDevice
	drawn int
}

func (f *drawFake) DrawsOnDevice() bool { return f.draws }

func (f *drawFake) StepArgmax(rows []Row, bt int) ([]float32, []int32, [][]mod.Route, error) {
	logits, ids, routes, err := f.argmaxFake.StepArgmax(rows, bt)
	if err != nil {
		return nil, nil, nil, err
	}
	a := 0
	for _, r := range rows {
		if !r.Argmax {
			continue
		}
		if r.Temp > 0 {
			ids[a] = int32(r.U * float64(f.lay.NVocab))
			f.drawn++
		}
		a++
	}
	return logits, ids, routes, nil
}

// uSampler is a DeviceSampler whose draw of u is int32(u * nv) on the
// host too, so that a sequence's tokens are those of its numbers wherever
// it draws; it records each number taken and each draw.
type uSampler struct {
	nv     int
	plain  bool
	src    *rand.PCG
	rng    *rand.Rand
	us     []float64
	ids    []int32
	hosts  int
	peeked int
}

func newUSampler(nv int, plain bool, seed uint64) *uSampler {
	src := rand.NewPCG(seed, 3)
	return &uSampler{nv: nv, plain: plain, src: src, rng: rand.New(src)}
}

func (s *uSampler) Plain() (Draw, bool) { return Draw{Temp: 0.9}, s.plain }

func (s *uSampler) Uniform() float64 {
	u := s.rng.Float64()
	s.us = append(s.us, u)
	return u
}

func (s *uSampler) Peek(n int) []float64 {
	s.peeked++
	return stats.Ahead(s.src, n)
}

func (s *uSampler) Drawn(id int32) { s.ids = append(s.ids, id) }

func (s *uSampler) Sample(logits []float32) int32 {
	s.hosts++
	id := int32(s.Uniform() * float64(s.nv))
	s.Drawn(id)
	return id
}

// TestDeviceDraws: on a DrawRunner that draws, a plain DeviceSampler's
// rows are Argmax rows with its temperature and a uniform number taken
// once the step's rows are final: each number is taken once and drawn with
// once (a pool so tight that sequences wait and are preempted, and plan
// runs again), and each token drawn reaches the sampler. A sampler that is
// not plain, a sequence that keeps its logits, and any sequence on a
// runner that does not draw draw on the host; greedy sequences keep the
// device's argmax. The tokens are those of each sequence's numbers either
// way.
func TestDeviceDraws(t *testing.T) {
	for _, onDevice := range []bool{true, false} {
		const bt, ctx, vocab, pages = 4, 96, 50, 120
		f := &drawFake{argmaxFake: &argmaxFake{fakeRunner: newFake(2, 3, ctx, vocab, pages, bt)}, draws: onDevice}
		s, err := New(f, Options{BlockTokens: bt, Pages: pages, BatchTokens: 48})
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(4, 5))
		type seq struct {
			q    *Seq
			s    *uSampler
			keep bool
		}
		var seqs []seq
		for i := range 14 {
			prompt := make([]int32, 1+rng.IntN(40))
			for j := range prompt {
				prompt[j] = int32(rng.IntN(vocab))
			}
			req := Request{Prompt: prompt, MaxTokens: 5 + rng.IntN(30), KeepLogits: i%7 == 3}
			var us *uSampler
			if i%4 != 0 { // every fourth greedy
				us = newUSampler(vocab, i%5 != 2, uint64(i))
				req.Sampler = us
			}
			q, err := s.Add(req)
			require.NoError(t, err)
			seqs = append(seqs, seq{q, us, req.KeepLogits})
			_, err = s.Step()
			require.NoError(t, err)
		}
		for more := true; more; {
			more, err = s.Step()
			require.NoError(t, err)
		}
		st := s.Stats()
		require.Positive(t, st.Waits+st.Preemptions, "the pool made sequences wait")
		t.Logf("on the device %t: %d steps, %d waits, %d preemptions", onDevice, st.Steps, st.Waits, st.Preemptions)
		deviceDraws := 0
		for i, x := range seqs {
			require.NoError(t, x.q.Err, "seq %d", i)
			if x.s == nil {
				continue
			}
			assert.Equal(t, x.q.Tokens(), x.s.ids, "seq %d: every token drawn reached the sampler", i)
			require.Len(t, x.s.us, len(x.s.ids), "seq %d: one number a draw", i)
			for j, u := range x.s.us {
				assert.Equal(t, int32(u*vocab), x.s.ids[j], "seq %d draw %d: drawn with its own number", i, j)
			}
			host := !onDevice || !x.s.plain || x.keep
			if host {
				assert.Equal(t, len(x.s.ids), x.s.hosts, "seq %d: drawn on the host", i)
			} else {
				assert.Zero(t, x.s.hosts, "seq %d: drawn on the runner", i)
				deviceDraws += len(x.s.ids)
			}
			assert.Zero(t, x.s.peeked, "seq %d: a step runner that does not chain peeks nothing", i)
		}
		assert.Equal(t, deviceDraws, f.drawn, "on the device %t: the runner drew the plain sequences' tokens", onDevice)
		if onDevice {
			assert.Positive(t, deviceDraws)
		}
		assert.Positive(t, f.argmaxRows, "greedy rows still the runner's argmax")
		assert.Equal(t, pages, s.Pool().Free(), "every page back")
	}
}
