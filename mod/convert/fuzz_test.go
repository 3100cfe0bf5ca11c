package convert

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The checkpoint readers take files from anywhere, so they are fuzzed as the
// GGUF and tokenizer parsers are: no input may panic, hang or ask for memory
// the file cannot back, and what they accept must be self-consistent. The
// seeds are the committed fixtures and the small hand-made files of
// testdata/fuzz (written by testdata/mkpt.py, which needs no torch); inputs
// that found bugs are kept there too.

// loadFuzzFile writes data to a file named name in a fresh directory and
// loads it as a checkpoint.
func loadFuzzFile(t *testing.T, name string, data []byte) (*Checkpoint, error) {
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return LoadCheckpoint(path)
}

// checkShapes fails t unless every tensor holds as many values as its
// shape says.
func checkShapes(t *testing.T, ck *Checkpoint) {
	for name, tensor := range ck.Tensors {
		n := 1
		for _, d := range tensor.Shape {
			n *= d
		}
		if n != len(tensor.Data) {
			t.Fatalf("tensor %q: shape %v holds %d values, not %d", name, tensor.Shape, n, len(tensor.Data))
		}
	}
}

func addFileSeeds(f *testing.F, names ...string) {
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzLoadTorch: torch.save files, zip and legacy, through gopickle.
func FuzzLoadTorch(f *testing.F) {
	addFileSeeds(f, td("tiny-mod.pt"), td("modllama2-aux/consolidated.00.pth"), td("mixtureai-hf/pytorch_model.bin"))
	f.Add([]byte{})
	f.Add([]byte("\x80\x02}q\x00."))        // a legacy pickle stream: an empty dict
	f.Add([]byte("PK\x03\x04 and no more")) // a zip header, truncated
	f.Fuzz(func(t *testing.T, data []byte) {
		ck, err := loadFuzzFile(t, "x.pt", data)
		if err == nil {
			checkShapes(t, ck)
		}
	})
}

// FuzzLoadSafetensors: the u64 header length, the JSON header, the data.
func FuzzLoadSafetensors(f *testing.F) {
	addFileSeeds(f, td("tiny-dense.safetensors"))
	f.Add([]byte("\x02\x00\x00\x00\x00\x00\x00\x00{}"))
	f.Add([]byte("\x40\x00\x00\x00\x00\x00\x00\x00" + `{"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}         ` + "\x00\x3c\x00\x40"))
	f.Fuzz(func(t *testing.T, data []byte) {
		ck, err := loadFuzzFile(t, "x.safetensors", data)
		if err == nil {
			checkShapes(t, ck)
		}
	})
}

// FuzzLoadConfig: a config LoadConfig accepts survives a round trip through
// JSON unchanged, and is accepted again.
func FuzzLoadConfig(f *testing.F) {
	addFileSeeds(f, td("tiny-mod.config.json"), td("tiny-dense.config.json"))
	f.Add([]byte(`{"format": "modrun-train-config/1"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "config.json")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := LoadConfig(path)
		if err != nil {
			return
		}
		if c.HeadDim() <= 0 || c.Dim%c.NHeads != 0 || c.NHeads%c.NKVHeads != 0 {
			t.Fatalf("accepted a config with dim %d, n_heads %d, n_kv_heads %d", c.Dim, c.NHeads, c.NKVHeads)
		}
		once, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, once, 0o644); err != nil {
			t.Fatal(err)
		}
		again, err := LoadConfig(path)
		if err != nil {
			t.Fatalf("refused its own rewrite %s: %v", once, err)
		}
		if twice, _ := json.Marshal(again); !bytes.Equal(once, twice) {
			t.Fatalf("rewriting is not stable:\n%s\n%s", once, twice)
		}
	})
}

// corpusFile writes the input of a corpus entry of testdata/fuzz/target to a
// temporary file named name, and returns its path.
func corpusFile(t *testing.T, target, entry, name string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata/fuzz", target, entry))
	require.NoError(t, err)
	lines := strings.SplitN(string(raw), "\n", 3)
	require.Len(t, lines, 3)
	lit, ok := strings.CutSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")")
	require.True(t, ok, lines[1])
	data, err := strconv.Unquote(lit)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(data), 0o644))
	return path
}

// TestLoadTorchFiles: the small torch.save files of the corpus, zip and
// legacy, load; the hostile and wrong ones give an error that says what is
// wrong in Python's words, never gopickle's Go types.
func TestLoadTorchFiles(t *testing.T) {
	for entry, want := range map[string][]float32{"state": {1, 2, 3, 4, 5, 6}, "legacy": {1, 2, 3}} {
		ck, err := LoadCheckpoint(corpusFile(t, "FuzzLoadTorch", entry, "x.pt"))
		require.NoError(t, err, entry)
		assert.Equal(t, want, ck.Tensors["w"].Data, entry)
	}
	ck, err := LoadCheckpoint(corpusFile(t, "FuzzLoadTorch", "state", "x.pt"))
	require.NoError(t, err)
	assert.Equal(t, []int{2, 3}, ck.Tensors["w"].Shape)

	full, err := os.ReadFile(td("tiny-mod.pt"))
	require.NoError(t, err)
	truncated := filepath.Join(t.TempDir(), "truncated.pt")
	require.NoError(t, os.WriteFile(truncated, full[:3000], 0o644))
	for _, c := range []struct{ path, want string }{
		{truncated, "truncated.pt: a zip archive (torch.save's format) that does not open, truncated or damaged"},
		{corpusFile(t, "FuzzLoadTorch", "list", "list.pt"), "list.pt: the checkpoint holds a list, want a state_dict (a dict of tensors)"},
		{corpusFile(t, "FuzzLoadTorch", "dictlist", "dl.pt"), `dl.pt: state_dict entry "a" is a list, want a tensor`},
		{corpusFile(t, "FuzzLoadTorch", "string8", "s8.pt"), "s8.pt: not a readable PyTorch checkpoint: pickle: opcode 0x8d at byte 2 asks for 1099511627776 bytes; 3 follow"},
		{corpusFile(t, "FuzzLoadTorch", "frame", "fr.pt"), "fr.pt: not a readable PyTorch checkpoint: pickle: opcode 0x95 at byte 2 asks for 68719476736 bytes; 3 follow"},
		{corpusFile(t, "FuzzLoadTorch", "bigstorage", "bs.pt"), `bs.pt: not a readable PyTorch checkpoint: storage "0": 1073741824 torch.FloatStorage elements do not fit in its 8 bytes`},
		{corpusFile(t, "FuzzLoadTorch", "legacybig", "lb.pt"), `lb.pt: not a readable PyTorch checkpoint: storage "0": 1099511627776 elements do not fit in the 12 bytes left`},
		{corpusFile(t, "FuzzLoadTorch", "expanded", "ex.pt"), `ex.pt: tensor "w": 1073741824 elements: with the tensors before it, more than the file could hold`},
		{corpusFile(t, "FuzzLoadTorch", "views", "vw.pt"), `elements: with the tensors before it, more than the file could hold`},
	} {
		_, err := LoadCheckpoint(c.path)
		require.Error(t, err, c.path)
		assert.Contains(t, err.Error(), c.want)
		assert.NotContains(t, err.Error(), "types.")
	}
}

// TestSafetensorsOverlap: tensors whose data_offsets overlap are refused: a
// few bytes of data named a thousand times would be copied a thousand times.
func TestSafetensorsOverlap(t *testing.T) {
	var header strings.Builder
	header.WriteString("{")
	for i := 0; i < 1000; i++ {
		if i > 0 {
			header.WriteString(",")
		}
		fmt.Fprintf(&header, `"w%d":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}`, i)
	}
	header.WriteString("}")
	file := binary.LittleEndian.AppendUint64(nil, uint64(header.Len()))
	file = append(append(file, header.String()...), make([]byte, 16)...)
	_, err := loadFuzzFile(t, "x.safetensors", file)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "data_offsets overlap")
}
