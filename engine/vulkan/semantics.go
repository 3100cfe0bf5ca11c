package vulkan

import (
	"fmt"
	"strings"

	"github.com/modrun/modrun/mod"
)

// checkSemantics refuses to generate with a model whose routed blocks
// compute something other than DESIGN.md §3 (the mod.* semantics keys of
// converted public MoD checkpoints): eval mode (Evaluator) runs every
// variant, but the causal step's kernels do not implement them yet, and a
// wrong answer must not pass for a fast one. --backend auto then generates
// on the CPU.
func checkSemantics(m *mod.Model) error {
	if s := m.Config.Semantics(); len(s) > 0 {
		return fmt.Errorf("vulkan: %s: routed blocks with %s generate on the CPU only (eval mode runs on Vulkan)", m.Path, strings.Join(s, ", "))
	}
	return nil
}
