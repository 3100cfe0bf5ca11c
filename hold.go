package modrun

import (
	"context"
	"slices"
)

// The runner's hold. One call at a time uses the runner (Generate,
// LogProbs, Profile, Close; a new method that touches the runner or its
// owner does the same): it holds turn, and a call from elsewhere waits for
// it. While the holder runs a token callback the runner is idle, and the
// holder lends it out: a call that starts while the callback runs takes the
// lend instead of turn, and the holder takes the runner back when the
// callback returns and that call is done (the outer Generate then restores
// its session before it goes on). The callback's own calls must work that
// way, since waiting for turn would wait on the call running them; a call
// another goroutine starts in that window is served the same way, in the
// callback's place, as nothing tells the two apart without goroutine ids.
// A call already waiting for turn when the callback began keeps waiting for
// the whole call. Lends nest: a call on a lend lends in its turn while its
// own callback runs, and calls take the innermost.

// lend is the runner lent out while one token callback runs.
type lend struct {
	slot chan struct{} // capacity 1: full while a call uses the lent runner
	over chan struct{} // closed once the holder has taken the runner back
}

// acquire takes the model's runner for one call, waiting while another call
// holds it, until ctx is done. It returns ErrClosed once the model is
// closed; otherwise the caller must call release when done.
func (m *Model) acquire(ctx context.Context) (release func(), err error) {
	for release == nil {
		if l := m.innermostLend(); l != nil {
			select {
			case l.slot <- struct{}{}:
				release = func() { <-l.slot }
			case <-l.over: // the callback returned: look again
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		select {
		case m.turn <- struct{}{}:
			release = func() { <-m.turn }
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if m.isClosed() {
		release()
		return nil, ErrClosed
	}
	return release, nil
}

func (m *Model) innermostLend() *lend {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.lends) == 0 {
		return nil
	}
	return m.lends[len(m.lends)-1]
}

// lendDuring runs fn, a token callback of the call holding the runner, with
// the runner lent out (acquire), and takes it back after, once a call on
// the lend is done: even when fn panics.
func (m *Model) lendDuring(fn func() error) error {
	l := &lend{slot: make(chan struct{}, 1), over: make(chan struct{})}
	m.mu.Lock()
	m.lends = append(m.lends, l)
	m.mu.Unlock()
	defer func() {
		l.slot <- struct{}{} // wait for a call on the lend to end
		m.mu.Lock()
		m.lends = slices.DeleteFunc(m.lends, func(x *lend) bool { return x == l })
		m.mu.Unlock()
		close(l.over)
	}()
	return fn()
}
