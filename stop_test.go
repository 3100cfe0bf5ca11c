package modrun

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stopRun feeds the matcher of stops the new tokens of texts (a prompt
// token first) as a generation would, and finishes it with tail.
type stopRun struct {
	got     []Token // what fn had, in order
	errs    []error // the generation callback's answer to each new token
	res     Result
	stopped bool // a token was answered ErrStop
}

func runStops(t *testing.T, stops, texts []string, tail string) stopRun {
	t.Helper()
	var r stopRun
	opts, fn, m, err := withStops(GenerateOptions{Stop: stops}, func(tk Token) error { r.got = append(r.got, tk); return nil })
	require.NoError(t, err)
	require.Nil(t, opts.OnRouted)
	require.NoError(t, fn(Token{ID: 1, Text: "prompt", Pos: 0, Prompt: true}))
	for i, text := range texts {
		err := fn(Token{ID: int32(10 + i), Text: text, Pos: 1 + i})
		r.errs = append(r.errs, err)
		if errors.Is(err, ErrStop) {
			r.stopped = true
			break // the loop ends the generation
		}
		require.NoError(t, err)
	}
	stop := StopMaxTokens
	if r.stopped {
		stop = StopCallback // as the loops report ErrStop
	}
	r.res, err = m.finish(Result{Stop: stop, Tail: tail}, nil)
	require.NoError(t, err)
	return r
}

// text is what fn was shown after the prompt, then the result's Tail.
func (r stopRun) text() string {
	s := ""
	for _, tk := range r.got[1:] {
		s += tk.Text
	}
	return s + r.res.Tail
}

// TestStopMatcher: the text fn sees ends before the first stop string, split
// over tokens or over the bytes of a character, with the token it starts in
// cut; text that only looked like the start of one comes out once it is
// clear it is not (or at the end).
func TestStopMatcher(t *testing.T) {
	cases := []struct {
		name  string
		stops []string
		texts []string
		tail  string
		want  string
		ids   []int32 // the new tokens fn had
		found bool
	}{
		{"split over tokens", []string{"\n\n"}, []string{"Once", " upon\n", "\nThe end"}, "", "Once upon", []int32{10, 11}, true},
		{"two stops, the second found", []string{"END", "</s>"}, []string{"a <", "/", "b> c</", "s> d"}, "", "a </b> c", []int32{10, 11, 12}, true},
		{"starts a token", []string{"END"}, []string{"the ", "EN", "D!"}, "", "the ", []int32{10}, true},
		{"a false start", []string{"END"}, []string{"the EN", "d"}, "", "the ENd", []int32{10, 11}, false},
		{"held to the end", []string{"END"}, []string{"the E"}, "", "the E", []int32{10}, false},
		{"the earliest start wins", []string{"lo", "hello"}, []string{"say hel", "lo"}, "", "say ", []int32{10}, true},
		{"overlapping stops", []string{"bcd", "abx", "cd"}, []string{"xab", "cd"}, "", "xa", []int32{10}, true},
		{"at the very start", []string{"Once"}, []string{"Once", " upon"}, "", "", nil, true},
		{"within the first token", []string{"nc"}, []string{"Once"}, "", "O", []int32{10}, true},
		{"none", nil, []string{"a", "b"}, "", "ab", []int32{10, 11}, false},
		// "€" is three bytes: the tokens of its first two have no text
		// (it comes whole with its last); they belong to the stop string.
		{"over a character's bytes", []string{"€5"}, []string{"a", "", "", "€", "5"}, "", "a", []int32{10}, true},
		{"a character's bytes, no stop", []string{"€5"}, []string{"a", "", "", "€", "6"}, "", "a€6", []int32{10, 11, 12, 13, 14}, false},
		{"in the tail", []string{"ab"}, []string{"x", "a"}, "bc", "x", []int32{10}, true},
		{"completed by the tail", []string{"ab"}, []string{"x", "a"}, "ycz", "xaycz", []int32{10, 11}, false},
		{"the tail cut", []string{"yc"}, []string{"x"}, "zycz", "xz", []int32{10}, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stops := c.stops
			if stops == nil {
				stops = []string{"never"}
			}
			r := runStops(t, stops, c.texts, c.tail)
			assert.Equal(t, c.want, r.text())
			require.NotEmpty(t, r.got)
			assert.True(t, r.got[0].Prompt, "the prompt's token comes first, at once")
			var ids []int32
			for _, tk := range r.got[1:] {
				ids = append(ids, tk.ID)
			}
			assert.Equal(t, c.ids, ids)
			if c.found {
				assert.Equal(t, StopString, r.res.Stop)
			} else {
				assert.Equal(t, StopMaxTokens, r.res.Stop)
			}
		})
	}
}

// TestStopMatcherHolds: a token that may begin a stop string reaches fn no
// sooner than the token that settles it.
func TestStopMatcherHolds(t *testing.T) {
	var got []string
	_, fn, m, err := withStops(GenerateOptions{Stop: []string{"END"}}, func(tk Token) error { got = append(got, tk.Text); return nil })
	require.NoError(t, err)
	require.NoError(t, fn(Token{Text: "a", Pos: 1}))
	assert.Equal(t, []string{"a"}, got, "no stop string can start in it: out at once")
	require.NoError(t, fn(Token{Text: "bE", Pos: 2}))
	require.NoError(t, fn(Token{Text: "N", Pos: 3}))
	assert.Equal(t, []string{"a"}, got, `"bE" and "N" may begin "END"`)
	require.NoError(t, fn(Token{Text: "n", Pos: 4}))
	assert.Equal(t, []string{"a", "bE", "N", "n"}, got)
	require.NoError(t, fn(Token{Text: "E", Pos: 5}))
	res, err := m.finish(Result{Stop: StopEOS}, nil)
	require.NoError(t, err)
	assert.Equal(t, []string{"a", "bE", "N", "n", "E"}, got, "the end lets the held token out")
	assert.Equal(t, StopEOS, res.Stop)
}

// TestStopMatcherRouting: with OnRouted, the routing of a held token goes
// out in its Routes when fn has it, not to OnRouted before; the routing of
// a token fn had goes to OnRouted; that of one dropped after a stop string,
// nowhere.
func TestStopMatcherRouting(t *testing.T) {
	var got []Token
	var routed []int
	opts, fn, m, err := withStops(GenerateOptions{Stop: []string{"END"}, OnRouted: func(pos int, _ []Route) { routed = append(routed, pos) }},
		func(tk Token) error { got = append(got, tk); return nil })
	require.NoError(t, err)
	require.NotNil(t, opts.OnRouted)
	r5 := []Route{{Layer: 1, Score: 0.5, Selected: true}}
	require.NoError(t, fn(Token{Text: "a", Pos: 4}))
	require.NoError(t, fn(Token{Text: " E", Pos: 5}))
	opts.OnRouted(4, []Route{{Layer: 1}})
	opts.OnRouted(5, r5) // 5 is held: " E" may begin "END"
	assert.Equal(t, []int{4}, routed)
	require.NoError(t, fn(Token{Text: "x", Pos: 6}))
	require.Len(t, got, 3)
	assert.Equal(t, r5, got[1].Routes, "the held token comes with its routing")
	opts.OnRouted(6, nil)
	assert.Equal(t, []int{4, 6}, routed, "fn had 6: OnRouted hears of it")

	require.NoError(t, fn(Token{Text: "yE", Pos: 7}))
	require.ErrorIs(t, fn(Token{Text: "ND", Pos: 8}), ErrStop)
	require.Len(t, got, 4)
	assert.Equal(t, "y", got[3].Text, "cut where the stop string starts")
	opts.OnRouted(7, nil)
	opts.OnRouted(8, nil) // fn never had 8
	assert.Equal(t, []int{4, 6, 7}, routed)
	res, err := m.finish(Result{Stop: StopCallback, Tail: "z"}, nil)
	require.NoError(t, err)
	assert.Equal(t, StopString, res.Stop)
	assert.Empty(t, res.Tail, "text after the stop string")
	assert.Len(t, got, 4)
}

// TestStopMatcherCallerEnds: when fn ends the generation itself (ErrStop
// or an error), the held tokens do not go to it after, and the result
// says so as it was.
func TestStopMatcherCallerEnds(t *testing.T) {
	for _, fnErr := range []error{ErrStop, errors.New("boom")} {
		calls := 0
		_, fn, m, err := withStops(GenerateOptions{Stop: []string{"END"}}, func(tk Token) error { calls++; return fnErr })
		require.NoError(t, err)
		assert.Equal(t, fnErr, fn(Token{Text: "a", Pos: 1}))
		res, err := m.finish(Result{Stop: StopCallback}, nil)
		require.NoError(t, err)
		assert.Equal(t, StopCallback, res.Stop)
		assert.Equal(t, 1, calls)
	}
	// A generation that failed keeps its error; what was held still goes
	// out (it was generated: the session holds it).
	var got []string
	_, fn, m, err := withStops(GenerateOptions{Stop: []string{"END"}}, func(tk Token) error { got = append(got, tk.Text); return nil })
	require.NoError(t, err)
	require.NoError(t, fn(Token{Text: "E", Pos: 1}))
	cancelled := errors.New("cancelled")
	_, err = m.finish(Result{}, cancelled)
	assert.Equal(t, cancelled, err)
	assert.Equal(t, []string{"E"}, got)
}

func TestStopEmpty(t *testing.T) {
	_, _, _, err := withStops(GenerateOptions{Stop: []string{"a", ""}}, nil)
	assert.EqualError(t, err, `modrun: Stop "" is empty: give some text`)
	_, _, _, err = withStops(GenerateOptions{Stop: []string{"\xe2\x82"}}, nil)
	assert.EqualError(t, err, `modrun: Stop "\xe2\x82" is not valid UTF-8`)
	opts, fn, m, err := withStops(GenerateOptions{}, nil)
	require.NoError(t, err)
	assert.Nil(t, fn)
	assert.Nil(t, opts.OnRouted)
	res, err := m.finish(Result{Stop: StopEOS, Tail: "x"}, nil)
	require.NoError(t, err)
	assert.Equal(t, Result{Stop: StopEOS, Tail: "x"}, res, "no stop strings: the result as it was")
}

func TestPartialStop(t *testing.T) {
	assert.Equal(t, 0, partialStop("abc", []string{"x"}))
	assert.Equal(t, 2, partialStop("abcde", []string{"dex", "cdx", "e!"}))
	assert.Equal(t, 0, partialStop("", []string{"ab"}))
}

// TestGenerateStop: Session.Generate with Stop, on a model whose sessions
// take turns and on one that shares steps, with and without OnRouted: fn
// has the tokens of the same generation without it up to the one the stop
// string starts in (cut there), each with its routing, and Result.Stop
// says StopString.
func TestGenerateStop(t *testing.T) {
	for _, parallel := range []int{0, 2} {
		m, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, Parallel: parallel})
		require.NoError(t, err)
		defer func() { assert.NoError(t, m.Close()) }()
		for _, early := range []bool{false, true} {
			t.Run(fmt.Sprintf("parallel %d early %v", parallel, early), func(t *testing.T) {
				gen := func(stop []string) ([]Token, map[int][]Route, Result) {
					s := m.NewSession()
					defer s.Close()
					var toks []Token
					routes := map[int][]Route{}
					opts := GenerateOptions{MaxTokens: 30, Stop: stop}
					if early {
						opts.OnRouted = func(pos int, rs []Route) { routes[pos] = rs }
					}
					res, err := s.Generate(context.Background(), "Once upon a time", opts, func(tk Token) error {
						if !tk.Prompt {
							toks = append(toks, tk)
							if tk.Routes != nil {
								routes[tk.Pos] = tk.Routes
							}
						}
						return nil
					})
					require.NoError(t, err)
					return toks, routes, res
				}
				want, wantRoutes, _ := gen(nil)
				require.Len(t, want, 30)
				// A stop string from the second byte of a token into the
				// next one's text: the first token is held, then cut.
				text, k, start := "", -1, 0
				for _, tk := range want {
					text += tk.Text
				}
				for i := 3; i < len(want)-1 && k < 0; i++ {
					if len(want[i].Text) < 2 || len(want[i+1].Text) < 2 {
						continue
					}
					off := len(tokensText(want[:i]))
					if strings.Index(text, text[off+1:off+len(want[i].Text)+2]) == off+1 {
						k, start = i, off
					}
				}
				require.Positive(t, k, "a stop string for the test in %q", text)
				stop := text[start+1 : start+len(want[k].Text)+2]
				got, gotRoutes, res := gen([]string{"zzz", stop})
				assert.Equal(t, StopString, res.Stop)
				assert.Equal(t, text[:start+1], tokensText(got), "stop %q", stop)
				require.Len(t, got, k+1)
				for i, tk := range got {
					assert.Equal(t, want[i].ID, tk.ID, "token %d", i)
					if i < k {
						require.NotNil(t, gotRoutes[tk.Pos], "token %d's routing", i)
						assert.Equal(t, wantRoutes[tk.Pos], gotRoutes[tk.Pos], "token %d's routing", i)
					}
				}
				assert.Equal(t, want[k].Text[:1], got[k].Text, "the token the stop string starts in, cut")
				assert.Equal(t, k+2, res.Tokens, "the tokens generated: through the one that completes the stop string")

				// Without fn the stop string ends the generation all the same.
				s := m.NewSession()
				defer s.Close()
				res, err := s.Generate(context.Background(), "Once upon a time", GenerateOptions{MaxTokens: 30, Stop: []string{stop}}, nil)
				require.NoError(t, err)
				assert.Equal(t, StopString, res.Stop)
				assert.Equal(t, k+2, res.Tokens)
			})
		}
	}
}

func tokensText(toks []Token) string {
	s := ""
	for _, tk := range toks {
		s += tk.Text
	}
	return s
}
