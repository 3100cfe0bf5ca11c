package engine

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/modrun/modrun/engine/sched"
	"github.com/modrun/modrun/internal/stats"
)

// SamplerOptions choose how the next token is drawn from the logits. The
// filters apply in llama.cpp's order: logit bias, the penalties, top-k,
// top-p, min-p, then temperature and the draw.
type SamplerOptions struct {
	Temperature   float32 // 0 = greedy (argmax)
	TopK          int     // keep the k most likely tokens; 0 = all
	TopP          float32 // keep the smallest set with probability >= p; 1 = all
	MinP          float32 // drop tokens less likely than MinP times the most likely; 0 = none
	RepeatPenalty float32 // divide positive (multiply negative) logits of recent tokens; 1 = off
	RepeatLastN   int     // how many recent tokens the penalties look at
	// FrequencyPenalty and PresencePenalty are OpenAI's (llama.cpp's
	// penalties too): a token's logit loses FrequencyPenalty times its
	// count among the last RepeatLastN tokens, and PresencePenalty once
	// when it is there at all; 0 = off.
	FrequencyPenalty float32
	PresencePenalty  float32
	// LogitBias is added to the logits of its tokens before anything else
	// (OpenAI's logit_bias; -Inf bans a token). Nil = none.
	LogitBias map[int32]float32
	Seed      uint64 // the same seed, options and logits give the same tokens
}

// DefaultSampler is greedy decoding.
func DefaultSampler() SamplerOptions {
	return SamplerOptions{TopP: 1, RepeatPenalty: 1, RepeatLastN: 64}
}

// Check reports the first option out of its range, an *OptionError
// naming its field: the one check of the sampling options, which the API,
// the command line and the server all call (each names the option its
// own way: OptionError.Named).
func (o SamplerOptions) Check() error {
	bad := func(option string, v any, problem string) error {
		return &OptionError{Option: option, Value: fmt.Sprint(v), Problem: problem}
	}
	switch {
	case o.Temperature < 0 || math.IsNaN(float64(o.Temperature)):
		return bad("Temperature", o.Temperature, ": must be 0 (greedy) or positive")
	case o.TopK < 0:
		return bad("TopK", o.TopK, ": must be 0 (off) or positive")
	case !(o.TopP > 0 && o.TopP <= 1):
		return bad("TopP", o.TopP, ": must be in (0, 1]")
	case !(o.MinP >= 0 && o.MinP < 1):
		return bad("MinP", o.MinP, ": must be in [0, 1)")
	case !(o.RepeatPenalty > 0):
		return bad("RepeatPenalty", o.RepeatPenalty, ": must be positive (1 = off)")
	case o.RepeatLastN < 0:
		return bad("RepeatLastN", o.RepeatLastN, ": must be 0 or positive")
	case !(o.FrequencyPenalty >= -2 && o.FrequencyPenalty <= 2):
		return bad("FrequencyPenalty", o.FrequencyPenalty, ": must be in [-2, 2] (0 = off)")
	case !(o.PresencePenalty >= -2 && o.PresencePenalty <= 2):
		return bad("PresencePenalty", o.PresencePenalty, ": must be in [-2, 2] (0 = off)")
	}
	for id, b := range o.LogitBias {
		if id < 0 || math.IsNaN(float64(b)) || math.IsInf(float64(b), 1) {
			return &OptionError{Option: "LogitBias", Problem: fmt.Sprintf("[%d] %g: want a token id >= 0 and a number or -Inf", id, b)}
		}
	}
	return nil
}

// Greedy says whether o draws the argmax of the raw logits: temperature 0
// and nothing that moves a logit (top-k, top-p and min-p keep the argmax).
func (o SamplerOptions) Greedy() bool {
	return o.Temperature == 0 && o.RepeatPenalty == 1 && o.FrequencyPenalty == 0 && o.PresencePenalty == 0 && len(o.LogitBias) == 0
}

// penalised says whether any penalty looks at the recent tokens.
func (o SamplerOptions) penalised() bool {
	return o.RepeatPenalty != 1 || o.FrequencyPenalty != 0 || o.PresencePenalty != 0
}

// Sampler draws tokens; it remembers what it drew for the repetition penalty.
type Sampler struct {
	opts    SamplerOptions
	rng     *rand.Rand
	src     *rand.PCG // rng's state (Peek copies it)
	recent  []int32
	cands   []candidate
	weights []float64 // drawAll's, by token
	scratch []float32
	banned  []int32 // never drawn (Ban)
	counts  map[int32]int

	constraint Constraint // nil: every token may come
	mask       []uint64   // the constraint's allowed tokens, a bit each
	err        error      // the constraint refused a drawn token (Err)
}

// A Constraint restricts which tokens may come next and follows the tokens
// drawn: a grammar (grammar.Matcher) that keeps the text inside its
// language. Each sequence has its own.
type Constraint interface {
	Allowed(id int32) bool  // may id come next
	Mask(mask []uint64) int // set bit id for each id that may, clear the others; the count set
	Accept(id int32) error  // move past a drawn token
}

type candidate struct {
	id int32
	l  float32 // logit
	w  float64 // weight: exp of the logit less the best's, over the temperature
}

// NewSampler checks the options and returns a sampler seeded by opts.Seed.
func NewSampler(opts SamplerOptions) (*Sampler, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	src := rand.NewPCG(opts.Seed, 0x6d6f6472756e)
	return &Sampler{opts: opts, rng: rand.New(src), src: src}, nil
}

// Accept records a token (of the prompt, or drawn) for the repetition penalty.
func (s *Sampler) Accept(id int32) {
	if s.opts.RepeatLastN == 0 {
		return
	}
	s.recent = append(s.recent, id)
	if len(s.recent) > s.opts.RepeatLastN {
		s.recent = s.recent[len(s.recent)-s.opts.RepeatLastN:]
	}
}

// Constrain makes Sample draw only the tokens c allows, and tell c each
// token it draws. The filters (top-k, top-p, min-p) and the temperature
// then apply to the allowed tokens alone, as llama.cpp's grammar sampler
// comes first in its chain.
func (s *Sampler) Constrain(c Constraint) { s.constraint = c }

// Err is the constraint's refusal of a drawn token: none is allowed (the
// grammar cannot go on with this vocabulary, or Ban removed all it
// allows). Sample then drew without the constraint.
func (s *Sampler) Err() error { return s.err }

// Ban makes Sample never draw ids: their logits count as -Inf, as
// llama.cpp's ignore_eos biases the end-of-generation tokens.
func (s *Sampler) Ban(ids []int32) { s.banned = slices.Clone(ids) }

// Sample draws the next token from logits (left unchanged) and accepts it.
func (s *Sampler) Sample(logits []float32) int32 {
	l := logits // read only, unless something below writes to it
	if len(s.banned) > 0 || len(s.opts.LogitBias) > 0 || s.opts.penalised() || s.constraint != nil {
		l = append(s.scratch[:0], logits...)
		s.scratch = l
	}
	for _, id := range s.banned {
		if int(id) < len(l) {
			l[id] = float32(math.Inf(-1))
		}
	}
	for id, b := range s.opts.LogitBias {
		if int(id) < len(l) { // a bias beyond this vocabulary moves nothing, as OpenAI's
			l[id] += b
		}
	}
	if s.opts.penalised() {
		s.penalise(l)
	}
	var id int32
	switch {
	case s.constraint != nil:
		id = s.constrained(l)
	case s.opts.Temperature == 0:
		id = stats.Argmax(l)
	default:
		id = s.draw(l)
	}
	s.Accept(id)
	return id
}

// Plain gives the parameters of s's draws when each is a plain draw
// (sched.DeviceSampler): a temperature, with top-k, top-p and min-p or
// not (the kept tokens walked in id order, as the device's draw walks
// them); no penalty, bias, ban or constraint. A step runner may then
// draw on its device with a uniform number from Uniform
// (docs/sampling-cost.md). Temperatures outside [2^-20, 2^20] draw here:
// the device's float32 weights would lose them (1/T overflowing, or every
// weight rounding to 1).
func (s *Sampler) Plain() (sched.Draw, bool) {
	o := s.opts
	t := o.Temperature
	ok := t >= 1.0/(1<<20) && t <= 1<<20 && !o.penalised() &&
		len(o.LogitBias) == 0 && len(s.banned) == 0 && s.constraint == nil
	d := sched.Draw{Temp: t, MinP: o.MinP, TopK: o.TopK}
	if o.TopP < 1 {
		d.TopP = o.TopP
	}
	return d, ok
}

// Uniform takes the uniform number in [0, 1) that s's next draw uses, as
// Sample would: for a runner that draws on its device (Plain).
func (s *Sampler) Uniform() float64 { return s.rng.Float64() }

// Peek is the uniform numbers the next n calls of Uniform will give,
// without taking them: a runner that draws several steps ahead (a chain)
// draws with them, and serves each step only if its number is Peek's.
func (s *Sampler) Peek(n int) []float64 { return stats.Ahead(s.src, n) }

// Drawn accepts id, drawn by a runner with Uniform's number, as Sample
// accepts what it draws.
func (s *Sampler) Drawn(id int32) { s.Accept(id) }

// penalise applies the penalties to l as llama.cpp does: once per distinct
// recent token for the repetition penalty and presence, and per occurrence
// for frequency.
func (s *Sampler) penalise(l []float32) {
	if s.counts == nil {
		s.counts = map[int32]int{}
	}
	clear(s.counts)
	for _, id := range s.recent {
		if int(id) < len(l) {
			s.counts[id]++
		}
	}
	o := s.opts
	for id, n := range s.counts {
		if l[id] > 0 {
			l[id] /= o.RepeatPenalty
		} else {
			l[id] *= o.RepeatPenalty
		}
		l[id] -= float32(n)*o.FrequencyPenalty + o.PresencePenalty
	}
}

// constrained draws from l among the tokens the constraint allows and
// passes the token to it. Where it is exact, a draw first asks about one
// token alone, and needs the mask (a walk over the vocabulary) only when
// that token is refused: greedy, the argmax (when allowed, it is the
// allowed tokens' argmax too); at a temperature with no top-k, top-p or
// min-p, a draw from all tokens (kept when allowed, else drawn again from
// the allowed ones: p(t)/P(allowed) either way, the masked distribution).
// Inside a JSON string, where the mask is widest, the first draw is
// nearly always allowed.
func (s *Sampler) constrained(l []float32) int32 {
	switch {
	case s.opts.Temperature == 0:
		if id := stats.Argmax(l); s.constraint.Allowed(id) {
			s.accept(id)
			return id
		}
	case (s.opts.TopK == 0 || s.opts.TopK >= len(l)) && s.opts.TopP >= 1 && s.opts.MinP == 0:
		if id := s.draw(l); s.constraint.Allowed(id) {
			s.accept(id)
			return id
		}
	}
	if cap(s.mask) < (len(l)+63)/64 {
		s.mask = make([]uint64, (len(l)+63)/64)
	}
	mask := s.mask[:(len(l)+63)/64]
	if s.constraint.Mask(mask) == 0 { // the grammar cannot go on: draw as without it
		s.err = errors.New("engine: the grammar allows no token of the vocabulary here")
		return stats.Argmax(l)
	}
	allowed := int32(-1)
	finite := false
	inf := float32(math.Inf(-1))
	for i := range l {
		if mask[i>>6]&(1<<(i&63)) == 0 {
			l[i] = inf
			continue
		}
		if allowed < 0 {
			allowed = int32(i)
		}
		finite = finite || l[i] > inf
	}
	var id int32
	switch {
	case !finite: // Ban removed every allowed token (IgnoreEOS where only the end may come): the grammar wins
		id = allowed
	case s.opts.Temperature == 0:
		id = stats.Argmax(l)
	default:
		id = s.draw(l)
	}
	s.accept(id)
	return id
}

// accept passes a drawn token to the constraint.
func (s *Sampler) accept(id int32) {
	if err := s.constraint.Accept(id); err != nil && s.err == nil {
		s.err = err
	}
}

// draw samples from l: the filters (keep), then a walk over the kept
// tokens to the one whose running sum of weights passes a uniform draw
// times their total.
func (s *Sampler) draw(l []float32) int32 { return s.drawWith(l, s.rng.Float64) }

// drawWith is draw with u, called once, for the uniform number in [0, 1)
// that picks the token.
func (s *Sampler) drawWith(l []float32, u func() float64) int32 {
	if o := s.opts; o.TopK == 0 && o.TopP >= 1 && o.MinP == 0 {
		return s.drawAll(l, u)
	}
	c, z := s.keep(l)
	if len(c) == 0 {
		return stats.Argmax(l)
	}
	target, cum := u()*z, 0.0
	for _, x := range c {
		if cum += x.w; target < cum {
			return x.id
		}
	}
	return c[len(c)-1].id // rounding left the target at the total
}

// drawAll is drawWith without a filter (a server's default: temperature
// 1, top-p 1): keep's weights and walk, in id order, without gathering
// the candidates first.
func (s *Sampler) drawAll(l []float32, u func() float64) int32 {
	inf := float32(math.Inf(-1))
	mx, last := inf, -1
	for i, v := range l {
		if v > mx {
			mx = v
		}
		if v > inf {
			last = i
		}
	}
	if last < 0 {
		return stats.Argmax(l)
	}
	best, inv := float64(mx), 1/float64(s.opts.Temperature)
	if cap(s.weights) < len(l) {
		s.weights = make([]float64, len(l))
	}
	w := s.weights[:len(l)]
	z := 0.0
	for i, v := range l {
		w[i] = 0
		if v > inf {
			w[i] = expNeg((float64(v) - best) * inv)
			z += w[i]
		}
	}
	target, cum := u()*z, 0.0
	for i, x := range w {
		if cum += x; target < cum && l[i] > inf {
			return int32(i)
		}
	}
	return int32(last) // rounding left the target at the total
}

// expNeg is e^x for x <= 0, within 1e-8 of it (math.Exp's error is far
// smaller; a draw cannot tell them apart), in ~2/3 of math.Exp's time:
// 2^k e^t with k = round(x / ln 2), |t| <= ln 2 / 2, e^t by its Taylor
// series to t^7 (the rest under 6e-9), 2^k added to the exponent bits.
// Below -708, where e^x leaves the normal floats, 0.
func expNeg(x float64) float64 {
	if !(x >= -708) {
		return 0
	}
	k := math.Floor(x*math.Log2E + 0.5)
	t := x - k*math.Ln2
	p := 1 + t*(1+t*(1.0/2+t*(1.0/6+t*(1.0/24+t*(1.0/120+t*(1.0/720+t*(1.0/5040)))))))
	return math.Float64frombits(math.Float64bits(p) + uint64(int64(k))<<52)
}

// keep applies the filters to l: top-k, top-p, min-p, then the
// temperature. It returns the kept tokens with their weights,
// exp((l - best) / T), and the weights' sum: the draw's distribution.
// The candidates are the tokens of l above -Inf (a ban, a bias of -Inf
// and the constraint's mask give -Inf: probability 0) in the order
// largest logit first, the lower id first among equal logits. Top-k keeps
// the first TopK of them; top-p the shortest prefix whose probability at
// temperature 1 reaches TopP, and every token whose logit equals the
// last one's (so that which of equal tokens it keeps does not depend on
// their ids); min-p those at least MinP times as likely as the best. The
// kept tokens come in id order, the order of the walk (which changes
// which token a uniform number picks, not the distribution): the order in
// which a device draws them (docs/sampling-cost.md).
//
// None of this sorts the vocabulary: top-k is a heap of TopK, top-p a
// selection by weight (pickCrossing). A stable sort of the candidates each
// token took 5.5 ms at 32,000 tokens and 26 ms at 128,256 on a 2-core VM
// (bench/results/cpu-sampler-2026-11-28.md), so that at a server's default
// (temperature 1, top-p 1) the sampler, not the GPU, bounded a decode.
func (s *Sampler) keep(l []float32) ([]candidate, float64) {
	o := s.opts
	inf := float32(math.Inf(-1))
	mx := inf
	for _, v := range l {
		if v > mx { // NaN too is left out: the engine refuses such logits before a draw
			mx = v
		}
	}
	if !(mx > inf) {
		return nil, 0
	}
	best := float64(mx)
	var c []candidate
	if k := o.TopK; k > 0 && k < len(l) {
		c = topK(s.cands[:0], l, k)
	} else {
		c = s.cands[:0]
		for i, v := range l {
			if v > inf {
				c = append(c, candidate{id: int32(i), l: v})
			}
		}
	}
	s.cands = c
	if o.TopP < 1 {
		// The probabilities at temperature 1: exp(l - best) / z.
		z := 0.0
		for i := range c {
			c[i].w = expNeg(float64(c[i].l) - best)
			z += c[i].w
		}
		at := pickCrossing(c, float64(o.TopP)*z, true)
		t, n := c[at].l, at+1
		for j := n; j < len(c); j++ { // the crossing's equals past it (c[:at] are better than it)
			if c[j].l == t {
				c[n], c[j] = c[j], c[n]
				n++
			}
		}
		c = c[:n]
	}
	if m := o.MinP; m > 0 {
		floor := math.Log(float64(m)) // exp(l - best) >= MinP
		n := 0
		for _, x := range c {
			if float64(x.l)-best >= floor {
				c[n] = x
				n++
			}
		}
		c = c[:n]
	}
	if o.TopK > 0 && o.TopK < len(l) || o.TopP < 1 { // they reordered the candidates
		slices.SortFunc(c, func(a, b candidate) int { return int(a.id) - int(b.id) })
	}
	z, inv := 0.0, 1/float64(o.Temperature)
	for i := range c {
		c[i].w = expNeg((float64(c[i].l) - best) * inv)
		z += c[i].w
	}
	return c, z
}

// topK appends to c the k best candidates of l (k < len(l); fewer where
// fewer are above -Inf), as a heap whose root is the worst kept: a
// token not better than the root, the usual case once the heap is full,
// costs one comparison (a later token with the root's logit is worse:
// its id is higher).
func topK(c []candidate, l []float32, k int) []candidate {
	inf := float32(math.Inf(-1))
	down := func(i int) {
		for {
			w := i
			if a := 2*i + 1; a < len(c) && better(c[w], c[a]) {
				w = a
			}
			if b := 2*i + 2; b < len(c) && better(c[w], c[b]) {
				w = b
			}
			if w == i {
				return
			}
			c[i], c[w] = c[w], c[i]
			i = w
		}
	}
	for i, v := range l {
		switch {
		case !(v > inf):
		case len(c) < k:
			c = append(c, candidate{id: int32(i), l: v})
			for j := len(c) - 1; j > 0 && better(c[(j-1)/2], c[j]); j = (j - 1) / 2 {
				c[j], c[(j-1)/2] = c[(j-1)/2], c[j]
			}
		case v > c[0].l:
			c[0] = candidate{id: int32(i), l: v}
			down(0)
		}
	}
	return c
}

// pickCrossing reorders c and returns the place of the first candidate,
// in the order of better, at which the running sum of the weights w
// passes target (or reaches it, with reach), with every candidate before
// it in that order at the places before it. A target past the total (by
// rounding) gives the last candidate. A selection by weight: Hoare's
// FIND, each pass's sum of the better side telling which side holds the
// crossing; the first pass splits at a weight of 2^-20 of the best's,
// which at a model's peaked distribution leaves a few hundred tokens in
// front with nearly all the weight. Should the passes not converge (an
// input built against the middle-of-three pivot), what is left is sorted
// and walked.
func pickCrossing(c []candidate, target float64, reach bool) int {
	crossed := func(sum float64) bool { return sum > target || reach && sum == target }
	lo, hi := 0, len(c) // the crossing is in c[lo:hi]; c[:lo] are better, and sum to before
	before := 0.0
	{
		at, sum := 0, 0.0
		for i, x := range c {
			if x.w >= 0x1p-20 {
				c[at], c[i] = x, c[at]
				sum += x.w
				at++
			}
		}
		switch {
		case crossed(sum):
			hi = at
		case at < len(c):
			before, lo = sum, at
		} // else all are past the floor and the target past their total: the passes find the last
	}
	for passes := 0; hi-lo > 1; passes++ {
		if passes == 64 {
			slices.SortFunc(c[lo:hi], compareCandidates)
			for i := lo; i < hi; i++ {
				if before += c[i].w; crossed(before) {
					return i
				}
			}
			return hi - 1
		}
		// The middle of three as the pivot, moved to the end.
		m := lo + (hi-lo)/2
		if better(c[m], c[lo]) {
			c[m], c[lo] = c[lo], c[m]
		}
		if better(c[hi-1], c[lo]) {
			c[hi-1], c[lo] = c[lo], c[hi-1]
		}
		if better(c[hi-1], c[m]) {
			c[hi-1], c[m] = c[m], c[hi-1]
		}
		c[m], c[hi-1] = c[hi-1], c[m]
		x := c[hi-1]
		// c[lo:at] better than x, their sum; then x at at; then the worse.
		at, sum := lo, 0.0
		for i := lo; i < hi-1; i++ {
			if better(c[i], x) {
				c[at], c[i] = c[i], c[at]
				sum += c[at].w
				at++
			}
		}
		c[at], c[hi-1] = c[hi-1], c[at]
		switch {
		case crossed(before + sum):
			hi = at
		case crossed(before + sum + x.w):
			return at
		default:
			before += sum + x.w
			lo = at + 1
		}
	}
	if lo == hi { // past the range's last: target past the total
		return max(hi-1, 0)
	}
	return lo
}

// better orders candidates: the larger logit first, the lower id among
// equal ones.
func better(a, b candidate) bool { return a.l > b.l || a.l == b.l && a.id < b.id }

func compareCandidates(a, b candidate) int {
	switch {
	case better(a, b):
		return -1
	case better(b, a):
		return 1
	}
	return 0
}
