package bench

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/modrun/modrun/engine"
	"github.com/modrun/modrun/gguf"
	"github.com/modrun/modrun/internal/synthtest"
	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/vk"
)

// TestManyModelsOneInstance opens a tiny synthetic MoD model on Vulkan and
// closes it 100 times in one process, beside one model that stays open (a
// server's resident model while others reload): one Vulkan instance at
// most is created (none if an earlier test made it), where NVIDIA's driver
// refused vkCreateInstance after ~30 create/destroy cycles and every later
// open fell back or failed. The models share the resident one's VkDevice
// (creating one is slow on an H200; vk's TestDeviceCycles makes and
// destroys them). 100, not 1,000: an open costs ~35-110 ms on lavapipe
// (vk's TestOneInstancePerProcess opens 1,000 devices). The first and the
// last model still give the CPU's tokens, and every Close frees what its
// model held. (It is here, not in engine, for validate: the check that the
// models' logits are the CPU reference's.)
func TestManyModelsOneInstance(t *testing.T) {
	const opens = 100
	m := synthtest.Build(t, gguf.TypeF16, 0.25)
	ref, err := engine.NewCPU(m.Model, mod.RoutingRouter)
	require.NoError(t, err)
	prompt := []int32{1, 80, 111, 122, 259, 101}
	resident, _, err := engine.OpenBackend(m.Model, mod.RoutingRouter, engine.BackendOptions{Name: engine.BackendVulkan})
	if err != nil && strings.Contains(err.Error(), "no Vulkan") {
		t.Skipf("no Vulkan device: %v", err)
	}
	require.NoError(t, err)
	defer resident.Close()
	before, live, devices := vk.InstancesCreated(), vk.LiveObjects(), vk.DevicesCreated()
	var first int
	for i := 0; i < opens; i++ {
		b, _, err := engine.OpenBackend(m.Model, mod.RoutingRouter, engine.BackendOptions{Name: engine.BackendVulkan})
		require.NoError(t, err, "open %d", i)
		if i == 0 {
			first = vk.InstancesCreated()
		}
		if i == 0 || i == opens-1 {
			st, err := validate(b, ref, prompt, 4, tolFloat)
			require.NoError(t, err, "open %d", i)
			assert.Equal(t, 1.0, st.Top1Agreement, "open %d", i)
		}
		b.Close()
	}
	assert.LessOrEqual(t, first-before, 1, "the first open makes the instance, if no earlier test did")
	assert.Equal(t, first, vk.InstancesCreated(), "%d more opens made no instance", opens-1)
	assert.Equal(t, live, vk.LiveObjects(), "every Close freed its device and buffers")
	assert.Equal(t, devices, vk.DevicesCreated(), "the models shared the resident one's VkDevice")
	st, err := validate(resident, ref, prompt, 4, tolFloat)
	require.NoError(t, err)
	assert.Equal(t, 1.0, st.Top1Agreement, "the resident model works on")
}
