package server

import (
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"testing"

	"github.com/modrun/modrun"
	"github.com/modrun/modrun/gguf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestIgnoreEOS: llama.cpp's ignore_eos (which benchmark tools send) lets
// generation run past EOS to max_tokens, whether the sessions take turns
// or share steps. The shipped model never draws its EOS greedily, so the
// test copies it with EOS set to the sixth token of a greedy answer: the
// answer then stops there, and with ignore_eos goes on as it did.
func TestIgnoreEOS(t *testing.T) {
	ids, _ := greedy(t, "Once upon a time", 12)
	const eosAt = 5
	require.NotContains(t, ids[:eosAt], ids[eosAt], "the EOS stand-in must not come earlier")
	path := withEOS(t, ids[eosAt])
	turns, err := modrun.Open(path, modrun.Options{Backend: modrun.BackendCPU})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, turns.Close()) })
	batched, err := modrun.Open(path, modrun.Options{Backend: modrun.BackendCPU, Parallel: 2})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, batched.Close()) })
	for _, c := range []struct {
		name string
		m    *modrun.Model
	}{{"turns", turns}, {"shared steps", batched}} {
		t.Run(c.name, func(t *testing.T) {
			_, hs := testServerOn(t, c.m, Config{})
			complete := func(extra string) (string, string, int) {
				status, out := post(t, hs.URL+"/v1/completions", `{"prompt":"Once upon a time","max_tokens":12,"temperature":0`+extra+`}`)
				require.Equal(t, http.StatusOK, status, "%v", out)
				ch := out["choices"].([]any)[0].(map[string]any)
				return ch["text"].(string), ch["finish_reason"].(string), int(out["usage"].(map[string]any)["completion_tokens"].(float64))
			}
			stopped, reason, n := complete("")
			assert.Equal(t, "stop", reason, "EOS ends it")
			assert.Equal(t, eosAt, n)
			for _, v := range []string{"true", "false"} {
				text, reason, n := complete(`,"ignore_eos":` + v)
				if v == "false" {
					assert.Equal(t, "stop", reason)
					assert.Equal(t, eosAt, n)
					continue
				}
				assert.Equal(t, "length", reason, "ignore_eos: max_tokens ends it")
				assert.Equal(t, 12, n)
				assert.True(t, len(text) > len(stopped) && text[:len(stopped)] == stopped, "%q goes on from %q", text, stopped)
			}
			status, out := post(t, hs.URL+"/v1/completions", `{"prompt":"x","ignore_eos":1}`)
			assert.Equal(t, http.StatusBadRequest, status)
			assert.Equal(t, "ignore_eos", out["error"].(map[string]any)["param"], "a wrong type names the field")
		})
	}
}

// withEOS is the shipped model with tokenizer.ggml.eos_token_id set to id.
func withEOS(t *testing.T, id int32) string {
	t.Helper()
	src, err := gguf.Open(shipped)
	require.NoError(t, err)
	defer src.Close()
	w := gguf.NewWriter()
	i := slices.IndexFunc(src.KVs, func(kv gguf.KV) bool { return kv.Key == "tokenizer.ggml.eos_token_id" })
	require.GreaterOrEqual(t, i, 0, "the shipped model names its EOS")
	for _, kv := range src.KVs {
		if kv.Key == "tokenizer.ggml.eos_token_id" {
			kv.Value = gguf.Scalar(uint32(id))
		}
		require.NoError(t, w.SetKV(kv.Key, kv.Value))
	}
	for _, ti := range src.Tensors {
		data, err := src.TensorData(ti.Name)
		require.NoError(t, err)
		require.NoError(t, w.AddTensor(ti.Name, ti.Type, ti.Dims, data))
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("tinystories-mod-eos%d.gguf", id))
	require.NoError(t, w.WriteFile(path))
	return path
}
