package cpu

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// pool is a fixed set of worker goroutines that split a range of rows: one
// per CPU, started once and parked between calls, so that a matrix product
// costs a hand-off, not a goroutine start. The caller takes the first
// share itself. Hand-offs spin a little before parking: a decode token is a
// few dozen products of microseconds each, and waking a parked thread
// costs as much as one.
type pool struct {
	workers int // including the caller
	tasks   chan task
	mu      sync.Mutex // one split at a time: workers serve one caller
}

type task struct {
	fn     func(lo, hi int)
	lo, hi int
	left   *atomic.Int32
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
	p := &pool{workers: max(1, workers), tasks: make(chan task, workers)}
	for range p.workers - 1 {
		go p.work()
	}
	return p
}

func (p *pool) work() {
	for {
		var t task
		select {
		case t = <-p.tasks:
		default:
			t = p.spinWait()
		}
		t.fn(t.lo, t.hi)
		t.left.Add(-1)
	}
}

// spinWait polls for a task for a while, then parks on the channel.
func (p *pool) spinWait() task {
	for i := 0; i < 2000; i++ {
		select {
		case t := <-p.tasks:
			return t
		default:
		}
		if i%64 == 63 {
			runtime.Gosched()
		}
	}
	return <-p.tasks
}

// run calls fn on ranges covering [0, n) across the workers, each at least
// grain long, and returns when all are done.
func (p *pool) run(n, grain int, fn func(lo, hi int)) {
	parts := min(p.workers, max(1, n/max(1, grain)))
	if parts <= 1 {
		fn(0, n)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var left atomic.Int32
	left.Store(int32(parts - 1))
	for i := 1; i < parts; i++ {
		p.tasks <- task{fn: fn, lo: i * n / parts, hi: (i + 1) * n / parts, left: &left}
	}
	fn(0, n/parts)
	for spins := 0; left.Load() > 0; spins++ {
		if spins%64 == 63 {
			runtime.Gosched()
		}
	}
}
