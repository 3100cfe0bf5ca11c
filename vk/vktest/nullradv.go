package vktest

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// EnvNullRADV names the GPU family (Mesa's RADV_FORCE_FAMILY: gfx1100 is
// RDNA3) in the child process OnNullRADV starts.
const EnvNullRADV = "MODRUN_NULL_RADV"

// radvICDs is where Debian's mesa-vulkan-drivers installs RADV's manifest.
const radvICDs = "/usr/share/vulkan/icd.d/radeon_icd.*.json"

// OnNullRADV runs the calling test again in a child process whose only
// Vulkan device is Mesa RADV's null device for family (RADV_FORCE_FAMILY,
// "gfx1100" for RDNA3): AMD's shader compiler (ACO) without an AMD GPU. It
// compiles pipelines, so their statistics are real (InstanceOptions.
// KernelStatistics), but runs nothing: it has no memory and no fence. In
// the child OnNullRADV returns true and the test goes on there; in the
// parent it waits for the child, fails t with the child's output when the
// child fails, and returns false. t is skipped where RADV is not
// installed (Debian: mesa-vulkan-drivers, which `make test` installs).
func OnNullRADV(t *testing.T, family string) bool {
	t.Helper()
	if got := os.Getenv(EnvNullRADV); got != "" {
		if got != family {
			t.Fatalf("vktest: this child process was started for RADV's %s, the test wants %s", got, family)
		}
		return true
	}
	icds, _ := filepath.Glob(radvICDs)
	if len(icds) == 0 {
		t.Skipf("Mesa's RADV driver is not installed (no %s; Debian: mesa-vulkan-drivers): no null %s device to compile on", radvICDs, family)
	}
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run", strings.Join(parts, "/"), "-test.count", "1", "-test.v")
	env := []string{EnvNullRADV + "=" + family, "RADV_FORCE_FAMILY=" + family, "VK_ICD_FILENAMES=" + strings.Join(icds, ":")}
	for _, kv := range os.Environ() {
		switch strings.SplitN(kv, "=", 2)[0] {
		case "VK_ICD_FILENAMES", "VK_DRIVER_FILES", "RADV_FORCE_FAMILY", "MODRUN_DEVICE", EnvNullRADV:
		default:
			env = append(env, kv)
		}
	}
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("on RADV's null %s device (%s): %v\n%s", family, strings.Join(cmd.Args, " "), err, out)
	}
	t.Logf("on RADV's null %s device:\n%s", family, out)
	return false
}
