package modrun_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The API's contract under misuse (the package doc): every case runs on the
// CPU and on Vulkan, and every call that could deadlock runs under a
// deadline that turns a hang into a failure.

// deadline bounds one case; lavapipe under -race is slow, a deadlock is
// forever.
const deadline = 60 * time.Second

// within runs fn and fails the test if it has not returned by the deadline
// (the stuck goroutine is left behind: the test has failed).
func within(t *testing.T, what string, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	select {
	case <-done:
	case <-time.After(deadline):
		t.Fatalf("%s did not return within %s: a deadlock", what, deadline)
	}
}

// eachBackend runs fn on the CPU and on Vulkan (skipped without a device),
// with a model opened by opener (closed at the end if fn did not).
// Vulkan runs prompts in batches of 4, so a short prompt can be cancelled
// half fed as a long one is on the CPU.
func eachBackend(t *testing.T, fn func(t *testing.T, open func() *modrun.Model)) {
	for _, name := range []string{modrun.BackendReference, modrun.BackendCPU, "cpu-parallel", modrun.BackendVulkan, "vulkan-parallel"} {
		backend, parallel := strings.CutSuffix(name, "-parallel")
		t.Run(name, func(t *testing.T) {
			// Batches of 4 prompt tokens, so that a cancel can cut a prompt
			// (the reference feeds 32 at a time whatever UBatch says); with
			// -parallel, sessions share steps of up to 4 rows (batch.go).
			opts := modrun.Options{Backend: backend, UBatch: 4}
			if parallel {
				opts.Parallel = 4
			}
			if backend == modrun.BackendVulkan {
				if err := vk.Load(); err != nil {
					t.Skipf("no Vulkan loader: %v", err)
				}
			}
			fn(t, func() *modrun.Model {
				m, err := modrun.Open(shipped, opts)
				if backend == modrun.BackendVulkan && err != nil {
					t.Skipf("no Vulkan device: %v", err)
				}
				require.NoError(t, err)
				t.Cleanup(func() { _ = m.Close() })
				return m
			})
		})
	}
}

// story is a prompt longer than one batch: 4 tokens here, the
// reference's 32.
const story = "Once upon a time there was a little girl named Lily who loved to play outside in the big green park with her friends and her red ball every sunny day"

// ids generates n tokens of prompt on a fresh session and returns every
// token id, the prompt's included.
func ids(t *testing.T, m *modrun.Model, prompt string, n int) []int32 {
	t.Helper()
	toks, _ := run(t, m, prompt, n)
	out := make([]int32, len(toks))
	for i, tk := range toks {
		out[i] = tk.ID
	}
	return out
}

// TestCallbackReentry: from inside a token callback, each method either
// works or returns ErrBusy at once; none waits on the call running the
// callback.
func TestCallbackReentry(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		want := ids(t, m, "Once upon", 8)
		_, wantRes := run(t, m, "Once upon", 8)
		other := ids(t, m, "Lily", 4)
		a, b, idle := m.NewSession(), m.NewSession(), m.NewSession()
		_, err := idle.Generate(context.Background(), "Tom", modrun.GenerateOptions{MaxTokens: 2}, nil)
		require.NoError(t, err)

		var got []int32
		var bGot []int32
		nested := false
		var res modrun.Result
		within(t, "calls from a callback", func() {
			res, err = a.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 8}, func(tk modrun.Token) error {
				got = append(got, tk.ID)
				if tk.Prompt || nested {
					return nil
				}
				nested = true
				// The session's own methods: ErrBusy.
				_, err := a.Generate(context.Background(), "x", modrun.GenerateOptions{}, nil)
				assert.ErrorIs(t, err, modrun.ErrBusy)
				_, err = a.Tokens()
				assert.ErrorIs(t, err, modrun.ErrBusy)
				assert.ErrorIs(t, a.Reset(), modrun.ErrBusy)
				assert.ErrorIs(t, a.Close(), modrun.ErrBusy)
				// Another session's: they work, the runner being idle.
				_, err = b.Generate(context.Background(), "Lily", modrun.GenerateOptions{MaxTokens: 4}, func(tk modrun.Token) error {
					bGot = append(bGot, tk.ID)
					return nil
				})
				assert.NoError(t, err)
				seq, err := idle.Tokens()
				assert.NoError(t, err)
				assert.NotEmpty(t, seq)
				assert.NoError(t, idle.Reset())
				assert.NoError(t, idle.Close())
				assert.NoError(t, m.NewSession().Close())
				_, err = m.Tokenize("Once", true)
				assert.NoError(t, err)
				m.Profile()
				return nil
			})
		})
		require.NoError(t, err)
		require.True(t, nested, "the callback ran its nested calls")
		assert.Equal(t, want, got, "the generation went on as if alone")
		assert.Equal(t, wantRes.Layers, res.Layers, "the runner holds the session's sequence alone")
		assert.Equal(t, other, bGot, "the nested generation ran as if alone")
		_, err = idle.Tokens()
		assert.ErrorIs(t, err, modrun.ErrClosed)
	})
}

// TestCallDuringCallback: a call another goroutine starts while a token
// callback runs takes the idle runner in the callback's place (the API
// cannot tell it from the callback's own calls without goroutine ids):
// it finishes while the callback still waits, both generations come out
// as if alone, and a callback waiting for such a call does not deadlock.
func TestCallDuringCallback(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		want := ids(t, m, "Once upon", 6)
		other := ids(t, m, "Lily", 4)
		var got, bGot []int32
		var err error
		within(t, "a callback waiting for another goroutine's call", func() {
			_, err = m.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 6}, func(tk modrun.Token) error {
				got = append(got, tk.ID)
				if tk.Prompt || len(got) != len(want)-5 {
					return nil
				}
				done := make(chan error)
				go func() {
					_, err := m.NewSession().Generate(context.Background(), "Lily", modrun.GenerateOptions{MaxTokens: 4}, func(tk modrun.Token) error {
						bGot = append(bGot, tk.ID)
						return nil
					})
					done <- err
				}()
				assert.NoError(t, <-done)
				return nil
			})
		})
		require.NoError(t, err)
		assert.Equal(t, want, got, "the generation went on as if alone")
		assert.Equal(t, other, bGot, "the other goroutine's generation ran as if alone")
	})
}

// TestEvalDuringCallback: LogProbs from a token callback takes the
// runner between two steps of the generation (the loop holds the turn per
// step, never across a callback, and nothing is lent), scores as it does
// alone, and the generation goes on as if alone: on a model whose
// sessions take turns on the runner, the running sequence is run again
// before its next step.
func TestEvalDuringCallback(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		want := ids(t, m, "Once upon", 8)
		other := ids(t, m, "Lily", 4)
		wantLP, err := m.LogProbs(context.Background(), other, 2)
		require.NoError(t, err)
		var got []int32
		var lp []modrun.ScoredToken
		within(t, "LogProbs from a callback", func() {
			_, err = m.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 8}, func(tk modrun.Token) error {
				got = append(got, tk.ID)
				if !tk.Prompt && lp == nil {
					var err error
					lp, err = m.LogProbs(context.Background(), other, 2)
					assert.NoError(t, err)
				}
				return nil
			})
		})
		require.NoError(t, err)
		assert.Equal(t, want, got, "the generation went on as if alone")
		assert.Equal(t, wantLP, lp, "scored as alone")
	})
}

// TestCloseModelFromCallback: Model.Close from a callback closes at once,
// and the Generate running the callback returns ErrClosed.
func TestCloseModelFromCallback(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		before := vk.LiveObjects()
		m := open()
		s := m.NewSession()
		var err error
		within(t, "Model.Close from a callback", func() {
			_, err = s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 8}, func(tk modrun.Token) error {
				if !tk.Prompt {
					assert.NoError(t, m.Close())
				}
				return nil
			})
		})
		assert.ErrorIs(t, err, modrun.ErrClosed)
		assert.Equal(t, before, vk.LiveObjects(), "the GPU memory is freed")
	})
}

// TestClosedIsErrClosed: every method of a closed session, and of the
// sessions of a closed model, returns ErrClosed.
func TestClosedIsErrClosed(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		closed, later := m.NewSession(), m.NewSession()
		_, err := later.Generate(context.Background(), "Once", modrun.GenerateOptions{MaxTokens: 2}, nil)
		require.NoError(t, err)
		require.NoError(t, closed.Close())
		check := func(what string, s *modrun.Session) {
			_, err := s.Generate(context.Background(), "Once", modrun.GenerateOptions{}, nil)
			assert.ErrorIs(t, err, modrun.ErrClosed, what+": Generate")
			_, err = s.Tokens()
			assert.ErrorIs(t, err, modrun.ErrClosed, what+": Tokens")
			assert.ErrorIs(t, s.Reset(), modrun.ErrClosed, what+": Reset")
			assert.ErrorIs(t, s.Close(), modrun.ErrClosed, what+": Close")
		}
		check("closed session", closed)

		require.NoError(t, m.Close())
		assert.ErrorIs(t, m.Close(), modrun.ErrClosed, "a second Model.Close")
		_, err = m.Tokenize("Once", true)
		assert.ErrorIs(t, err, modrun.ErrClosed)
		assert.Nil(t, m.Profile())
		check("session of a closed model", later)
		check("new session of a closed model", m.NewSession())
	})
}

// TestIdleSessionNeverWaits: while one session generates (held in its
// callback), another idle session's Tokens, Reset and Close return at once.
func TestIdleSessionNeverWaits(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		idle := m.NewSession()
		_, err := idle.Generate(context.Background(), "Tom", modrun.GenerateOptions{MaxTokens: 2}, nil)
		require.NoError(t, err)
		inside, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			once := sync.Once{}
			_, err := m.NewSession().Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 4}, func(modrun.Token) error {
				once.Do(func() { close(inside); <-release })
				return nil
			})
			done <- err
		}()
		<-inside
		within(t, "an idle session's methods", func() {
			_, err := idle.Tokens()
			assert.NoError(t, err)
			assert.NoError(t, idle.Reset())
			assert.NoError(t, idle.Close())
		})
		close(release)
		require.NoError(t, <-done)
	})
}

// TestCancelInPrompt: a generation cancelled in its prompt keeps what was
// run; Generate with no more prompt continues from there, and Reset starts
// afresh.
func TestCancelInPrompt(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		prompt, err := m.Tokenize(story, true)
		require.NoError(t, err)
		require.Greater(t, len(prompt), 33, "a prompt longer than the reference's 32-token batch")
		want := ids(t, m, story, 4)
		_, wantRes := run(t, m, story, 4)
		continued := func(s *modrun.Session) []int32 {
			var more []int32
			within(t, "Generate after a cancel", func() {
				_, err = s.Generate(context.Background(), "", modrun.GenerateOptions{MaxTokens: 3}, func(tk modrun.Token) error {
					assert.False(t, tk.Prompt)
					more = append(more, tk.ID)
					return nil
				})
			})
			require.NoError(t, err)
			return more
		}
		cancelAt := func(s *modrun.Session, pos int) []int32 {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err := s.Generate(ctx, story, modrun.GenerateOptions{MaxTokens: 4}, func(tk modrun.Token) error {
				if tk.Pos == pos {
					cancel()
				}
				return nil
			})
			require.ErrorIs(t, err, context.Canceled)
			kept, err := s.Tokens()
			require.NoError(t, err)
			return kept
		}

		// Cancelled at the prompt's last token: all of it was run, no token
		// drawn. Continuing draws the tokens an uncancelled call would.
		s := m.NewSession()
		assert.Equal(t, prompt, cancelAt(s, len(prompt)-1))
		assert.Equal(t, want[len(prompt):len(prompt)+3], continued(s))

		afresh := func() {
			require.NoError(t, s.Reset())
			var again []int32
			res, err := s.Generate(context.Background(), story, modrun.GenerateOptions{MaxTokens: 4}, func(tk modrun.Token) error {
				again = append(again, tk.ID)
				return nil
			})
			require.NoError(t, err)
			assert.Equal(t, want, again, "after Reset the session starts afresh")
			assert.Equal(t, wantRes.Layers, res.Layers, "the runner saw the new sequence only")
			require.NoError(t, s.Reset())
		}
		afresh()

		// Cancelled at the first token: the first batch was run, the rest of
		// the prompt not. The session continues after what it kept.
		kept := cancelAt(s, 0)
		require.NotEmpty(t, kept)
		require.Less(t, len(kept), len(prompt), "the prompt was cut")
		assert.Equal(t, prompt[:len(kept)], kept)
		more := continued(s)
		seq, err := s.Tokens()
		require.NoError(t, err)
		assert.Equal(t, append(kept, more...), seq)

		afresh()
	})
}

// soakFor is how long TestSoak's sessions run.
const soakFor = 2 * time.Second

// TestSoak: 8 sessions of one model on 8 goroutines generate, cancel, reset
// and close at random for soakFor. Each uncancelled generation from a fresh
// sequence gives the tokens it gives alone; at the end, after Model.Close,
// no goroutine is left and the GPU memory is back where it was before Open.
func TestSoak(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		// The CPU backend's worker pool starts on first use and lasts as
		// long as the process: a model opened and closed first starts it,
		// so the count below holds whichever test ran first.
		require.NoError(t, open().Close())
		goroutines := runtime.NumGoroutine()
		before := vk.LiveObjects()
		m := open()
		want := ids(t, m, "Once upon", 8)
		end := time.Now().Add(soakFor)
		var wg sync.WaitGroup
		var mu sync.Mutex
		ops := map[string]int{}
		for i := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(i), 23))
				s, fresh := m.NewSession(), true
				count := func(op string, err error) {
					mu.Lock()
					defer mu.Unlock()
					ops[op]++
					if err != nil && !errors.Is(err, context.Canceled) {
						t.Errorf("session %d: %s: %v", i, op, err)
					}
				}
				for time.Now().Before(end) {
					switch rng.IntN(6) {
					case 0:
						count("reset", s.Reset())
						fresh = true
					case 1:
						count("close", s.Close())
						s, fresh = m.NewSession(), true
					case 2:
						seq, err := s.Tokens()
						count("tokens", err)
						if len(seq) > 64 {
							count("reset", s.Reset())
							fresh = true
						}
					default:
						cancelAt := -1
						if rng.IntN(2) == 0 {
							cancelAt = rng.IntN(12)
						}
						ctx, cancel := context.WithCancel(context.Background())
						prompt := " and"
						if fresh {
							prompt = "Once upon"
						}
						var got []int32
						n := 0
						_, err := s.Generate(ctx, prompt, modrun.GenerateOptions{MaxTokens: 1 + rng.IntN(8)}, func(tk modrun.Token) error {
							got = append(got, tk.ID)
							if n++; n == cancelAt {
								cancel()
							}
							if n == 2 && cancelAt == 0 { // a nested call now and then
								m.Profile()
								return m.NewSession().Close()
							}
							return nil
						})
						cancel()
						op := "generate"
						if cancelAt >= 0 {
							op = "generate, cancelled"
						}
						count(op, err)
						if fresh && cancelAt < 0 && err == nil {
							assert.Equal(t, want[:len(got)], got, "session %d, alone after a reset", i)
						}
						fresh = false
					}
				}
			}()
		}
		within(t, "the soak", wg.Wait)
		t.Logf("operations: %v", ops)
		require.NoError(t, m.Close())
		// Polled here: assert.Eventually's own goroutines would count.
		for wait := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > goroutines && time.Now().Before(wait); {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > goroutines {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines left, %d before Open:\n%s", n, goroutines, buf[:runtime.Stack(buf, true)])
		}
		assert.Equal(t, before, vk.LiveObjects(), "GPU objects")
	})
}

// TestDeviceLost: a GPU fault in the middle of a generation (a lost
// device, injected: no real device loses itself on demand) ends that
// Generate with an error naming it; later calls fail at once, and the
// model closes cleanly, freeing every GPU object.
func TestDeviceLost(t *testing.T) {
	if err := vk.Load(); err != nil {
		t.Skipf("no Vulkan loader: %v", err)
	}
	before := vk.LiveObjects()
	m, err := modrun.Open(shipped, modrun.Options{Backend: modrun.BackendVulkan})
	if err != nil {
		t.Skipf("no Vulkan device: %v", err)
	}
	s := m.NewSession()
	n := 0
	within(t, "a generation on a lost device", func() {
		_, err = s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 8}, func(tk modrun.Token) error {
			if n++; n == 5 {
				vk.InjectFault(vk.ErrorDeviceLost)
			}
			return nil
		})
	})
	var vkErr *vk.Error
	require.ErrorAs(t, err, &vkErr)
	assert.Equal(t, vk.ErrorDeviceLost, vkErr.Result)
	assert.ErrorContains(t, err, "the device is unusable now")
	within(t, "calls after the fault", func() {
		_, err = m.NewSession().Generate(context.Background(), "Lily", modrun.GenerateOptions{MaxTokens: 2}, nil)
		assert.ErrorIs(t, err, vkErr)
		_, err = s.Generate(context.Background(), "", modrun.GenerateOptions{MaxTokens: 2}, nil)
		assert.ErrorIs(t, err, vkErr)
		assert.NoError(t, s.Close())
		assert.NoError(t, m.Close())
	})
	assert.Equal(t, before, vk.LiveObjects())
}

// TestMisuse: a nil context is an error, and a callback that panics
// (recovered by the caller) leaves the model and the session usable.
func TestMisuse(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *modrun.Model) {
		m := open()
		want := ids(t, m, "Once upon", 6)
		s := m.NewSession()
		//lint:ignore SA1012 a nil context is the misuse under test
		_, err := s.Generate(nil, "Once", modrun.GenerateOptions{}, nil)
		assert.ErrorContains(t, err, "nil context")

		within(t, "a panicking callback", func() {
			defer func() { assert.Equal(t, "boom", recover()) }()
			_, _ = s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 6}, func(tk modrun.Token) error {
				if !tk.Prompt {
					panic("boom")
				}
				return nil
			})
		})
		within(t, "generating after the panic", func() { // assert only: not the test's goroutine
			assert.NoError(t, s.Reset())
			var got []int32
			_, err := s.Generate(context.Background(), "Once upon", modrun.GenerateOptions{MaxTokens: 6}, func(tk modrun.Token) error {
				got = append(got, tk.ID)
				return nil
			})
			assert.NoError(t, err)
			assert.Equal(t, want, got)
		})
	})
}
