package vk

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

//go:generate glslc --target-env=vulkan1.2 -O -o testdata/axpy.spv testdata/axpy.comp

// openDevice opens the default device with the validation layer (when
// installed), or skips t when this machine has no Vulkan. At cleanup it closes
// the device and fails t on any validation message.
func openDevice(t testing.TB) *Device {
	t.Helper()
	return openDeviceWith(t, InstanceOptions{Validation: true})
}

// openDeviceWith is openDevice with options: benchmarks run without the
// validation layer, whose checks would be timed too.
func openDeviceWith(t testing.TB, opts InstanceOptions) *Device {
	t.Helper()
	return openEdited(t, opts, nil)
}

func readSPIRV(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	return b
}

// axpyPush mirrors the push-constant block of testdata/axpy.comp.
type axpyPush struct {
	N     uint32
	Scale float32
}

func newAxpy(t testing.TB, dev *Device, localSize uint32, scale2 float32) *Kernel {
	t.Helper()
	k, err := dev.NewKernel(readSPIRV(t, "axpy.spv"), KernelSpec{Name: "axpy", Bindings: 2, PushConstantBytes: 8,
		Specialization: []uint32{localSize, math.Float32bits(scale2)}})
	require.NoError(t, err)
	t.Cleanup(k.Close)
	return k
}

func f32bytes(x []float32) []byte {
	b := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return b
}

func bytesF32(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

func newBuffer(t testing.TB, dev *Device, n uint64, kind BufferKind) *Buffer {
	t.Helper()
	b, err := dev.NewBuffer(n, kind)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func TestAxpySpirvIsFresh(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("glslc is not installed (Debian: glslc): cannot check testdata/axpy.spv")
	}
	out := filepath.Join(t.TempDir(), "axpy.spv")
	cmd := exec.Command(glslc, "--target-env=vulkan1.2", "-O", "-o", out, "testdata/axpy.comp")
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	fresh, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(fresh, readSPIRV(t, "axpy.spv")), "testdata/axpy.spv is stale: run go generate ./vk")
}

func TestDevicesListed(t *testing.T) {
	dev := openDevice(t)
	info := dev.Info()
	t.Logf("device %d: %s (%s), driver %s %s, Vulkan %s", info.Index, info.Name, info.Type, info.DriverName, info.DriverInfo, info.APIVersion)
	t.Logf("limits: %+v", info.Limits)
	t.Logf("features: %+v", info.Features)
	assert.NotEmpty(t, info.Name)
	assert.GreaterOrEqual(t, info.APIVersion, MinAPI)
	assert.Empty(t, info.Problem)
	lim := info.Limits
	// Vulkan's required minimums: a device below them is misreported.
	assert.GreaterOrEqual(t, lim.MaxComputeSharedMemorySize, uint32(16384))
	assert.GreaterOrEqual(t, lim.MaxComputeWorkGroupInvocations, uint32(128))
	assert.GreaterOrEqual(t, lim.MaxStorageBufferRange, uint64(1<<27))
	assert.GreaterOrEqual(t, lim.MaxPushConstantsSize, uint32(128))
	assert.GreaterOrEqual(t, lim.MaxComputeWorkGroupCount[0], uint32(65535))
	assert.NotZero(t, lim.MinStorageBufferOffsetAlignment)
	assert.NotZero(t, lim.SubgroupSize)
}

func TestUploadDownload(t *testing.T) {
	dev := openDevice(t)
	for _, kind := range []BufferKind{DeviceLocal, HostVisible} {
		t.Run(kind.String(), func(t *testing.T) {
			// 17 MiB + 6 bytes crosses the 16 MiB staging chunk and is not a multiple of 4.
			n := uint64(stagingBytes + 1<<20 + 6)
			buf := newBuffer(t, dev, n, kind)
			assert.Equal(t, n+2, buf.Size(), "rounded up to 4")
			data := make([]byte, n)
			for i := range data {
				data[i] = byte(i*7 + i>>11)
			}
			require.NoError(t, buf.Upload(data, 0))
			got := make([]byte, n)
			require.NoError(t, buf.Download(got, 0))
			require.True(t, bytes.Equal(data, got), "round trip")

			// A part, at an odd offset.
			require.NoError(t, buf.Upload([]byte{1, 2, 3}, 5))
			part := make([]byte, 5)
			require.NoError(t, buf.Download(part, 4))
			assert.Equal(t, []byte{data[4], 1, 2, 3, data[8]}, part)

			err := buf.Upload(make([]byte, 8), buf.Size()-4)
			assert.ErrorContains(t, err, "outside the")
		})
	}
}

func TestDispatchReplaySpecialization(t *testing.T) {
	dev := openDevice(t)
	const n = 1000              // not a multiple of the workgroup size
	k := newAxpy(t, dev, 64, 2) // y += scale * 2 * x
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i)
	}
	xb := newBuffer(t, dev, 4*n, DeviceLocal)
	yb := newBuffer(t, dev, 4*n, DeviceLocal)
	require.NoError(t, xb.Upload(f32bytes(x), 0))

	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Fill(yb, 0, 4*n, math.Float32bits(1))
	rec.Dispatch(k, MustPackPush(axpyPush{N: n, Scale: 0.5}), [3]uint32{(n + 63) / 64, 1, 1},
		Bind{Buf: xb, Access: Read}, Bind{Buf: yb, Access: ReadWrite})
	rec.Dispatch(k, MustPackPush(axpyPush{N: n, Scale: 0.25}), [3]uint32{(n + 63) / 64, 1, 1},
		Bind{Buf: xb, Access: Read}, Bind{Buf: yb, Access: ReadWrite})
	require.NoError(t, rec.Err())

	before := dev.Stats()
	const runs = 3
	for r := 0; r < runs; r++ {
		require.NoError(t, dev.Run(rec))
		got := make([]byte, 4*n)
		require.NoError(t, yb.Download(got, 0))
		y := bytesF32(got)
		for i := range y {
			want := 1 + 2*0.5*x[i] + 2*0.25*x[i] // the Fill resets y each run
			if y[i] != want {
				t.Fatalf("run %d: y[%d] = %v, want %v", r, i, y[i], want)
			}
		}
	}
	s := rec.Stats()
	assert.Equal(t, 1, s.Recordings, "recorded once")
	assert.Equal(t, runs, s.Submits, "replayed")
	assert.Equal(t, 2, s.Dispatches)
	assert.Zero(t, s.Indirect, "both direct")
	assert.Equal(t, 2, s.Barriers, "fill -> dispatch (RAW), dispatch -> dispatch (RAW+WAW on y)")
	after := dev.Stats()
	assert.Equal(t, 1, after.Recordings-before.Recordings)
	assert.Equal(t, runs+runs, after.Submits-before.Submits, "each run, and each Download's staging copy")

	// Sealed: adding to a submitted recorder is an error, reported by Run.
	rec.Fill(yb, 0, 4, 0)
	assert.ErrorContains(t, dev.Run(rec), "already submitted")
}

// TestSyncValidationSeesDroppedBarriers shows that the validation the tests
// run under would catch a missing barrier: the same commands, recorded with
// their derived barriers dropped, are reported as hazards.
func TestSyncValidationSeesDroppedBarriers(t *testing.T) {
	dev := openDevice(t)
	if !dev.inst.Validating() || !hasSyncValidation() {
		t.Skip("synchronization validation is not available (Debian: vulkan-validationlayers)")
	}
	const n = 256
	k := newAxpy(t, dev, 64, 1)
	xb := newBuffer(t, dev, 4*n, DeviceLocal)
	yb := newBuffer(t, dev, 4*n, DeviceLocal)
	record := func(drop bool) *Recorder {
		rec := dev.NewRecorder()
		rec.dropBarriers = drop
		rec.Fill(xb, 0, 4*n, 0)
		rec.Fill(yb, 0, 4*n, 0)
		rec.Dispatch(k, MustPackPush(axpyPush{N: n, Scale: 1}), [3]uint32{n / 64, 1, 1},
			Bind{Buf: xb, Access: Read}, Bind{Buf: yb, Access: ReadWrite})
		rec.Copy(yb, xb, 0, 0, 4*n)
		return rec
	}
	good := record(false)
	defer good.Close()
	require.NoError(t, dev.Run(good))
	assert.Empty(t, dev.inst.ValidationMessages(), "derived barriers: no hazard")
	assert.Equal(t, 2, good.Stats().Barriers, "fill -> dispatch (RAW x, RAW/WAW y); dispatch -> copy (RAW y, WAR x)")

	bad := record(true)
	defer bad.Close()
	require.NoError(t, dev.Run(bad))
	msgs := dev.inst.ValidationMessages()
	require.NotEmpty(t, msgs, "dropped barriers must be reported")
	for _, m := range msgs {
		assert.Contains(t, m, "SYNC-HAZARD")
	}
	t.Logf("%d hazards reported, the first: %.200s", len(msgs), msgs[0])
}

func TestIndirectDispatchAndHostVisible(t *testing.T) {
	dev := openDevice(t)
	const n = 256
	k := newAxpy(t, dev, 32, 1)
	args := newBuffer(t, dev, 16, DeviceLocal)
	argsHost := newBuffer(t, dev, 12, HostVisible)
	xb := newBuffer(t, dev, 4*n, HostVisible)
	yb := newBuffer(t, dev, 4*n, HostVisible)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i) + 0.5
	}
	require.NoError(t, xb.Upload(f32bytes(x), 0))
	require.NoError(t, yb.Upload(make([]byte, 4*n), 0))
	// 4 workgroups of 32: only the first 128 elements are touched.
	require.NoError(t, argsHost.Upload(f32bytesU32(4, 1, 1), 0))

	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Copy(argsHost, args, 0, 4, 12)
	rec.DispatchIndirect(k, MustPackPush(axpyPush{N: n, Scale: 1}), args, 4,
		Bind{Buf: xb, Access: Read}, Bind{Buf: yb, Access: ReadWrite})
	require.NoError(t, dev.Run(rec))
	assert.Equal(t, 1, rec.Stats().Barriers, "copy -> indirect read")
	assert.Equal(t, 1, rec.Stats().Indirect, "the dispatch is indirect")
	got := make([]byte, 4*n)
	require.NoError(t, yb.Download(got, 0))
	y := bytesF32(got)
	for i := range y {
		want := float32(0)
		if i < 128 {
			want = x[i]
		}
		require.Equal(t, want, y[i], "y[%d]", i)
	}
}

// TestConditionalDispatch: dispatches inside a conditional span run when the
// GPU-written predicate is nonzero and are discarded when it is 0; a copy
// inside runs anyway. The predicate is copied from a host-visible buffer
// into place (offset 8) in the same recording (a barrier orders it before
// the span) and the recording is replayed with each value. Issue 46: this
// failed on NVIDIA (TestConditionalDiagnostic tells the causes apart).
func TestConditionalDispatch(t *testing.T) {
	dev := openDevice(t)
	if !dev.Info().Features.ConditionalRendering {
		rec := dev.NewRecorder()
		rec.BeginConditional(newBuffer(t, dev, 4, DeviceLocal), 0)
		assert.ErrorContains(t, rec.Err(), "no VK_EXT_conditional_rendering")
		t.Skipf("%s has no VK_EXT_conditional_rendering", dev.Info().Name)
	}
	const n = 64
	k := newAxpy(t, dev, 32, 1)
	xb, yb := newBuffer(t, dev, 4*n, DeviceLocal), newBuffer(t, dev, 4*n, DeviceLocal)
	copied := newBuffer(t, dev, 4, DeviceLocal)
	pred, predHost := newBuffer(t, dev, 16, DeviceLocal), newBuffer(t, dev, 4, HostVisible)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i) + 1
	}
	require.NoError(t, xb.Upload(f32bytes(x), 0))
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Fill(yb, 0, 4*n, 0)
	rec.Fill(copied, 0, 4, 0)
	rec.Copy(predHost, pred, 0, 8, 4) // the predicate, at an offset
	rec.BeginConditional(pred, 8)
	rec.Dispatch(k, MustPackPush(axpyPush{N: n, Scale: 1}), [3]uint32{n / 32, 1, 1},
		Bind{Buf: xb, Access: Read}, Bind{Buf: yb, Access: ReadWrite})
	rec.Copy(xb, copied, 0, 0, 4)
	rec.EndConditional()
	for _, p := range []uint32{1, 0, 7, 0} {
		require.NoError(t, predHost.Upload(f32bytesU32(p), 0))
		require.NoError(t, dev.Run(rec))
		got := make([]byte, 4*n)
		require.NoError(t, yb.Download(got, 0))
		y := bytesF32(got)
		for i := range y {
			want := float32(0)
			if p != 0 {
				want = x[i]
			}
			require.Equal(t, want, y[i], "predicate %d: y[%d]", p, i)
		}
		c := make([]byte, 4)
		require.NoError(t, copied.Download(c, 0))
		assert.Equal(t, x[0], bytesF32(c)[0], "predicate %d: a copy is not conditional", p)
	}

	bad := dev.NewRecorder()
	bad.BeginConditional(pred, 2)
	assert.ErrorContains(t, bad.Err(), "multiple of 4")
	nested := dev.NewRecorder()
	nested.BeginConditional(pred, 0)
	nested.BeginConditional(pred, 4)
	assert.ErrorContains(t, nested.Err(), "do not nest")
	open := dev.NewRecorder()
	open.BeginConditional(pred, 0)
	assert.ErrorContains(t, dev.Run(open), "never ended")
	open.Close()
	unopened := dev.NewRecorder()
	unopened.EndConditional()
	assert.ErrorContains(t, unopened.Err(), "without BeginConditional")
}

func f32bytesU32(v ...uint32) []byte {
	b := make([]byte, 4*len(v))
	for i, u := range v {
		binary.LittleEndian.PutUint32(b[4*i:], u)
	}
	return b
}

func TestTimestamps(t *testing.T) {
	dev := openDevice(t)
	if !dev.Info().Timestamps() {
		t.Skipf("%s cannot write timestamps on its compute queue", dev.Info().Name)
	}
	const n = 1 << 16
	k := newAxpy(t, dev, 64, 1)
	xb := newBuffer(t, dev, 4*n, DeviceLocal)
	yb := newBuffer(t, dev, 4*n, DeviceLocal)
	rec := dev.NewRecorder()
	defer rec.Close()
	rec.Fill(xb, 0, 4*n, 0)
	rec.Fill(yb, 0, 4*n, 0)
	rec.Timestamp("fill")
	for i := 0; i < 4; i++ {
		rec.Dispatch(k, MustPackPush(axpyPush{N: n, Scale: 1}), [3]uint32{n / 64, 1, 1},
			Bind{Buf: xb, Access: Read}, Bind{Buf: yb, Access: ReadWrite})
	}
	rec.Timestamp("axpy x4")
	assert.Nil(t, rec.Timings(), "before a run")
	require.NoError(t, dev.Run(rec))
	tm := rec.Timings()
	require.Len(t, tm, 2)
	assert.Equal(t, "fill", tm[0].Label)
	assert.Equal(t, "axpy x4", tm[1].Label)
	assert.Greater(t, tm[1].NS, 0.0)
	t.Logf("timings: %+v", tm)
}

func TestRecorderErrors(t *testing.T) {
	dev := openDevice(t)
	k := newAxpy(t, dev, 64, 1)
	buf := newBuffer(t, dev, 1024, DeviceLocal)
	align := dev.Info().Limits.MinStorageBufferOffsetAlignment
	push := MustPackPush(axpyPush{N: 1})
	cases := []struct {
		name string
		rec  func(r *Recorder)
		want string
	}{
		{"push size", func(r *Recorder) {
			r.Dispatch(k, push[:4], [3]uint32{1, 1, 1}, Bind{Buf: buf, Access: Read}, Bind{Buf: buf, Access: Write})
		}, "4 bytes of push constants, the kernel takes 8"},
		{"bindings", func(r *Recorder) { r.Dispatch(k, push, [3]uint32{1, 1, 1}, Bind{Buf: buf, Access: Read}) }, "1 bindings, the kernel has 2"},
		{"no access", func(r *Recorder) {
			r.Dispatch(k, push, [3]uint32{1, 1, 1}, Bind{Buf: buf}, Bind{Buf: buf, Access: Write})
		}, "want Read, Write or ReadWrite"},
		{"range", func(r *Recorder) {
			r.Dispatch(k, push, [3]uint32{1, 1, 1}, Bind{Buf: buf, Access: Read, Size: 2048}, Bind{Buf: buf, Access: Write})
		}, "outside the 1024-byte buffer"},
		{"fill alignment", func(r *Recorder) { r.Fill(buf, 2, 4, 0) }, "multiples of 4"},
		{"overlapping copy", func(r *Recorder) { r.Copy(buf, buf, 0, 8, 16) }, "overlapping"},
	}
	if align > 1 {
		cases = append(cases, struct {
			name string
			rec  func(r *Recorder)
			want string
		}{"offset alignment", func(r *Recorder) {
			r.Dispatch(k, push, [3]uint32{1, 1, 1}, Bind{Buf: buf, Offset: align / 2, Access: Read}, Bind{Buf: buf, Access: Write})
		}, "minStorageBufferOffsetAlignment"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := dev.NewRecorder()
			defer r.Close()
			c.rec(r)
			r.Fill(buf, 0, 4, 0) // ignored after the error
			assert.ErrorContains(t, r.Err(), c.want)
			assert.ErrorContains(t, dev.Run(r), c.want)
		})
	}
}

func TestNewKernelRejectsBadSPIRV(t *testing.T) {
	dev := openDevice(t)
	_, err := dev.NewKernel([]byte("not spir-v at all"), KernelSpec{Name: "junk"})
	assert.ErrorContains(t, err, `kernel "junk": not a SPIR-V module`)
	_, err = dev.NewKernel(readSPIRV(t, "axpy.spv"), KernelSpec{Name: "big", PushConstantBytes: 1 << 20})
	assert.ErrorContains(t, err, "maxPushConstantsSize")
}

// BenchmarkDispatch measures what a dispatch costs beyond its work: tiny
// kernels (one workgroup) recorded 64 to a command buffer, independent (no
// barriers) or chained (a barrier before each), and an almost empty submit.
func BenchmarkDispatch(b *testing.B) {
	dev := openDeviceWith(b, InstanceOptions{})
	const perRun, n = 64, 64
	k := newAxpy(b, dev, 64, 1)
	xb := newBuffer(b, dev, 4*n, DeviceLocal)
	yb := newBuffer(b, dev, 4*n*perRun, DeviceLocal)
	push := MustPackPush(axpyPush{N: n, Scale: 1})
	for _, chained := range []bool{false, true} {
		name := "independent"
		if chained {
			name = "chained"
		}
		b.Run(name, func(b *testing.B) {
			rec := dev.NewRecorder()
			defer rec.Close()
			rec.Fill(xb, 0, 4*n, 0)
			rec.Fill(yb, 0, yb.Size(), 0)
			for i := 0; i < perRun; i++ {
				y := Bind{Buf: yb, Offset: uint64(4 * n * i), Size: 4 * n, Access: ReadWrite}
				if chained {
					y.Offset = 0
				}
				rec.Dispatch(k, push, [3]uint32{1, 1, 1}, Bind{Buf: xb, Access: Read}, y)
			}
			require.NoError(b, dev.Run(rec))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := dev.Run(rec); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(b.Elapsed().Seconds()/float64(b.N*perRun)*1e6, "us/dispatch")
			b.ReportMetric(float64(rec.Stats().Barriers), "barriers/run")
		})
	}
	b.Run("submit", func(b *testing.B) {
		rec := dev.NewRecorder()
		defer rec.Close()
		rec.Fill(xb, 0, 4, 0)
		for i := 0; i < b.N; i++ {
			if err := dev.Run(rec); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)*1e6, "us/submit")
	})
}
