package modrun

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOnRouted: with GenerateOptions.OnRouted, each new token reaches fn
// before it has run (its Routes nil, and its routing through OnRouted
// only after fn had it: the order proves the early delivery), on a model
// whose sessions take turns and on one that shares steps. The tokens, the
// routing and the session's next turn are those of the same conversation
// without it. Each conversation has a model of its own, so that both run
// their tokens in the same steps: a sequence that takes the runner over
// from another runs the tokens they share again in other steps (one
// batch), whose rounding moves the router scores in their last bits.
func TestOnRouted(t *testing.T) {
	for _, parallel := range []int{0, 2} {
		t.Run(fmt.Sprintf("parallel %d", parallel), func(t *testing.T) {
			model := func() *Model {
				m, err := Open("models/tinystories-mod.gguf", Options{Backend: BackendCPU, Parallel: parallel})
				require.NoError(t, err)
				t.Cleanup(func() { assert.NoError(t, m.Close()) })
				return m
			}
			type event struct {
				routed bool
				pos    int
				id     int32
				routes []Route
			}
			turn := func(s *Session, prompt string, early bool) (out []event) {
				opts := GenerateOptions{MaxTokens: 6}
				if early {
					opts.OnRouted = func(pos int, routes []Route) { out = append(out, event{routed: true, pos: pos, routes: routes}) }
				}
				_, err := s.Generate(context.Background(), prompt, opts, func(tk Token) error {
					if !tk.Prompt {
						out = append(out, event{pos: tk.Pos, id: tk.ID, routes: tk.Routes})
					}
					return nil
				})
				require.NoError(t, err)
				return out
			}
			plain, early := model().NewSession(), model().NewSession()
			defer plain.Close()
			defer early.Close()
			for _, prompt := range []string{"Once upon a time", " Then the dog"} {
				want, got := turn(plain, prompt, false), turn(early, prompt, true)
				require.Len(t, want, 6)
				delivered := map[int]int{} // position: index of its token's event
				var ids []int32
				routes := map[int][]Route{}
				for i, e := range got {
					if !e.routed {
						assert.Nil(t, e.routes, "a token delivered before it ran has no routing")
						delivered[e.pos] = i
						ids = append(ids, e.id)
						continue
					}
					at, ok := delivered[e.pos]
					assert.True(t, ok && at < i, "the routing of %d comes after its token", e.pos)
					routes[e.pos] = e.routes
				}
				for i, w := range want {
					assert.Equal(t, w.id, ids[i], "token %d", i)
					if i < len(want)-1 {
						require.NotNil(t, w.routes)
						assert.Equal(t, w.routes, routes[w.pos], "the routing of %d", w.pos)
					}
				}
				assert.Len(t, routes, len(want)-1, "every new token's routing but the last's (it never ran)")
			}
		})
	}
}
