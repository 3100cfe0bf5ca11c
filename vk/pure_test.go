package vk

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests need no GPU: the barrier derivation, device choice, push
// packing and error names are plain Go.

func TestErrorNamesResult(t *testing.T) {
	err := result("vkCreateDevice", -3)
	assert.EqualError(t, err, "vk: vkCreateDevice: VK_ERROR_INITIALIZATION_FAILED")
	assert.Equal(t, "VK_ERROR_OUT_OF_POOL_MEMORY", Result(-1000069000).String())
	assert.Equal(t, "VkResult(-77)", Result(-77).String())
	assert.NoError(t, result("vkQueueSubmit", 0))
}

func TestChooseDevice(t *testing.T) {
	devs := []DeviceInfo{
		{Index: 0, Name: "llvmpipe", Type: CPU},
		{Index: 1, Name: "old", Type: Discrete, Problem: "Vulkan 1.1.0 is older than the 1.2.0 that modrun needs"},
		{Index: 2, Name: "igpu", Type: Integrated},
		{Index: 3, Name: "dgpu", Type: Discrete},
	}
	t.Setenv(EnvDevice, "")
	d, err := ChooseDevice(devs, -1)
	require.NoError(t, err)
	assert.Equal(t, "dgpu", d.Name, "a usable discrete GPU first")
	assert.Equal(t, "the first usable discrete device, in the order discrete, integrated, virtual, cpu, other", ChoiceReason(devs, d))
	d, err = ChooseDevice(devs[:3], -1)
	require.NoError(t, err)
	assert.Equal(t, "igpu", d.Name, "then integrated")
	assert.Equal(t, "the first usable integrated device, in the order discrete, integrated, virtual, cpu, other", ChoiceReason(devs[:3], d))
	d, err = ChooseDevice(devs[:1], -1)
	require.NoError(t, err)
	assert.Equal(t, "llvmpipe", d.Name, "then the CPU")
	assert.Equal(t, "the only usable device (cpu)", ChoiceReason(devs[:1], d))

	d, err = ChooseDevice(devs, 0)
	require.NoError(t, err)
	assert.Equal(t, "llvmpipe", d.Name, "--device wins")
	_, err = ChooseDevice(devs, 4)
	assert.EqualError(t, err, "vk: --device 4: no such device (4 found; see modrun devices)")
	_, err = ChooseDevice(devs, 1)
	assert.ErrorContains(t, err, "--device 1 (old): Vulkan 1.1.0 is older")

	t.Setenv(EnvDevice, "2")
	d, err = ChooseDevice(devs, -1)
	require.NoError(t, err)
	assert.Equal(t, "igpu", d.Name, "MODRUN_DEVICE when no --device")
	assert.Equal(t, "MODRUN_DEVICE=2", ChoiceReason(devs, d))
	d, err = ChooseDevice(devs, 0)
	require.NoError(t, err)
	assert.Equal(t, "llvmpipe", d.Name, "--device beats MODRUN_DEVICE")
	t.Setenv(EnvDevice, "9")
	_, err = ChooseDevice(devs, -1)
	assert.EqualError(t, err, "vk: MODRUN_DEVICE 9: no such device (4 found; see modrun devices)")
	t.Setenv(EnvDevice, "gpu")
	_, err = ChooseDevice(devs, -1)
	assert.ErrorContains(t, err, `MODRUN_DEVICE="gpu" is not a device index`)

	t.Setenv(EnvDevice, "")
	_, err = ChooseDevice(nil, -1)
	assert.ErrorIs(t, err, ErrNoVulkan)
	_, err = ChooseDevice(devs[1:2], -1)
	assert.ErrorIs(t, err, ErrNoVulkan)
}

func TestVersion(t *testing.T) {
	v := MakeVersion(1, 3, 230)
	assert.Equal(t, "1.3.230", v.String())
	assert.Less(t, MakeVersion(1, 1, 999), MinAPI)
	b, err := v.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "1.3.230", string(b))
}

func TestPackPush(t *testing.T) {
	type push struct {
		Rows  uint32
		Delta int32
		Scale float32
	}
	b, err := PackPush(push{Rows: 7, Delta: -1, Scale: 1})
	require.NoError(t, err)
	assert.Equal(t, []byte{7, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0x80, 0x3f}, b, "4 bytes per field, little-endian")
	b, err = PackPush(&push{})
	require.NoError(t, err)
	assert.Len(t, b, 12, "a pointer packs its struct")

	_, err = PackPush(struct{ N uint64 }{})
	assert.ErrorContains(t, err, ".N is uint64, want uint32, int32 or float32")
	_, err = PackPush(3)
	assert.ErrorContains(t, err, "int is not a struct")
	assert.Panics(t, func() { MustPackPush(struct{ B bool }{}) })
}

// fakeDevice is enough of a Device for recording without a GPU.
func fakeDevice() *Device {
	return &Device{info: DeviceInfo{Limits: Limits{
		MinStorageBufferOffsetAlignment: 16,
		MaxStorageBufferRange:           1 << 27,
		MaxComputeWorkGroupCount:        [3]uint32{65535, 65535, 65535},
		TimestampValidBits:              64,
	}}}
}

func fakeBuffer(d *Device, size uint64, kind BufferKind) *Buffer {
	return &Buffer{dev: d, size: size, kind: kind, buf: 1}
}

// barriers lists the barrier ops of r as (srcStages, dstStages, buffers).
func barriers(r *Recorder) []*barrier {
	var bs []*barrier
	for _, o := range r.ops {
		if o.kind == opBarrier {
			bs = append(bs, o.barrier)
		}
	}
	return bs
}

func TestBarriersDerived(t *testing.T) {
	d := fakeDevice()
	k := &Kernel{dev: d, spec: KernelSpec{Name: "k", Bindings: 2}}
	a := fakeBuffer(d, 1024, DeviceLocal)
	b := fakeBuffer(d, 1024, DeviceLocal)
	c := fakeBuffer(d, 1024, DeviceLocal)
	g := [3]uint32{1, 1, 1}
	r := d.NewRecorder()
	n := func() int { return r.Stats().Barriers }

	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: b, Access: Write}) // b = f(a)
	assert.Equal(t, 0, n(), "first writer of b: nothing to wait for")
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: c, Access: Write}) // c = f(a)
	assert.Equal(t, 0, n(), "reads of a and a fresh write of c: independent")
	r.Dispatch(k, nil, g, Bind{Buf: b, Access: Read}, Bind{Buf: a, Access: Write}) // a = f(b)
	require.Equal(t, 1, n(), "RAW on b and WAR on a")
	bar := barriers(r)[0]
	assert.Equal(t, stageCompute, bar.srcStages)
	assert.Equal(t, stageCompute, bar.dstStages)
	assert.ElementsMatch(t, []bufferBarrier{
		{buf: b, off: 0, end: 1024, srcAccess: accessShaderWrite, dstAccess: accessShaderRead | accessShaderWrite},
		{buf: a, off: 0, end: 1024, srcAccess: 0, dstAccess: accessShaderWrite},
		{buf: c, off: 0, end: 1024, srcAccess: accessShaderWrite, dstAccess: accessShaderRead | accessShaderWrite},
	}, bar.buffers, "RAW on b makes its write visible; WAR on a needs only ordering; the pending write of c rides along")

	e := fakeBuffer(d, 1024, DeviceLocal)
	r.Dispatch(k, nil, g, Bind{Buf: c, Access: Read}, Bind{Buf: e, Access: Write}) // e = f(c)
	assert.Equal(t, 1, n(), "the last barrier also made the pending write of c visible")
	r.Dispatch(k, nil, g, Bind{Buf: c, Access: Read}, Bind{Buf: b, Access: Write}) // b = f(c)
	assert.Equal(t, 2, n(), "WAR: b was read since the last barrier")

	// Disjoint halves of one buffer: independent. The same half: WAW.
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: c, Size: 512, Access: Write})
	assert.Equal(t, 3, n(), "WAR: c was read before")
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: c, Offset: 512, Access: Write})
	assert.Equal(t, 3, n(), "the other half of c: no hazard")
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: c, Offset: 512, Size: 256, Access: Write})
	assert.Equal(t, 4, n(), "WAW on the second half")
	last := barriers(r)[3]
	require.Len(t, last.buffers, 1, "the conflict on c[512:] and the pending write of c[:512], merged")
	assert.Equal(t, bufferBarrier{buf: c, off: 0, end: 1024, srcAccess: accessShaderWrite, dstAccess: accessShaderRead | accessShaderWrite}, last.buffers[0])

	// A transfer reading what compute wrote needs a compute -> transfer barrier,
	// even though compute readers were already synchronized.
	r.Copy(c, b, 0, 0, 64)
	assert.Equal(t, 5, n())
	bar = barriers(r)[4]
	assert.Equal(t, stageCompute, bar.srcStages)
	assert.Equal(t, stageTransfer, bar.dstStages)

	// An indirect dispatch whose arguments a kernel wrote waits in the
	// draw-indirect stage.
	args := fakeBuffer(d, 64, DeviceLocal)
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: args, Access: Write})
	assert.Equal(t, 5, n())
	r.DispatchIndirect(k, nil, args, 0, Bind{Buf: a, Access: Read}, Bind{Buf: c, Access: ReadWrite}) // WAR with the copy's read of c
	assert.Equal(t, 6, n())
	bar = barriers(r)[5]
	assert.Equal(t, stageDrawIndirect|stageCompute, bar.dstStages)
	var argsBarrier *bufferBarrier
	for i := range bar.buffers {
		if bar.buffers[i].buf == args {
			argsBarrier = &bar.buffers[i]
		}
	}
	require.NotNil(t, argsBarrier, "a barrier on the arguments")
	assert.Equal(t, accessShaderWrite, argsBarrier.srcAccess)
	assert.Equal(t, accessIndirectRead, argsBarrier.dstAccess&accessIndirectRead)

	// Reading again what was already made visible: nothing.
	r.Dispatch(k, nil, g, Bind{Buf: args, Access: Read}, Bind{Buf: fakeBuffer(d, 16, DeviceLocal), Access: Write})
	assert.Equal(t, 6, n())
	require.NoError(t, r.Err())
	assert.Equal(t, 11, r.Stats().Dispatches)
}

// TestHandoffBarriers: commands that both bind a buffer with Handoff get
// no barrier between them for it (their kernels order it); any other
// command after them, or before, gets its barrier as always.
func TestHandoffBarriers(t *testing.T) {
	d := fakeDevice()
	k := &Kernel{dev: d, spec: KernelSpec{Name: "k", Bindings: 2}}
	a, b, c := fakeBuffer(d, 1024, DeviceLocal), fakeBuffer(d, 1024, DeviceLocal), fakeBuffer(d, 1024, DeviceLocal)
	g := [3]uint32{1, 1, 1}
	r := d.NewRecorder()
	n := func() int { return r.Stats().Barriers }

	r.Dispatch(k, nil, g, Bind{Buf: b, Access: Read}, Bind{Buf: a, Access: ReadWrite | Handoff})
	r.Dispatch(k, nil, g, Bind{Buf: b, Access: Read}, Bind{Buf: a, Access: ReadWrite | Handoff})
	r.Dispatch(k, nil, g, Bind{Buf: b, Access: Read}, Bind{Buf: a, Access: Write | Handoff})
	assert.Equal(t, 0, n(), "RAW, WAR and WAW on a between Handoff uses: the kernels order them")
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Read}, Bind{Buf: c, Access: Write})
	require.Equal(t, 1, n(), "a plain read of what the handoff chain wrote")
	assert.Equal(t, []bufferBarrier{{buf: a, off: 0, end: 1024, srcAccess: accessShaderRead | accessShaderWrite, dstAccess: accessShaderRead | accessShaderWrite}},
		barriers(r)[0].buffers)
	r.Dispatch(k, nil, g, Bind{Buf: b, Access: Read}, Bind{Buf: a, Access: ReadWrite | Handoff})
	assert.Equal(t, 2, n(), "a Handoff write after a plain read: WAR, a barrier")
	r.Dispatch(k, nil, g, Bind{Buf: a, Access: Write}, Bind{Buf: c, Access: Read})
	assert.Equal(t, 3, n(), "a plain write after a Handoff one: WAW, a barrier")
	require.NoError(t, r.Err())

	bad := d.NewRecorder()
	bad.Dispatch(k, nil, g, Bind{Buf: b, Access: Read}, Bind{Buf: a, Access: Handoff})
	assert.ErrorContains(t, bad.Err(), "k binding 1: access Access(4): want Read, Write or ReadWrite (with Handoff or not)")
	assert.Equal(t, "read-write handoff", (ReadWrite | Handoff).String())
	assert.Equal(t, "read handoff", (Read | Handoff).String())
}

// TestConditionalBarriers: a conditional span's predicate, written by a
// kernel, needs a barrier into the conditional-rendering stage; that one
// barrier also orders the kernel's other writes before the span's
// dispatches (indirect arguments included), which then need none.
func TestConditionalBarriers(t *testing.T) {
	d := fakeDevice()
	d.info.Features.ConditionalRendering = true
	k := &Kernel{dev: d, spec: KernelSpec{Name: "k", Bindings: 2}}
	pred, args, xs := fakeBuffer(d, 16, DeviceLocal), fakeBuffer(d, 64, DeviceLocal), fakeBuffer(d, 1024, DeviceLocal)
	g := [3]uint32{1, 1, 1}
	r := d.NewRecorder()
	r.Dispatch(k, nil, g, Bind{Buf: pred, Access: Write}, Bind{Buf: args, Access: Write})
	r.Dispatch(k, nil, g, Bind{Buf: xs, Access: Write}, Bind{Buf: fakeBuffer(d, 16, DeviceLocal), Access: Write})
	require.Zero(t, r.Stats().Barriers)
	r.BeginConditional(pred, 0)
	require.Equal(t, 1, r.Stats().Barriers, "the predicate's RAW")
	bar := barriers(r)[0]
	assert.Equal(t, stageCompute, bar.srcStages)
	assert.Equal(t, stageConditional|allStages, bar.dstStages, "widened to every stage the span's commands run in")
	var predBarrier *bufferBarrier
	for i := range bar.buffers {
		if bar.buffers[i].buf == pred {
			predBarrier = &bar.buffers[i]
		}
	}
	require.NotNil(t, predBarrier)
	assert.Equal(t, accessConditionalRead, predBarrier.dstAccess&accessConditionalRead)
	r.DispatchIndirect(k, nil, args, 0, Bind{Buf: xs, Access: Read}, Bind{Buf: fakeBuffer(d, 16, DeviceLocal), Access: Write})
	assert.Equal(t, 1, r.Stats().Barriers, "args and xs were made visible by the predicate's barrier")
	r.EndConditional()
	require.NoError(t, r.Err())

	plain := fakeDevice()
	rp := plain.NewRecorder()
	rp.BeginConditional(fakeBuffer(plain, 4, DeviceLocal), 0)
	assert.ErrorContains(t, rp.Err(), "no VK_EXT_conditional_rendering")
}

func TestBarrierRepeatedReadsStayBounded(t *testing.T) {
	d := fakeDevice()
	k := &Kernel{dev: d, spec: KernelSpec{Name: "k", Bindings: 2}}
	w := fakeBuffer(d, 4096, DeviceLocal)
	outs := []*Buffer{fakeBuffer(d, 64, DeviceLocal), fakeBuffer(d, 64, DeviceLocal)}
	r := d.NewRecorder()
	for i := 0; i < 1000; i++ {
		r.Dispatch(k, nil, [3]uint32{1, 1, 1}, Bind{Buf: w, Access: Read}, Bind{Buf: outs[i%2], Access: ReadWrite})
	}
	require.NoError(t, r.Err())
	assert.Len(t, r.track.entries[w], 1, "identical reads are tracked once")
	assert.LessOrEqual(t, len(r.track.entries[outs[0]]), 2, "superseded writes are dropped")
}

func TestHostVisibleWritesNeedHostBarrier(t *testing.T) {
	d := fakeDevice()
	r := d.NewRecorder()
	dl := fakeBuffer(d, 64, DeviceLocal)
	hv := fakeBuffer(d, 64, HostVisible)
	r.Fill(dl, 0, 64, 0)
	assert.Zero(t, r.track.hostStages, "device-local writes: Download copies them")
	r.Copy(dl, hv, 0, 0, 64)
	assert.Equal(t, stageTransfer, r.track.hostStages)
	assert.Equal(t, accessTransferWrite, r.track.hostAccess)
}

// TestSpansCheckPredicateOrder: Spans names each span's predicate writer
// and whether a barrier orders the write before the span; CheckSpans fails
// a recording whose predicate write is not ordered (here with the derived
// barriers dropped), or is ordered only for another stage.
func TestSpansCheckPredicateOrder(t *testing.T) {
	d := fakeDevice()
	d.info.Features.ConditionalRendering = true
	k := &Kernel{dev: d, spec: KernelSpec{Name: "count", Bindings: 2}}
	pred, src, xs := fakeBuffer(d, 16, DeviceLocal), fakeBuffer(d, 4, HostVisible), fakeBuffer(d, 64, DeviceLocal)
	g := [3]uint32{1, 1, 1}

	r := d.NewRecorder()
	r.Dispatch(k, nil, g, Bind{Buf: xs, Access: Read}, Bind{Buf: pred, Access: Write})
	r.BeginConditional(pred, 0)
	r.EndConditional()
	r.Copy(src, pred, 0, 8, 4)
	r.BeginConditional(pred, 8)
	r.EndConditional()
	r.BeginConditional(pred, 8) // no new write: the same barrier still orders it
	r.EndConditional()
	require.NoError(t, r.Err())
	spans := r.Spans()
	require.Len(t, spans, 3)
	assert.Equal(t, "count", spans[0].Writer)
	assert.Equal(t, stageCompute, spans[0].WriterStage)
	assert.Equal(t, "copy", spans[1].Writer)
	assert.Equal(t, stageTransfer, spans[1].WriterStage)
	assert.Contains(t, spans[1].Before, "src ALL_COMMANDS", "a transfer-written predicate: the barrier NVIDIA honours")
	assert.Equal(t, "copy", spans[2].Writer)
	assert.Empty(t, spans[2].Before, "no barrier of its own")
	for i, s := range spans {
		assert.True(t, s.Ordered, "span %d: %+v", i, s)
	}
	require.NoError(t, r.CheckSpans())

	host := d.NewRecorder()
	host.BeginConditional(pred, 4)
	host.EndConditional()
	require.Len(t, host.Spans(), 1)
	assert.Empty(t, host.Spans()[0].Writer, "written before the recording")
	assert.NoError(t, host.CheckSpans())

	dropped := d.NewRecorder()
	dropped.dropBarriers = true
	dropped.Copy(src, pred, 0, 0, 4)
	dropped.BeginConditional(pred, 0)
	dropped.EndConditional()
	assert.ErrorContains(t, dropped.CheckSpans(), "written by copy (stage TRANSFER, access TRANSFER_WRITE), is not ordered")

	// The spec's barrier for a transfer-written predicate, which NVIDIA's
	// driver does not honour (issue 46), is not enough.
	spec := d.NewRecorder()
	spec.dropBarriers = true
	spec.Fill(pred, 0, 4, 1)
	spec.ops = append(spec.ops, op{kind: opBarrier, barrier: &barrier{srcStages: stageTransfer, dstStages: stageConditional,
		buffers: []bufferBarrier{{pred, 0, 4, accessTransferWrite, accessConditionalRead}}}})
	spec.BeginConditional(pred, 0)
	spec.EndConditional()
	assert.ErrorContains(t, spec.CheckSpans(), "written by fill")

	// A barrier for the span's dispatches (compute), not for the predicate
	// read, does not order it.
	wrong := d.NewRecorder()
	wrong.dropBarriers = true
	wrong.Copy(src, pred, 0, 0, 4)
	wrong.ops = append(wrong.ops, op{kind: opBarrier, barrier: &barrier{srcStages: stageTransfer, dstStages: stageCompute,
		srcAccess: accessTransferWrite, dstAccess: accessShaderRead}})
	wrong.BeginConditional(pred, 0)
	wrong.EndConditional()
	assert.Error(t, wrong.CheckSpans())
}
