package vk

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Issue 46: on an NVIDIA H200 (driver 580.159.04) TestConditionalDispatch's
// span is discarded with predicate 1 when the predicate is copied into
// place in the same command buffer, while the engine's spans (predicates a
// shader writes) run. The tests here show which barrier the recorder puts
// before vkCmdBeginConditionalRenderingEXT, and run every way of writing a
// predicate that the question turns on, one line each, so that one GPU run
// tells the candidate causes apart.

// condCase is one way of writing a conditional span's predicate.
type condCase struct {
	writer string // "shader", "copy", "fill", "update" (vkCmdUpdateBuffer), "host" (a mapped write or a staged Upload, before the submit)
	// submit: the write is its own submit before the span's; otherwise it
	// is in the span's command buffer, ordered by barrier: "derived" (the
	// recorder's), "global" (the same stages as one VkMemoryBarrier),
	// "src-all" (ALL_COMMANDS, MEMORY_WRITE -> the derived destination),
	// "dst-all" (the writer's stage and access -> ALL_COMMANDS,
	// MEMORY_READ), or "all-commands" (ALL_COMMANDS -> ALL_COMMANDS,
	// MEMORY_WRITE -> MEMORY_READ|MEMORY_WRITE).
	submit  bool
	barrier string
	// asTest: TestConditionalDispatch's pattern: y and aux are zeroed by
	// Fills in the span's command buffer (so the predicate's barrier also
	// carries theirs), and the span copies x[0] to aux after its dispatch.
	asTest   bool
	predKind BufferKind
	small    bool // a 16-byte predicate buffer (TestConditionalDispatch's), not condPredBytes
	offset   uint64
	indirect bool // the span holds a DispatchIndirect, as the engine's do
}

func (c condCase) String() string {
	sync := "same cb, " + c.barrier + " barrier"
	switch {
	case c.writer == "host":
		sync = "before the submit"
	case c.submit:
		sync = "own submit before"
	}
	dispatch := "direct"
	if c.indirect {
		dispatch = "indirect"
	}
	if c.asTest {
		sync += ", as TestConditionalDispatch (fills before, a copy inside)"
	}
	size := condPredBytes
	if c.small {
		size = 16
	}
	return fmt.Sprintf("writer=%-6s pred=%-12s %2dB off=%-2d dispatch=%-8s sync=%s", c.writer, c.predKind, size, c.offset, dispatch, sync)
}

// matters says whether a wrong result here is modrun's bug: the recorder's
// own barriers, a submit between, or the host. The hand-written barriers
// are evidence only.
func (c condCase) matters() bool { return c.barrier == "" || c.barrier == "derived" }

func condCases() []condCase {
	var cs []condCase
	for _, kind := range []BufferKind{DeviceLocal, HostVisible} {
		for _, off := range []uint64{0, 8} {
			for _, ind := range []bool{false, true} {
				for _, w := range []string{"shader", "copy", "fill", "update"} {
					base := condCase{writer: w, predKind: kind, offset: off, indirect: ind}
					for _, b := range []string{"derived", "global", "src-all", "dst-all", "all-commands"} {
						c := base
						c.barrier = b
						cs = append(cs, c)
					}
					if w == "copy" {
						c := base
						c.barrier, c.asTest = "derived", true
						cs = append(cs, c)
					}
					base.submit = true
					cs = append(cs, base)
				}
				cs = append(cs, condCase{writer: "host", predKind: kind, offset: off, indirect: ind})
			}
		}
		// Other offsets, and the 16-byte buffer: the recorder's barriers only.
		for _, size := range []struct {
			small bool
			offs  []uint64
		}{{false, []uint64{4, 12}}, {true, []uint64{0, 4, 8, 12}}} {
			for _, off := range size.offs {
				for _, w := range []string{"shader", "copy", "fill", "update", "host"} {
					c := condCase{writer: w, predKind: kind, small: size.small, offset: off}
					if w != "host" {
						c.barrier = "derived"
					}
					cs = append(cs, c)
				}
			}
		}
	}
	return cs
}

// condRig holds the buffers every case reuses; each run resets what it reads.
type condRig struct {
	dev       *Device
	k         *Kernel
	x, y      *Buffer    // the span's axpy: y += x
	args      *Buffer    // its indirect workgroup counts
	pred      [2]*Buffer // by BufferKind
	pred16    [2]*Buffer // 16 bytes
	src       *Buffer    // a copy's source (host-visible)
	shaderX   *Buffer    // what the predicate-writing axpy adds to the predicate
	aux       *Buffer    // condCase.asTest's copy destination
	n         int
	xs        []float32
	bufferTag map[*Buffer]string
}

const condPredBytes = 32

// condRepeats: runs of each case and predicate.
const condRepeats = 2

func newCondRig(t *testing.T, dev *Device) *condRig {
	const n = 64
	g := &condRig{dev: dev, k: newAxpy(t, dev, 32, 1), n: n}
	g.x, g.y = newBuffer(t, dev, 4*n, DeviceLocal), newBuffer(t, dev, 4*n, DeviceLocal)
	g.args = newBuffer(t, dev, 12, DeviceLocal)
	g.pred[DeviceLocal], g.pred[HostVisible] = newBuffer(t, dev, condPredBytes, DeviceLocal), newBuffer(t, dev, condPredBytes, HostVisible)
	g.pred16[DeviceLocal], g.pred16[HostVisible] = newBuffer(t, dev, 16, DeviceLocal), newBuffer(t, dev, 16, HostVisible)
	g.src, g.shaderX = newBuffer(t, dev, 4, HostVisible), newBuffer(t, dev, condPredBytes, DeviceLocal)
	g.aux = newBuffer(t, dev, 4, DeviceLocal)
	g.xs = make([]float32, n)
	for i := range g.xs {
		g.xs[i] = float32(i) + 1
	}
	require.NoError(t, g.x.Upload(f32bytes(g.xs), 0))
	require.NoError(t, g.args.Upload(f32bytesU32(n/32, 1, 1), 0))
	g.bufferTag = map[*Buffer]string{g.x: "x", g.y: "y", g.args: "args", g.pred[DeviceLocal]: "pred",
		g.pred[HostVisible]: "pred", g.pred16[DeviceLocal]: "pred", g.pred16[HostVisible]: "pred", g.src: "src", g.shaderX: "shaderX", g.aux: "aux"}
	return g
}

func (g *condRig) name(b *Buffer) string {
	if s, ok := g.bufferTag[b]; ok {
		return s
	}
	return fmt.Sprintf("%p", b)
}

// run writes predicate p (0 or 1) the case's way, over a stale value that
// would give the opposite answer, runs the span, and returns y (want x when
// p != 0, 0 when p == 0) with the barrier recorded just before
// vkCmdBeginConditionalRenderingEXT.
func (g *condRig) run(c condCase, p uint32) (y []float32, before string, err error) {
	pred := g.pred[c.predKind]
	if c.small {
		pred = g.pred16[c.predKind]
	}
	words := int(pred.Size() / 4)
	slot := int(c.offset / 4)
	// Every word of the buffer starts as the opposite answer: a predicate
	// read before its write lands, or read from another word (an offset
	// ignored or misapplied) or as 64 bits, gives a wrong result for p = 0
	// or p = 1. The shader writer adds to the predicate as float32, so its
	// values are float bits.
	stale, value := make([]uint32, words), p
	for i := range stale {
		if p == 0 {
			stale[i] = 1
		}
		if c.writer == "shader" {
			stale[i] = math.Float32bits(float32(stale[i]))
		}
	}
	if c.writer == "shader" {
		add := make([]float32, words)
		add[slot] = 1 // 0 + 1 = 1.0, nonzero bits
		if p == 0 {
			add[slot] = -1 // 1.0 - 1.0 = +0.0, all bits 0
		}
		if err := g.shaderX.Upload(f32bytes(add), 0); err != nil {
			return nil, "", err
		}
	}
	if err := pred.Upload(f32bytesU32(stale...), 0); err != nil {
		return nil, "", err
	}
	if err := g.y.Upload(f32bytes(g.xs), 0); err != nil { // not 0: a Fill must do it
		return nil, "", err
	}
	if !c.asTest {
		if err := g.y.Upload(make([]byte, 4*g.n), 0); err != nil {
			return nil, "", err
		}
	}
	if c.writer == "copy" {
		if err := g.src.Upload(f32bytesU32(value), 0); err != nil {
			return nil, "", err
		}
	}

	r := g.dev.NewRecorder()
	defer func() { r.Close() }()
	if c.asTest {
		r.Fill(g.y, 0, uint64(4*g.n), 0)
		r.Fill(g.aux, 0, 4, 0)
	}
	writerStage, writerAccess := stageTransfer, accessTransferWrite
	switch c.writer {
	case "host":
		if err := pred.Upload(f32bytesU32(value), c.offset); err != nil {
			return nil, "", err
		}
	case "copy":
		r.Copy(g.src, pred, 0, c.offset, 4)
	case "fill":
		r.Fill(pred, c.offset, 4, value)
	case "update":
		r.update(pred, c.offset, f32bytesU32(value))
	case "shader":
		writerStage, writerAccess = stageCompute, accessShaderWrite
		r.Dispatch(g.k, MustPackPush(axpyPush{N: uint32(words), Scale: 1}), [3]uint32{1, 1, 1},
			Bind{Buf: g.shaderX, Access: Read}, Bind{Buf: pred, Access: ReadWrite})
	}
	if c.submit {
		if err := g.dev.Run(r); err != nil {
			return nil, "", err
		}
		r.Close()
		r = g.dev.NewRecorder()
	}
	if c.barrier != "" && c.barrier != "derived" {
		all := g.dev.stages()
		b := &barrier{srcStages: writerStage, dstStages: all, srcAccess: writerAccess, dstAccess: accessesOf(all)}
		switch c.barrier {
		case "src-all":
			b.srcStages, b.srcAccess = stageAllCommands, accessMemoryWrite
		case "dst-all":
			b.dstStages, b.dstAccess = stageAllCommands, accessMemoryRead|accessConditionalRead
		case "all-commands":
			b = &barrier{srcStages: stageAllCommands, dstStages: stageAllCommands,
				srcAccess: accessMemoryWrite, dstAccess: accessMemoryRead | accessMemoryWrite | accessConditionalRead}
		}
		r.ops = append(r.ops, op{kind: opBarrier, barrier: b})
		r.dropBarriers = true // the derived one (to the predicate read) is replaced by b
	}
	r.BeginConditional(pred, c.offset)
	r.dropBarriers = false
	push := MustPackPush(axpyPush{N: uint32(g.n), Scale: 1})
	binds := []Bind{{Buf: g.x, Access: Read}, {Buf: g.y, Access: ReadWrite}}
	if c.indirect {
		r.DispatchIndirect(g.k, push, g.args, 0, binds...)
	} else {
		r.Dispatch(g.k, push, [3]uint32{uint32(g.n) / 32, 1, 1}, binds...)
	}
	if c.asTest {
		r.Copy(g.x, g.aux, 0, 0, 4)
	}
	r.EndConditional()
	before = beforeBegin(r, g.name)
	if err := g.dev.Run(r); err != nil {
		return nil, before, err
	}
	got := make([]byte, 4*g.n)
	if err := g.y.Download(got, 0); err != nil {
		return nil, before, err
	}
	if c.asTest {
		aux := make([]byte, 4)
		if err := g.aux.Download(aux, 0); err != nil {
			return nil, before, err
		}
		if a := bytesF32(aux)[0]; a != g.xs[0] {
			return nil, before, fmt.Errorf("the copy inside the span wrote %g, want %g (copies are not conditional)", a, g.xs[0])
		}
	}
	return bytesF32(got), before, nil
}

// beforeBegin describes the command recorded just before the first
// BeginConditional: the barrier that orders the predicate's write, or none.
func beforeBegin(r *Recorder, name func(*Buffer) string) string {
	for i, o := range r.ops {
		if o.kind != opBeginConditional {
			continue
		}
		if i > 0 && r.ops[i-1].kind == opBarrier {
			return r.ops[i-1].barrier.describe(name)
		}
		return "no barrier (only the command buffer's entry barrier)"
	}
	return "no BeginConditional"
}

// TestConditionalDiagnostic runs a span after each way of writing its
// predicate (condCases) with predicates 1 and 0 over a stale opposite
// value, and logs one line per case: the result and the barrier before
// vkCmdBeginConditionalRenderingEXT. It fails on the cases the recorder is
// responsible for (condCase.matters); the hand-written barriers are logged
// for comparison. On a device whose compute queue is not family 0 it also
// runs the recorder's cases on family 0 (log only), since a queue family of
// its own is what the engine's and the test's spans share with nothing
// else.
func TestConditionalDiagnostic(t *testing.T) {
	dev := openDevice(t)
	info := dev.Info()
	if !info.Features.ConditionalRendering {
		t.Skipf("%s has no VK_EXT_conditional_rendering", info.Name)
	}
	t.Logf("device %s, driver %s %s, Vulkan %s, compute queue family %d", info.Name, info.DriverName, info.DriverInfo, info.APIVersion, info.computeFamily)
	failed := runConditionalCases(t, dev, condCases(), true)
	t.Logf("%d of %d cases wrong", failed, len(condCases()))

	if info.computeFamily != 0 {
		other := openEdited(t, InstanceOptions{}, func(d *DeviceInfo) { d.computeFamily = 0 })
		t.Logf("the same on queue family 0 (log only, no validation layer):")
		var own []condCase
		for _, c := range condCases() {
			if c.matters() {
				own = append(own, c)
			}
		}
		failed := runConditionalCases(t, other, own, false)
		t.Logf("family 0: %d of %d cases wrong", failed, len(own))
	}
}

func runConditionalCases(t *testing.T, dev *Device, cases []condCase, fail bool) int {
	g := newCondRig(t, dev)
	failed := 0
	// Wrong and all cases by each dimension's value, for the summary.
	type tally struct{ wrong, all int }
	by := map[string]*tally{}
	var keys []string
	count := func(c condCase, bad bool) {
		sync := c.barrier
		if c.submit {
			sync = "own-submit"
		} else if c.writer == "host" {
			sync = "host"
		}
		for _, k := range []string{"writer=" + c.writer, "pred=" + c.predKind.String(), fmt.Sprintf("off=%d", c.offset), fmt.Sprintf("small=%v", c.small),
			fmt.Sprintf("indirect=%v", c.indirect), "sync=" + sync, fmt.Sprintf("asTest=%v", c.asTest)} {
			if by[k] == nil {
				by[k] = &tally{}
				keys = append(keys, k)
			}
			by[k].all++
			if bad {
				by[k].wrong++
			}
		}
	}
	defer func() {
		slices.Sort(keys)
		var sum []string
		for _, k := range keys {
			sum = append(sum, fmt.Sprintf("%s %d/%d", k, by[k].wrong, by[k].all))
		}
		t.Logf("wrong/all by dimension: %s", strings.Join(sum, ", "))
	}()
	for _, c := range cases {
		var line strings.Builder
		bad, before := false, ""
		for _, p := range []uint32{1, 0} {
			// Twice: a race between the write and the predicate read
			// may not lose every time.
			var want, first float32
			wrongRuns, errs := 0, []string(nil)
			for rep := 0; rep < condRepeats; rep++ {
				y, b, err := g.run(c, p)
				before = b
				if err != nil {
					errs = append(errs, err.Error())
					continue
				}
				wrong := false
				for i := range y {
					w := float32(0)
					if p != 0 {
						w = g.xs[i]
					}
					if i == 0 {
						want = w
						if rep == 0 || y[0] != w {
							first = y[0]
						}
					}
					wrong = wrong || y[i] != w
				}
				if wrong {
					wrongRuns++
				}
			}
			verdict := "ok"
			switch {
			case len(errs) > 0:
				verdict = "ERROR " + strings.Join(errs, "; ")
				bad = true
			case wrongRuns > 0:
				verdict = fmt.Sprintf("WRONG in %d of %d runs", wrongRuns, condRepeats)
				bad = true
			}
			fmt.Fprintf(&line, " p=%d: y[0] expected %g actual %g %s;", p, want, first, verdict)
		}
		if bad {
			failed++
		}
		count(c, bad)
		msg := fmt.Sprintf("%s |%s barrier before begin: %s", c, line.String(), before)
		switch {
		case bad && fail && c.matters():
			t.Errorf("%s", msg)
		case bad:
			t.Logf("%s (informational)", msg)
		default:
			t.Logf("%s", msg)
		}
	}
	return failed
}

// TestConditionalPredicateBarriers reads the barrier the recorder puts
// before BeginConditional for a predicate written by a transfer (a copy
// from a host-visible buffer, TestConditionalDispatch's pattern; a fill)
// and by a shader (the engine's): it must be the command just before the
// begin and reach the span's own stages. After a shader, it waits for the
// compute stage and covers the predicate's 4 bytes with SHADER_WRITE made
// visible to the conditional-rendering read. After a transfer it is one
// global memory barrier from ALL_COMMANDS, MEMORY_WRITE: NVIDIA's driver
// reads the predicate stale through the TRANSFER-stage barrier the spec
// asks for (TestConditionalDiagnostic on an H200, issue 46).
func TestConditionalPredicateBarriers(t *testing.T) {
	dev := openDevice(t)
	if !dev.Info().Features.ConditionalRendering {
		t.Skipf("%s has no VK_EXT_conditional_rendering", dev.Info().Name)
	}
	g := newCondRig(t, dev)
	for _, c := range []struct {
		writer              string
		srcStage, srcAccess uint32
		predKind            BufferKind
		offset              uint64
	}{
		{"copy", stageTransfer, accessTransferWrite, DeviceLocal, 8},
		{"fill", stageTransfer, accessTransferWrite, DeviceLocal, 0},
		{"shader", stageCompute, accessShaderWrite, DeviceLocal, 0},
		{"shader", stageCompute, accessShaderWrite, HostVisible, 8},
	} {
		t.Run(fmt.Sprintf("%s-%s-%d", c.writer, c.predKind, c.offset), func(t *testing.T) {
			pred := g.pred[c.predKind]
			r := dev.NewRecorder()
			defer r.Close()
			switch c.writer {
			case "copy":
				r.Copy(g.src, pred, 0, c.offset, 4)
			case "fill":
				r.Fill(pred, c.offset, 4, 1)
			case "shader":
				r.Dispatch(g.k, MustPackPush(axpyPush{N: condPredBytes / 4, Scale: 1}), [3]uint32{1, 1, 1},
					Bind{Buf: g.shaderX, Access: Read}, Bind{Buf: pred, Access: ReadWrite})
			}
			r.BeginConditional(pred, c.offset)
			r.Dispatch(g.k, MustPackPush(axpyPush{N: uint32(g.n), Scale: 1}), [3]uint32{uint32(g.n) / 32, 1, 1},
				Bind{Buf: g.x, Access: Read}, Bind{Buf: g.y, Access: ReadWrite})
			r.EndConditional()
			require.NoError(t, r.Err())
			kinds := make([]opKind, len(r.ops))
			for i, o := range r.ops {
				kinds[i] = o.kind
			}
			// The writer, the barrier, the begin, the span's dispatch (no
			// barrier of its own: the predicate's serves it), the end.
			require.Equal(t, []opKind{kinds[0], opBarrier, opBeginConditional, opDispatch, opEndConditional}, kinds)
			b := r.ops[1].barrier
			t.Logf("%s: %s", c.writer, b.describe(g.name))
			assert.NotZero(t, b.dstStages&stageConditional, "blocks the predicate read")
			assert.NotZero(t, b.dstStages&stageCompute, "blocks the span's dispatches")
			if c.srcStage == stageTransfer {
				assert.Equal(t, stageAllCommands, b.srcStages, "waits for all commands, not the TRANSFER stage")
				assert.Empty(t, b.buffers, "a global memory barrier")
				assert.Equal(t, accessMemoryWrite, b.srcAccess)
				assert.NotZero(t, b.dstAccess&accessConditionalRead, "visible to the predicate read")
				assert.NotZero(t, b.dstAccess&accessShaderRead, "and to the span's dispatches")
			} else {
				assert.Equal(t, c.srcStage, b.srcStages&c.srcStage, "waits for the writer's stage")
				var found bool
				for _, bb := range b.buffers {
					if bb.buf != pred {
						continue
					}
					found = true
					assert.LessOrEqual(t, bb.off, c.offset)
					assert.GreaterOrEqual(t, bb.end, c.offset+4)
					assert.Equal(t, c.srcAccess, bb.srcAccess&c.srcAccess, "the writer's access is made available")
					assert.NotZero(t, bb.dstAccess&accessConditionalRead, "visible to the predicate read")
				}
				assert.True(t, found, "a buffer barrier on the predicate: %s", b.describe(g.name))
			}
			spans := r.Spans() // the exported view engine tests read
			require.Len(t, spans, 1)
			assert.Equal(t, c.srcStage, spans[0].WriterStage)
			assert.Equal(t, b.String(), spans[0].Before)
			assert.NoError(t, r.CheckSpans())
			require.NoError(t, dev.Run(r))
		})
	}
}
