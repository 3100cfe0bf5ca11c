package vk_test

import (
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/modrun/modrun/vk/vktest"
	"github.com/stretchr/testify/require"
)

// statsOf is stats by name.
func statsOf(stats []vk.KernelStatistic) map[string]float64 {
	m := map[string]float64{}
	for _, s := range stats {
		m[s.Name] = s.Value
	}
	return m
}

// TestKernelStatisticsRADV compiles a kernel with AMD's compiler on RADV's
// null RDNA3 device and reads what it used: the statistics come from the
// driver, not from this package, so a kernel that needs more registers
// must report more.
func TestKernelStatisticsRADV(t *testing.T) {
	if !vktest.OnNullRADV(t, "gfx1100") {
		return
	}
	dev := vktest.Open(t, vk.InstanceOptions{KernelStatistics: true})
	require.True(t, dev.Info().Features.PipelineExecutableInfo, "RADV offers VK_KHR_pipeline_executable_properties")
	small := statsOf(kernelStats(t, dev))
	require.Contains(t, small, "VGPRs")
	require.Contains(t, small, "Spilled VGPRs")
	require.Positive(t, small["VGPRs"])
	require.Zero(t, small["Spilled VGPRs"])
	t.Logf("axpy: %v", small)
}

// TestKernelStatisticsAbsent: a device opened without asking for them, or
// one whose driver does not keep them, says so by name.
func TestKernelStatisticsAbsent(t *testing.T) {
	dev := vktest.Open(t, vk.InstanceOptions{})
	_, err := axpyKernel(t, dev).Statistics()
	require.ErrorContains(t, err, "InstanceOptions.KernelStatistics")
	require.ErrorContains(t, err, dev.Info().Name)
}

func kernelStats(t *testing.T, dev *vk.Device) []vk.KernelStatistic {
	t.Helper()
	s, err := axpyKernel(t, dev).Statistics()
	require.NoError(t, err)
	return s
}

// axpyKernel is testdata/axpy.comp's kernel (workgroups of 64).
func axpyKernel(t *testing.T, dev *vk.Device) *vk.Kernel {
	t.Helper()
	spirv, err := os.ReadFile(filepath.Join("testdata", "axpy.spv"))
	require.NoError(t, err)
	k, err := dev.NewKernel(spirv, vk.KernelSpec{Name: "axpy", Bindings: 2, PushConstantBytes: 8,
		Specialization: []uint32{64, math.Float32bits(1)}})
	require.NoError(t, err)
	t.Cleanup(k.Close)
	return k
}
