package vulkan

import (
	"fmt"
	"strings"

	"github.com/modrun/modrun/mod"
)

// checkSemantics refuses a model whose routed blocks compute something
// other than DESIGN.md §3 (the mod.* semantics keys of converted public MoD
// checkpoints): the kernels do not implement those variants yet, and a
// wrong answer must not pass for a fast one. --backend auto then runs it on
// the CPU.
func checkSemantics(m *mod.Model) error {
	if s := m.Config.Semantics(); len(s) > 0 {
		return fmt.Errorf("vulkan: %s: routed blocks with %s run on the CPU only", m.Path, strings.Join(s, ", "))
	}
	return nil
}
