package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// pool is a fixed set of worker goroutines, one per CPU, started once and
// parked between calls, so that a matrix product costs a hand-off, not a
// goroutine start. A split hands out small shares of the rows through an
// atomic counter, the caller taking shares too: on a machine whose cores
// are shared with other programs, a worker the OS has descheduled simply
// takes no share, instead of making the caller wait for a fixed one.
type pool struct {
	workers int           // including the caller
	wake    []chan *split // one per worker goroutine
	mu      sync.Mutex    // one split at a time
}

// split is one call of run: shares of [0, n), each `share` long.
type split struct {
	fn    func(lo, hi int)
	n     int
	share int
	next  atomic.Int64 // the next share's start
	done  atomic.Int64 // rows finished
}

var (
	sharedPool     *pool
	sharedPoolOnce sync.Once
)

// thePool is the process's pool, started on first use: every runner shares
// it, as they share the cores.
func thePool() *pool {
	sharedPoolOnce.Do(func() { sharedPool = newPool(runtime.GOMAXPROCS(0)) })
	return sharedPool
}

func newPool(workers int) *pool {
	p := &pool{workers: max(1, workers)}
	for range p.workers - 1 {
		c := make(chan *split, 1)
		p.wake = append(p.wake, c)
		go p.work(c)
	}
	return p
}

// work runs the splits it is woken for. Between them it spins a little
// before parking: a decode token is a few dozen splits of microseconds
// each, and waking a parked thread costs about as much as one.
func (p *pool) work(c chan *split) {
	for {
		var s *split
		for spin := 0; s == nil && spin < 256; spin++ {
			select {
			case s = <-c:
			default:
				runtime.Gosched()
			}
		}
		if s == nil {
			s = <-c
		}
		s.take()
	}
}

// take runs shares until none is left. A worker that comes late finds
// none and never calls fn after run has returned.
func (s *split) take() {
	for {
		lo := int(s.next.Add(int64(s.share))) - s.share
		if lo >= s.n {
			return
		}
		hi := min(lo+s.share, s.n)
		s.fn(lo, hi)
		s.done.Add(int64(hi - lo))
	}
}

// run calls fn on ranges covering [0, n), each at least grain long (but
// for the last), spread over the workers, and returns when all are done.
func (p *pool) run(n, grain int, fn func(lo, hi int)) {
	grain = max(1, grain)
	if p.workers <= 1 || n < 2*grain {
		fn(0, n)
		return
	}
	// About four shares per worker: small enough to balance, large enough
	// that the counter is not contended.
	share := max(grain, (n+4*p.workers-1)/(4*p.workers))
	s := &split{fn: fn, n: n, share: share}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.wake {
		select {
		case c <- s:
		default: // still holding an earlier split: it will find no share there, and misses this one
		}
	}
	s.take()
	// Only shares already taken remain: wait for them, not for workers.
	for spin := 0; s.done.Load() < int64(n); spin++ {
		if spin > 64 {
			runtime.Gosched()
		}
	}
}
