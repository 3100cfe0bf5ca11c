package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/modrun/modrun/engine/vulkan"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// devices --check prints, under each usable device, a row per kernel
// variant (kernel, variant, pass, us per call), every one passing here;
// --json carries the same rows.
func TestDevicesCheck(t *testing.T) {
	needVulkan(t)
	code, out, stderr := modrun(t, "devices", "--check")
	require.Equal(t, 0, code, stderr)
	require.Regexp(t, `(?m)^    check:\n      kernel +variant +result +us/call$`, out)
	rows := regexp.MustCompile(`(?m)^      (matvec|router|routing|attention|matmul) .+$`).FindAllString(out, -1)
	assert.GreaterOrEqual(t, len(rows), 50, "a row per matvec type and fusion, and the routing kernels")
	for _, row := range rows {
		assert.Regexp(t, ` pass +\d+\.\d$`, row)
	}
	assert.Contains(t, out, "matvec q4_k norm swiglu")
	assert.Contains(t, out, "routing decision")

	code, out, stderr = modrun(t, "devices", "--check", "--json")
	require.Equal(t, 0, code, stderr)
	var r struct {
		Devices []struct {
			Checks []vulkan.SelfCheck `json:"checks"`
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.NotEmpty(t, r.Devices)
	require.Len(t, r.Devices[0].Checks, len(rows))
	for _, c := range r.Devices[0].Checks {
		assert.True(t, c.Pass, c.Kernel)
		assert.Positive(t, c.USPerCall, c.Kernel)
	}

	code, out, _ = modrun(t, "devices")
	require.Equal(t, 0, code)
	assert.NotContains(t, out, "check:", "no check without --check")
}

// A failed check is in the table with how far off it was, and makes the
// exit status 1 with a line naming the device.
func TestDevicesCheckFailure(t *testing.T) {
	r := devicesReport{Devices: []deviceReport{{DeviceInfo: vk.DeviceInfo{Index: 1, Name: "Some GPU", DeviceLocalBytes: 8 << 30}, Checks: []vulkan.SelfCheck{
		{Op: "matvec q8_0", Kernel: "matvec_q8_0_sg", Spec: []uint32{128, 32, 1}, Subgroup: 32, Pass: true, USPerCall: 3.5},
		{Op: "matvec q8_0 add", Kernel: "matvec_q8_0_sg_add", Spec: []uint32{128, 32, 1}, Subgroup: 32, Worst: 412, USPerCall: 3.6},
		{Op: "router score", Kernel: "router_score_sg", Spec: []uint32{128, 32}, Err: "vkCreateComputePipelines: VK_ERROR_UNKNOWN"},
	}}}}
	var sb strings.Builder
	require.NoError(t, r.writeText(&sb))
	out := sb.String()
	assert.Regexp(t, `(?m)^      matvec q8_0 +matvec_q8_0_sg\[128 32 1\] subgroup 32 +pass +3\.5$`, out)
	assert.Regexp(t, `(?m)^      matvec q8_0 add +matvec_q8_0_sg_add\[128 32 1\] subgroup 32 +FAIL: 412 times its tolerance off the CPU +3\.6$`, out)
	assert.Contains(t, out, "FAIL: vkCreateComputePipelines: VK_ERROR_UNKNOWN")
	err := r.checkFailures()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device 1 (Some GPU): 2 of 3 kernels failed")
	assert.Contains(t, err.Error(), "please report this output")
	r.Devices[0].Checks = r.Devices[0].Checks[:1]
	assert.NoError(t, r.checkFailures())

	// A device without memory (RADV's null device) fails every kernel by
	// its allocation: said as such, not as a GPU to report.
	r.Devices[0].DeviceLocalBytes = 0
	r.Devices[0].Checks = append(r.Devices[0].Checks, vulkan.SelfCheck{Op: "matvec f32", Kernel: "matvec_f32_sg",
		Err: "host-visible buffer of 22528 bytes: vk: vkAllocateMemory (no suitable memory type): VK_ERROR_FEATURE_NOT_PRESENT"})
	err = r.checkFailures()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "it has no device memory, so nothing runs there")
	assert.NotContains(t, err.Error(), "please report")
}
