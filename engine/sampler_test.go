package engine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// referenceKeep is the filters' definition written plainly: every
// candidate sorted (stable, largest logit first), then top-k, top-p (with
// the tokens equal to its last) and min-p; the kept tokens in that order,
// with their weights at the temperature, exp((l - best) / T).
func referenceKeep(l []float32, o SamplerOptions) []candidate {
	var c []candidate
	for i, v := range l {
		if !math.IsInf(float64(v), -1) {
			c = append(c, candidate{id: int32(i), l: v})
		}
	}
	if len(c) == 0 {
		return nil
	}
	sort.SliceStable(c, func(a, b int) bool { return c[a].l > c[b].l })
	if o.TopK > 0 && o.TopK < len(c) {
		c = c[:o.TopK]
	}
	best := float64(c[0].l)
	if o.TopP < 1 {
		z := 0.0
		for _, x := range c {
			z += math.Exp(float64(x.l) - best)
		}
		cum := 0.0
		for i, x := range c {
			cum += math.Exp(float64(x.l) - best)
			if cum >= float64(o.TopP)*z {
				for i+1 < len(c) && c[i+1].l == x.l {
					i++
				}
				c = c[:i+1]
				break
			}
		}
	}
	if o.MinP > 0 {
		n := 0
		for n < len(c) && float64(c[n].l)-best >= math.Log(float64(o.MinP)) {
			n++
		}
		c = c[:n]
	}
	for i := range c {
		c[i].w = math.Exp((float64(c[i].l) - best) / float64(o.Temperature))
	}
	return c
}

// samplerLogits are logit vectors of the shapes a draw meets: a model's
// (normal, a few far above the rest), flat ones and ties (the order
// among equal logits is the lower id first), banned tokens (-Inf), and
// sorted and reversed ones (the selection's worst inputs for a naive
// pivot).
func samplerLogits(n int, r *rand.Rand) map[string][]float32 {
	out := map[string][]float32{}
	mk := func(name string, f func(i int) float32) {
		l := make([]float32, n)
		for i := range l {
			l[i] = f(i)
		}
		out[name] = l
	}
	mk("normal", func(int) float32 { return float32(r.NormFloat64() * 3) })
	mk("peaked", func(i int) float32 {
		if i%97 == 5 {
			return 12 + float32(r.NormFloat64())
		}
		return float32(r.NormFloat64() * 2)
	})
	mk("flat", func(int) float32 { return 0.5 })
	mk("ties", func(int) float32 { return float32(r.IntN(4)) })
	mk("banned", func(i int) float32 {
		if i%3 != 0 {
			return float32(math.Inf(-1))
		}
		return float32(r.NormFloat64())
	})
	mk("ascending", func(i int) float32 { return float32(i) / float32(n) * 8 })
	mk("descending", func(i int) float32 { return -float32(i) / float32(n) * 8 })
	return out
}

// TestSamplerMatchesReference holds the sampler's filters (topK,
// pickCrossing) to referenceKeep's full sort: the same tokens kept with
// the same weights, over logit shapes, vocabulary sizes from 1 to 32,000,
// and every filter alone and together; and each draw the token at which
// the running sum over the kept tokens passes u times their total.
func TestSamplerMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	// 1.5 puts the target past the total, as rounding may: the last kept token.
	us := []float64{0, 1e-9, 0.001, 0.1, 0.25, 0.5, 0.75, 0.9, 0.999, 1 - 1e-12, 1.5}
	for i := 0; i < 10; i++ {
		us = append(us, r.Float64())
	}
	type filt struct {
		k       int
		p, minP float32
	}
	filters := []filt{{0, 1, 0}, {1, 1, 0}, {5, 1, 0}, {40, 1, 0}, {0, 0.5, 0}, {0, 0.95, 0}, {0, 1, 0.05}, {0, 1, 0.5}, {40, 0.9, 0.01}, {0, 0.95, 0.05}}
	cases := 0
	for _, n := range []int{1, 2, 7, 100, 1000, 32000} {
		temps := []float32{0.3, 1, 2}
		if n > 1000 {
			temps = []float32{0.7} // the reference's sort is most of the test's time
		}
		for name, l := range samplerLogits(n, r) {
			for _, temp := range temps {
				for _, f := range append(filters, filt{n - 1, 1, 0}) {
					o := DefaultSampler()
					o.Temperature, o.TopK, o.TopP, o.MinP = temp, f.k, f.p, f.minP
					what := fmt.Sprintf("%s logits, n %d, T %g, top-k %d, top-p %g, min-p %g", name, n, temp, f.k, f.p, f.minP)
					s := newSampler(t, o)
					kept, z := s.keep(l)
					got := slices.Clone(kept)
					want := referenceKeep(l, o)
					byID := func(a, b candidate) int { return int(a.id - b.id) }
					slices.SortFunc(got, byID)
					slices.SortFunc(want, byID)
					require.Equal(t, len(want), len(got), "%s: tokens kept", what)
					wz := 0.0
					for i := range want {
						require.Equal(t, want[i].id, got[i].id, "%s: tokens kept", what)
						require.InEpsilon(t, want[i].w, got[i].w, 1e-8, "%s: token %d's weight", what, got[i].id) // expNeg's error
						wz += want[i].w
					}
					require.InEpsilon(t, wz, z, 1e-8, "%s: the weights' sum", what)
					order := slices.Clone(kept) // the walk's order: keep's, by id
					require.True(t, slices.IsSortedFunc(order, byID), "%s: kept in id order", what)
					for _, u := range us {
						id := s.drawWith(l, func() float64 { return u })
						wantID, cum := order[len(order)-1].id, 0.0
						for _, x := range order {
							if cum += x.w; u*z < cum {
								wantID = x.id
								break
							}
						}
						require.Equal(t, wantID, id, "%s, u %g", what, u)
						cases++
					}
				}
			}
		}
	}
	t.Logf("%d draws matched", cases)
}

// TestExpNeg holds the sampler's exp to math.Exp: within 1e-8 over the
// normal floats' range, 1 at 0, and 0 below it (and for NaN).
func TestExpNeg(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	worst := 0.0
	for i := 0; i < 200000; i++ {
		x := -r.Float64() * 708
		if i%2 == 0 {
			x = -r.Float64() * 30 // where a draw's weights are
		}
		worst = max(worst, math.Abs(expNeg(x)-math.Exp(x))/math.Exp(x))
	}
	assert.Less(t, worst, 1e-8)
	assert.Equal(t, 1.0, expNeg(0))
	assert.Equal(t, 0.0, expNeg(-709))
	assert.Equal(t, 0.0, expNeg(math.Inf(-1)))
	assert.Equal(t, 0.0, expNeg(math.NaN()))
}

// TestTopK checks the heap on its own: the k best candidates whatever the
// input's order, ties to the lower id.
func TestTopK(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{2, 3, 10, 257, 5000} {
		for name, l := range samplerLogits(n, r) {
			for _, k := range []int{1, 2, n / 3, n / 2, n - 1} {
				if k < 1 || k >= n {
					continue
				}
				var all []candidate
				for i, v := range l {
					if !math.IsInf(float64(v), -1) {
						all = append(all, candidate{id: int32(i), l: v})
					}
				}
				slices.SortFunc(all, compareCandidates)
				got := topK(nil, l, k)
				slices.SortFunc(got, compareCandidates)
				require.Equal(t, all[:min(k, len(all))], got, "%s, n %d, k %d", name, n, k)
			}
		}
	}
}

// TestPickCrossing checks the selection by weight on its own, against a
// sort and a walk: the crossing's candidate, and every better one before
// it, for weights that the first pass's floor splits, that it does not,
// and ties.
func TestPickCrossing(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 5, 300, 4000} {
		for name, l := range samplerLogits(n, r) {
			var c []candidate
			for i, v := range l {
				if !math.IsInf(float64(v), -1) {
					c = append(c, candidate{id: int32(i), l: v, w: math.Exp(float64(v) / 0.5)})
				}
			}
			sorted := slices.Clone(c)
			slices.SortFunc(sorted, compareCandidates)
			z := 0.0
			for _, x := range sorted {
				z += x.w
			}
			for _, reach := range []bool{false, true} {
				for _, f := range []float64{0, 0.3, 0.9, 0.999999, 2} {
					target := f * z
					want, cum := len(sorted)-1, 0.0
					for i, x := range sorted {
						if cum += x.w; cum > target || reach && cum == target {
							want = i
							break
						}
					}
					got := slices.Clone(c)
					at := pickCrossing(got, target, reach)
					require.Equal(t, sorted[want].id, got[at].id, "%s, n %d, target %g of the total, reach %v", name, n, f, reach)
					front := slices.Clone(got[:at])
					slices.SortFunc(front, compareCandidates)
					require.Equal(t, sorted[:want], front, "%s, n %d, target %g: the better ones first", name, n, f)
				}
			}
		}
	}
}

// BenchmarkSample times one draw at a vocabulary of Llama 2 (32,000) and
// of Llama 3 (128,256): greedy; a server's default (temperature 1, top-p
// 1); temperature with top-p 0.95, with top-k 40 and with min-p 0.05.
// Two synthetic shapes of logits: "flat", normal with sd 3 (the mass
// spread over thousands of tokens: top-p's and the walk's hard case), and
// "peaked", sd 2.5 with 8 tokens some 16 above the rest, which hold most
// of the probability (a model sure of its next few tokens, as in most
// steps).
func BenchmarkSample(b *testing.B) {
	for _, n := range []int{32000, 128256} {
		for _, shape := range []string{"flat", "peaked"} {
			r := rand.New(rand.NewPCG(5, 6))
			l := make([]float32, n)
			for i := range l {
				if shape == "flat" {
					l[i] = float32(r.NormFloat64() * 3)
				} else {
					l[i] = float32(r.NormFloat64() * 2.5)
				}
			}
			if shape == "peaked" {
				for i := 0; i < 8; i++ {
					l[r.IntN(n)] = float32(16 + 2*r.NormFloat64())
				}
			}
			for _, c := range []struct {
				name string
				f    func(*SamplerOptions)
			}{
				{"greedy", func(*SamplerOptions) {}},
				{"temp1", func(o *SamplerOptions) { o.Temperature = 1 }},
				{"top-p0.95", func(o *SamplerOptions) { o.Temperature, o.TopP = 0.8, 0.95 }},
				{"top-k40", func(o *SamplerOptions) { o.Temperature, o.TopK = 0.8, 40 }},
				{"min-p0.05", func(o *SamplerOptions) { o.Temperature, o.MinP = 0.8, 0.05 }},
			} {
				if shape == "peaked" && c.name == "greedy" {
					continue // the same argmax as flat's
				}
				o := DefaultSampler()
				c.f(&o)
				b.Run(fmt.Sprintf("%s/%s/vocab%d", c.name, shape, n), func(b *testing.B) {
					s, err := NewSampler(o)
					if err != nil {
						b.Fatal(err)
					}
					for i := 0; i < b.N; i++ {
						s.Sample(l)
					}
				})
			}
		}
	}
}
