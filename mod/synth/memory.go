package synth

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// availableMemory is the memory the machine can give without swapping
// (Linux's MemAvailable), or 0 when unknown. A variable, for tests.
var availableMemory = func() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:"); ok {
			kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// checkFits refuses a model whose file would not fit in the memory the
// machine has free: a clear error instead of the Go runtime's fatal
// out-of-memory when a shape is mistyped (d=65536 with vocab=2^20).
func checkFits(name string, bytes uint64) error {
	if avail := availableMemory(); avail > 0 && bytes > avail {
		return fmt.Errorf("synth: %s needs %s in memory, more than the %s this machine has available", name, human(bytes), human(avail))
	}
	return nil
}

func human(n uint64) string {
	if n < 1<<30 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
}
