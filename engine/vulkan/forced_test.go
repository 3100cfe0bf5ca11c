package vulkan

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// forcedDevices are the smaller devices the forced-feature and
// forced-limit matrix makes of this one (vktest.Restriction): every optional
// feature off in turn, each limit at the value small GPUs have (Vulkan's
// minimum 16 KiB of shared memory; 256 invocations; a 128 MiB binding; a
// 256-byte storage offset alignment, as on many NVIDIA and AMD GPUs), and
// all of them at once.
var forcedDevices = []struct {
	name string
	r    vktest.Restriction
}{
	{"as-is", vktest.Restriction{}},
	{"no-float16", vktest.Restriction{Off: []string{"shader_float16"}}},
	{"no-int8", vktest.Restriction{Off: []string{"shader_int8"}}},
	{"no-16bit-storage", vktest.Restriction{Off: []string{"storage_buffer_16bit_access"}}},
	{"no-8bit-storage", vktest.Restriction{Off: []string{"storage_buffer_8bit_access"}}},
	{"no-subgroup-arithmetic", vktest.Restriction{Off: []string{"subgroup_arithmetic"}}},
	{"no-subgroup-size-control", vktest.Restriction{Off: []string{"subgroup_size_control"}}},
	{"no-conditional-rendering", vktest.Restriction{Off: []string{"conditional_rendering"}}},
	{"no-timestamps", vktest.Restriction{Off: []string{"timestamps"}}},
	{"shared-16KiB", vktest.Restriction{MaxComputeSharedMemorySize: 16 << 10}},
	{"invocations-256", vktest.Restriction{MaxComputeWorkGroupInvocations: 256}},
	{"binding-128MiB", vktest.Restriction{MaxStorageBufferRange: 128 << 20}},
	{"align-256", vktest.Restriction{MinStorageBufferOffsetAlignment: 256}},
	{"minimal", vktest.Restriction{Off: vktest.RestrictableFeatures(), MaxComputeSharedMemorySize: 16 << 10,
		MaxComputeWorkGroupInvocations: 256, MaxStorageBufferRange: 128 << 20, MinStorageBufferOffsetAlignment: 256}},
}

// forcedProfiles are the profiles the matrix runs on a (restricted) device:
// its own, and a GPU's made from the same facts (subgroup kernels only
// where the facts allow them, fused and split attention, GPU
// specializations), with lavapipe's loop cap kept since the device still
// has it.
func forcedProfiles(dev *vk.Device) map[string]*shaders.Profile {
	own, gpu := DeviceProfile(dev.Info()), gpuProfileOf(dev)
	return map[string]*shaders.Profile{"own": &own, "gpu": &gpu}
}

// TestForcedDevices is the forced-feature and forced-limit matrix: on each
// smaller device, under each profile, every kernel the engine picks is
// made (none needs what the device lacks: kernels.get refuses one that
// does) and the decode steps, a batched prefill and eval mode equal the
// CPU reference within F32 tolerance. What is off shows where it should:
// no subgroup kernel without subgroup arithmetic or a sure size, no
// conditional span without conditional rendering, no timing without
// timestamps.
func TestForcedDevices(t *testing.T) {
	if testing.Short() {
		t.Skip("the forced-device matrix runs the model on 14 devices: not in -short")
	}
	m := openModel(t, "../../testdata/mod/mod-trained.gguf")
	tokens := fixtureTokens(t, "../../testdata/mod/mod-trained.fixture.json")["generate-router"]
	tokens = tokens[:min(len(tokens), 12)] // the routing of the first 12 already takes both decisions in each layer
	pred := openModel(t, "../../testdata/mod/mod-rand-sigmoid-pred.gguf")
	predTokens := fixtureTokens(t, "../../testdata/mod/mod-rand-sigmoid-pred.fixture.json")["generate-predictor"]
	for _, fd := range forcedDevices {
		t.Run(fd.name, func(t *testing.T) {
			dev := vktest.OpenRestricted(t, vk.InstanceOptions{Validation: true}, fd.r)
			info := dev.Info()
			for pname, prof := range forcedProfiles(dev) {
				t.Run(pname, func(t *testing.T) {
					opts := Options{DeviceProfile: prof, KVType: "f32", Profile: true}
					checkAgainstCPUWith(t, dev, m, mod.RoutingRouter, tokens, opts)
					checkPrefill(t, dev, pred, mod.RoutingPredictor, predTokens, opts)

					run, err := New(dev, m, mod.RoutingRouter, opts)
					require.NoError(t, err)
					defer run.Close()
					_, err = run.Feed(tokens[:2])
					require.NoError(t, err)
					assert.Equal(t, info.Features.ConditionalRendering, run.conditional, "conditional spans exactly where the device has them")
					assert.Equal(t, info.Timestamps(), run.Profile() != nil, "GPU timing exactly where the device has timestamps")
					for key, k := range run.ks.made {
						nd, err := k.v.Needs(k.spec)
						require.NoError(t, err)
						l := info.Limits
						assert.LessOrEqual(t, nd.SharedBytes, l.MaxComputeSharedMemorySize, key)
						assert.LessOrEqual(t, nd.Invocations, l.MaxComputeWorkGroupInvocations, key)
						if nd.Subgroups {
							assert.True(t, info.Features.SubgroupArithmetic, "%s: subgroup kernel without subgroup arithmetic", key)
							assert.NotZero(t, prof.SubgroupSize, key)
						}
					}

					e, err := NewEvaluator(dev, m, Options{DeviceProfile: prof})
					require.NoError(t, err)
					defer e.Close()
					got, err := e.Eval(tokens)
					require.NoError(t, err)
					want, _ := cpuEval(t, m, tokens)
					assert.Empty(t, closeErr(want, got, tolF32.of(want)), "eval logits")
				})
			}
		})
	}
}

// checkPrefill feeds tokens to a runner in one batched chunk and then one
// by one, each time against the CPU reference fed the same.
func checkPrefill(t *testing.T, dev *vk.Device, m *mod.Model, routing mod.Routing, tokens []int32, opts Options) {
	t.Helper()
	run, err := New(dev, m, routing, opts)
	require.NoError(t, err)
	defer run.Close()
	cpu, err := m.NewState(routing)
	require.NoError(t, err)
	half := len(tokens) / 2
	for i, chunk := range [][]int32{tokens[:half], tokens[half : half+1], tokens[half+1:]} {
		want, err := cpu.Forward(chunk, false)
		require.NoError(t, err)
		got, err := run.Feed(chunk)
		require.NoError(t, err)
		require.Empty(t, closeErr(want, got, tolF32.of(want)), fmt.Sprintf("chunk %d (%d tokens)", i, len(chunk)))
	}
	assertCaches(t, cpu, run, tolF32)
}
