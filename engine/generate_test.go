package engine

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/modrun/modrun/mod"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tracingFake is a fakeRunner that records its Feed calls and traces one
// routed layer whose score is the token's id.
type tracingFake struct {
	fakeRunner
	feeds [][]int32
	last  []int32
}

func (f *tracingFake) Feed(tokens []int32) ([]float32, error) {
	f.feeds = append(f.feeds, append([]int32(nil), tokens...))
	f.last = tokens
	return f.fakeRunner.Feed(tokens)
}

func (f *tracingFake) Routes() [][]mod.Route {
	out := make([][]mod.Route, len(f.last))
	for i, id := range f.last {
		out[i] = []mod.Route{{Layer: 1, Score: float32(id), Selected: id%2 == 1}}
	}
	return out
}

// TestLoopDelivers: a sequence whose first tokens the runner holds (a
// continuation: Held of them delivered before) runs the rest in chunks of
// UBatch; OnToken gets each prompt token once it has run (the held ones
// not again), with its position and routes, then each new token once it
// has run, and the last one (MaxTokens) before it runs, without routes:
// it is Result.Pending.
func TestLoopDelivers(t *testing.T) {
	next := []int32{0, 0, 0, 0, 0, 5, 6, 7, 4, 4, 4, 4}
	f := &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 12}}
	l, err := NewLoop(&Backend{Runner: f, Name: "fake"}, LoopOptions{UBatch: 2, ContextLen: 12, NVocab: 8})
	require.NoError(t, err)
	defer l.Close()
	first, err := l.Generate(context.Background(), []int32{3, 3}, GenerateOptions{EOS: -1, MaxTokens: 1, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.Equal(t, []int32{3, 3}, first.Fed, "the runner holds the sequence so far")
	assert.Equal(t, []int32{0}, first.Pending, "the token drawn, delivered and not run")
	f.feeds = nil
	var got []Token
	seq := []int32{3, 3, 4, 1, 2, 3} // what the runner holds, a token delivered and not run, the prompt
	res, err := l.Generate(context.Background(), seq, GenerateOptions{
		EOS: -1, MaxTokens: 3, Sampler: DefaultSampler(), Held: 3, Routes: true,
		OnToken: func(tk Token) error { got = append(got, tk); return nil },
	})
	require.NoError(t, err)
	assert.Equal(t, [][]int32{{4, 1}, {2, 3}, {5}, {6}}, f.feeds, "the held tokens skipped, chunks of 2, then each new token")
	route := func(id int32) []mod.Route { return []mod.Route{{Layer: 1, Score: float32(id), Selected: id%2 == 1}} }
	assert.Equal(t, []Token{
		{ID: 1, Pos: 3, Prompt: true, Routes: route(1)},
		{ID: 2, Pos: 4, Prompt: true, Routes: route(2)},
		{ID: 3, Pos: 5, Prompt: true, Routes: route(3)},
		{ID: 5, Pos: 6, Routes: route(5)},
		{ID: 6, Pos: 7, Routes: route(6)},
		{ID: 7, Pos: 8}, // drawn, not run
	}, got)
	assert.Equal(t, []int32{5, 6, 7}, res.Tokens)
	assert.Equal(t, []int32{3, 3, 4, 1, 2, 3, 5, 6}, res.Fed)
	assert.Equal(t, []int32{7}, res.Pending)
	assert.Equal(t, StopMaxTokens, res.Stop)
	assert.Equal(t, 3, res.PromptTokens, "the prompt's tokens, not the held ones")
	assert.Zero(t, res.CachedTokens, "the held tokens are not the prompt's")
	assert.Equal(t, 2, res.DecodeSteps)

	// A new sequence that shares the held one's start only starts the
	// runner again and runs the shared part anew (not delivered as run:
	// the prompt's tokens the runner held count as cached).
	f.feeds = nil
	res, err = l.Generate(context.Background(), []int32{3, 3, 6}, GenerateOptions{EOS: -1, MaxTokens: 1, Sampler: DefaultSampler()})
	require.NoError(t, err)
	assert.Equal(t, [][]int32{{3, 3}, {6}}, f.feeds, "rewound to the shared start, then the new token")
	assert.Equal(t, []int32{3, 3, 6}, res.Fed)
	assert.Equal(t, 2, res.CachedTokens)

	_, err = l.Generate(context.Background(), make([]int32, 13), GenerateOptions{EOS: -1, Sampler: DefaultSampler()})
	assert.EqualError(t, err, "sched: the prompt has 13 tokens, more than the context length 12")
}

// failingFake fails the Feed of one token.
type failingFake struct{ fakeRunner }

func (f *failingFake) Feed(tokens []int32) ([]float32, error) {
	if len(tokens) == 1 {
		return nil, errors.New("the runner failed")
	}
	return f.fakeRunner.Feed(tokens)
}

// TestLoopCancelAndFailure: a cancelled context ends Generate with its
// error, the sequence holding the tokens run and delivered; a failed step
// ends it with the step's error, the token that failed to run not
// delivered.
func TestLoopCancelAndFailure(t *testing.T) {
	next := []int32{5, 5, 5, 5, 6, 7, 2, 2, 2, 2}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 10}}
	opts := GenerateOptions{EOS: 2, Sampler: DefaultSampler(),
		OnToken: func(tk Token) error {
			if tk.Pos == 0 {
				cancel()
			}
			return nil
		},
	}
	res, err := Generate(ctx, f, 8, []int32{1, 1, 1, 1}, opts)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, []int32{1}, res.Fed, "the one token delivered")
	assert.Empty(t, res.Tokens)

	opts.OnToken = nil
	res, err = Generate(context.Background(), &failingFake{fakeRunner{next: next, ctx: 10}}, 8, []int32{1, 1, 1, 1}, opts)
	assert.EqualError(t, err, "the runner failed")
	assert.Empty(t, res.Tokens, "the first new token failed to run: not delivered")
	assert.Equal(t, []int32{1, 1, 1, 1}, res.Fed)
}

// fixedRunner gives the same logits after every Feed.
type fixedRunner struct {
	fakeRunner
	logits []float32
}

func (f *fixedRunner) Feed(tokens []int32) ([]float32, error) {
	f.pos += len(tokens)
	return append([]float32(nil), f.logits...), nil
}

// TestLoopRepetitionWindow: the repetition penalty looks back over the
// held tokens and the prompt alike when it draws the first new token.
func TestLoopRepetitionWindow(t *testing.T) {
	so := DefaultSampler()
	so.RepeatPenalty = 4 // token 5's 1 becomes 0.25, under token 6's 0.5
	draw := func(history, prompt []int32) int32 {
		f := &fixedRunner{fakeRunner: fakeRunner{ctx: 8}, logits: []float32{0, 0, 0, 0, 0, 1, 0.5, 0}}
		seq := append(append([]int32(nil), history...), prompt...)
		res, err := Generate(context.Background(), f, 8, seq, GenerateOptions{EOS: -1, MaxTokens: 1, Sampler: so, Held: len(history)})
		require.NoError(t, err)
		return res.Tokens[0]
	}
	assert.Equal(t, int32(5), draw(nil, []int32{1}))
	assert.Equal(t, int32(6), draw([]int32{5}, []int32{1}), "5 is held")
	assert.Equal(t, int32(6), draw(nil, []int32{1, 5}), "5 is in the prompt")
}

// TestLoopLogProbs: with LogProbs each new token carries its
// log-probability under the raw logits and the most likely tokens there;
// prompt tokens carry none.
func TestLoopLogProbs(t *testing.T) {
	logits := []float32{0, 0, 0, 0, 0, 1, 0.5, 0}
	f := &fixedRunner{fakeRunner: fakeRunner{ctx: 8}, logits: logits}
	var got []Token
	so := DefaultSampler()
	so.RepeatPenalty = 4 // the sampler draws 6 after 5 is penalised; log-probs stay the raw logits'
	_, err := Generate(context.Background(), f, 8, []int32{1, 5}, GenerateOptions{
		EOS: -1, MaxTokens: 2, Sampler: so, LogProbs: true, TopLogProbs: 2,
		OnToken: func(tk Token) error { got = append(got, tk); return nil },
	})
	require.NoError(t, err)
	require.Len(t, got, 4)
	assert.Equal(t, []int32{6, 5}, []int32{got[2].ID, got[3].ID}, "the penalty moves the draws")
	assert.Zero(t, got[0].LogProb)
	assert.Nil(t, got[1].Top, "prompt tokens have no log-probabilities")
	for _, tk := range got[2:] {
		wantLP, wantTop := LogProbs(logits, tk.ID, 2)
		assert.Equal(t, wantLP, tk.LogProb)
		assert.Equal(t, wantTop, tk.Top)
		assert.Equal(t, int32(5), tk.Top[0].ID, "the raw logits' most likely token, not the penalised draw")
	}
}

// pausingFake is a tracingFake whose Feed that reaches position at waits
// for proceed, having closed reached.
type pausingFake struct {
	tracingFake
	at               int
	reached, proceed chan struct{}
	paused           bool // the Feed goroutine's own
}

func (f *pausingFake) Feed(tokens []int32) ([]float32, error) {
	l, err := f.tracingFake.Feed(tokens)
	if f.pos == f.at && !f.paused {
		f.paused = true
		close(f.reached)
		<-f.proceed
	}
	return l, err
}

// TestLoopRunnerUsedMidSequence: when the runner runs something else
// between two steps of a sequence (eval mode, Model.LogProbs, under the
// loop's turn), the sequence's next step runs its tokens again first, and
// the generation comes out as if alone.
func TestLoopRunnerUsedMidSequence(t *testing.T) {
	next := []int32{5, 5, 6, 7, 3, 4, 5, 6, 7, 1, 1, 1}
	want, err := Generate(context.Background(), &fakeRunner{next: next, ctx: 12}, 8, []int32{1, 2}, GenerateOptions{EOS: -1, MaxTokens: 6, Sampler: DefaultSampler()})
	require.NoError(t, err)

	f := &pausingFake{tracingFake: tracingFake{fakeRunner: fakeRunner{next: next, ctx: 12}}, at: 4, reached: make(chan struct{}), proceed: make(chan struct{})}
	turn := make(chan struct{}, 1)
	l, err := NewLoop(&Backend{Runner: f, Name: "fake"}, LoopOptions{ContextLen: 12, NVocab: 8, Turn: turn})
	require.NoError(t, err)
	defer l.Close()
	done := make(chan struct{})
	var got Result
	go func() {
		defer close(done)
		got, err = l.Generate(context.Background(), []int32{1, 2}, GenerateOptions{EOS: -1, MaxTokens: 6, Sampler: DefaultSampler()})
	}()
	<-f.reached // the step that runs position 3 holds the turn
	go func() {
		time.Sleep(20 * time.Millisecond) // this goroutine waits for the turn first
		close(f.proceed)
	}()
	turn <- struct{}{} // as Model.LogProbs takes the runner, between two steps
	f.Reset()
	_, ferr := f.tracingFake.Feed([]int32{4, 4, 4})
	require.NoError(t, ferr)
	l.RunnerUsed()
	<-turn
	<-done
	require.NoError(t, err)
	assert.Equal(t, want.Tokens, got.Tokens)
	i := slices.IndexFunc(f.feeds, func(x []int32) bool { return slices.Equal(x, []int32{4, 4, 4}) })
	require.GreaterOrEqual(t, i, 0, "the other use ran")
	require.Greater(t, len(f.feeds), i+1)
	assert.Equal(t, []int32{1, 2, 5, 6}, f.feeds[i+1], "the sequence so far, run again before its next token")
}
