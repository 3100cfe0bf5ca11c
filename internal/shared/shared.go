// Package shared locates the project's shared data folder (../shared/data
// beside the checkout, or $MODRUN_SHARED_DATA) for tests, and skips a test
// with a reason when the data is absent, so a user's clone still passes.
package shared

import (
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// Dir is the shared data folder: $MODRUN_SHARED_DATA if set, else
// ../shared/data relative to the repository root.
func Dir() string {
	if d := os.Getenv("MODRUN_SHARED_DATA"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0) // .../internal/shared/shared.go
	root := filepath.Dir(filepath.Dir(filepath.Dir(file)))
	return filepath.Join(filepath.Dir(root), "shared", "data")
}

// Path returns the path of a file under the shared data folder, or skips t
// when that file does not exist.
func Path(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Dir(), rel)
	if _, err := os.Stat(p); err != nil {
		t.Skipf("shared data %s is absent (set MODRUN_SHARED_DATA or place ../shared/data beside the checkout): %v", rel, err)
	}
	return p
}

// Greedy is models/stories260K_greedy200_ids.json: 200 greedy ids after
// BOS from an independent numpy float32 llama2.c, and the logits (rounded
// to 5 decimals) after BOS and after each of the first 3 ids.
type Greedy struct {
	BOS    int32       `json:"bos"`
	IDs    []int32     `json:"greedy_token_ids"`
	Logits [][]float32 `json:"logits"`
}

// Stories260KGreedy reads the greedy vector (Greedy), or skips t when it is
// absent.
func Stories260KGreedy(t testing.TB) Greedy {
	t.Helper()
	raw, err := os.ReadFile(Path(t, "models/stories260K_greedy200_ids.json"))
	require.NoError(t, err)
	var g Greedy
	require.NoError(t, json.Unmarshal(raw, &g))
	require.Len(t, g.IDs, 200)
	require.Len(t, g.Logits, 4)
	return g
}
