package engine

import (
	"context"
	"errors"
	"testing"

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

// TestContinueDelivers: the loop runs Pending and the prompt in chunks of
// Chunk, after the tokens the runner holds; OnToken gets each prompt token
// once it has run (Pending's not again), with its position and routes,
// then each new token once it has run, and the last one (MaxTokens) before
// it runs, without routes: it is Result.Pending.
func TestContinueDelivers(t *testing.T) {
	next := []int32{0, 0, 0, 0, 0, 5, 6, 7, 4, 4, 4, 4}
	f := &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 12}}
	_, err := f.Feed([]int32{3, 3}) // the sequence so far
	require.NoError(t, err)
	f.feeds = nil
	var got []Token
	res, err := Continue(context.Background(), f, []int32{1, 2, 3}, GenerateOptions{
		EOS: -1, MaxTokens: 3, Sampler: DefaultSampler(), Chunk: 2, Pending: []int32{9}, Routes: true,
		OnToken: func(tk Token) error { got = append(got, tk); return nil },
	})
	require.NoError(t, err)
	assert.Equal(t, [][]int32{{9, 1}, {2, 3}, {5}, {6}}, f.feeds, "Pending first, chunks of 2, then each new token")
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
	assert.Equal(t, []int32{7}, res.Pending)
	assert.Equal(t, StopMaxTokens, res.Stop)
	assert.Equal(t, 3, res.PromptTokens, "the prompt's tokens, not Pending's")
	assert.Equal(t, 2, res.DecodeSteps)

	_, err = Continue(context.Background(), f, make([]int32, 5), GenerateOptions{EOS: -1, Sampler: DefaultSampler()})
	assert.EqualError(t, err, "engine: the prompt has 5 tokens; after the sequence's 8 that is more than the context length 12")
}

// TestContinueHooks: ctx is looked at before each Feed (between the
// prompt's chunks), BeforeFeed runs before each and its error ends the
// loop, and AfterFeed sees each Feed's tokens and error and decides what
// the loop goes on with.
func TestContinueHooks(t *testing.T) {
	next := []int32{5, 5, 5, 5, 6, 7, 2}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 10}}
	var before int
	var after [][]int32
	opts := GenerateOptions{EOS: 2, Sampler: DefaultSampler(), Chunk: 2,
		BeforeFeed: func() error { before++; return nil },
		AfterFeed: func(tokens []int32, err error) error {
			after = append(after, tokens)
			return err
		},
		OnToken: func(tk Token) error {
			if tk.Pos == 0 {
				cancel() // seen before the next chunk runs
			}
			return nil
		},
	}
	_, err := Generate(ctx, f, []int32{1, 1, 1, 1}, opts)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Equal(t, [][]int32{{1, 1}}, f.feeds, "the second chunk never ran")
	assert.Equal(t, 1, before)
	assert.Equal(t, [][]int32{{1, 1}}, after)

	f = &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 10}}
	opts.OnToken, before, after = nil, 0, nil
	res, err := Generate(context.Background(), f, []int32{1, 1, 1, 1}, opts)
	require.NoError(t, err)
	assert.Equal(t, []int32{5, 6, 7}, res.Tokens)
	assert.Equal(t, len(f.feeds), before)
	assert.Equal(t, f.feeds, after)

	refused := errors.New("closed")
	opts.BeforeFeed = func() error {
		if before++; before == 2 {
			return refused
		}
		return nil
	}
	before = 0
	_, err = Generate(context.Background(), &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 10}}, []int32{1, 1, 1, 1}, opts)
	assert.ErrorIs(t, err, refused)

	opts.BeforeFeed = nil
	opts.AfterFeed = func(tokens []int32, err error) error {
		if len(tokens) == 1 {
			return errors.New("the runner failed")
		}
		return err
	}
	res, err = Generate(context.Background(), &tracingFake{fakeRunner: fakeRunner{next: next, ctx: 10}}, []int32{1, 1, 1, 1}, opts)
	assert.EqualError(t, err, "the runner failed")
	assert.Empty(t, res.Tokens, "the first new token failed to run: not delivered")
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

// TestContinueRepetitionWindow: the repetition penalty looks back over
// History and the prompt alike when it draws the first new token.
func TestContinueRepetitionWindow(t *testing.T) {
	so := DefaultSampler()
	so.RepeatPenalty = 4 // token 5's 1 becomes 0.25, under token 6's 0.5
	draw := func(history, prompt []int32) int32 {
		f := &fixedRunner{fakeRunner: fakeRunner{ctx: 8}, logits: []float32{0, 0, 0, 0, 0, 1, 0.5, 0}}
		res, err := Generate(context.Background(), f, prompt, GenerateOptions{EOS: -1, MaxTokens: 1, Sampler: so, History: history})
		require.NoError(t, err)
		return res.Tokens[0]
	}
	assert.Equal(t, int32(5), draw(nil, []int32{1}))
	assert.Equal(t, int32(6), draw([]int32{5}, []int32{1}), "5 is in History")
	assert.Equal(t, int32(6), draw(nil, []int32{1, 5}), "5 is in the prompt")
}

// TestContinueLogProbs: with LogProbs each new token carries its
// log-probability under the raw logits and the most likely tokens there;
// prompt tokens carry none.
func TestContinueLogProbs(t *testing.T) {
	logits := []float32{0, 0, 0, 0, 0, 1, 0.5, 0}
	f := &fixedRunner{fakeRunner: fakeRunner{ctx: 8}, logits: logits}
	var got []Token
	so := DefaultSampler()
	so.RepeatPenalty = 4 // the sampler draws 6 after 5 is penalised; log-probs stay the raw logits'
	_, err := Continue(context.Background(), f, []int32{1, 5}, GenerateOptions{
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
