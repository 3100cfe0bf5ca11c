package engine

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

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
	recent  []int32
	cands   []candidate
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
	p  float32 // logit, then probability
}

// NewSampler checks the options and returns a sampler seeded by opts.Seed.
func NewSampler(opts SamplerOptions) (*Sampler, error) {
	if err := opts.Check(); err != nil {
		return nil, err
	}
	return &Sampler{opts: opts, rng: rand.New(rand.NewPCG(opts.Seed, 0x6d6f6472756e))}, nil
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
	l := append(s.scratch[:0], logits...)
	s.scratch = l
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

func (s *Sampler) draw(l []float32) int32 {
	c := s.cands[:0]
	for i, v := range l {
		if !math.IsInf(float64(v), -1) { // banned or not allowed: probability 0 either way
			c = append(c, candidate{int32(i), v})
		}
	}
	if len(c) == 0 {
		return stats.Argmax(l)
	}
	// Stable, largest first: the order sort.SliceStable gave, without its
	// reflection (at 128,256 tokens that sort was most of a step).
	slices.SortStableFunc(c, func(a, b candidate) int { return cmp.Compare(b.p, a.p) })
	if k := s.opts.TopK; k > 0 && k < len(c) {
		c = c[:k]
	}
	softmaxCands(c, 1)
	if p := s.opts.TopP; p < 1 {
		var cum float32
		for i := range c {
			cum += c[i].p
			if cum >= p {
				c = c[:i+1]
				break
			}
		}
	}
	if m := s.opts.MinP; m > 0 {
		floor := c[0].p * m
		n := 1
		for n < len(c) && c[n].p >= floor {
			n++
		}
		c = c[:n]
	}
	// Temperature on what is left: p_i ∝ p_i^(1/T), i.e. logits divided by T.
	for i := range c {
		c[i].p = float32(math.Log(float64(c[i].p)))
	}
	softmaxCands(c, s.opts.Temperature)
	s.cands = c
	r := s.rng.Float32()
	var cum float32
	for _, cand := range c {
		cum += cand.p
		if r < cum {
			return cand.id
		}
	}
	return c[len(c)-1].id // rounding left r just above the total
}

// softmaxCands turns the candidates' logits (sorted, largest first) divided
// by temp into probabilities.
func softmaxCands(c []candidate, temp float32) {
	mx := c[0].p
	var sum float64
	for i := range c {
		e := math.Exp(float64((c[i].p - mx) / temp))
		c[i].p = float32(e)
		sum += e
	}
	for i := range c {
		c[i].p = float32(float64(c[i].p) / sum)
	}
}
