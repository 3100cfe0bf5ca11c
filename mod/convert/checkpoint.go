// Package convert turns a PyTorch checkpoint of train/modllama.py (a state_dict
// saved with torch.save, or a .safetensors file, plus its config JSON) into a
// GGUF file: arch "llama" for a dense model, "llama-mod" for a MoD model
// (DESIGN.md §4).
package convert

import (
	"archive/zip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/nlpodyssey/gopickle/pytorch"
	"github.com/nlpodyssey/gopickle/types"

	"github.com/modrun/modrun/gguf"
)

// Tensor is one checkpoint tensor as float32, row-major in PyTorch order
// (Shape[0] is the slowest dimension).
type Tensor struct {
	Shape []int
	Data  []float32
}

// Checkpoint is a state_dict: tensors by their PyTorch names.
type Checkpoint struct {
	Path    string
	Tensors map[string]*Tensor
}

// Names returns the tensor names, sorted.
func (c *Checkpoint) Names() []string {
	names := make([]string, 0, len(c.Tensors))
	for n := range c.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// maxCheckpointBytes bounds what LoadCheckpoint reads into memory.
const maxCheckpointBytes = 8 << 30

// LoadCheckpoint reads a PyTorch checkpoint (.pt/.pth/.bin: torch.save's zip
// format or the legacy one; a state_dict, or a dict holding one under
// "model"/"state_dict") or a .safetensors file.
func LoadCheckpoint(path string) (*Checkpoint, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	if st.IsDir() {
		return nil, fmt.Errorf("checkpoint %s: is a directory", path)
	}
	if st.Size() > maxCheckpointBytes {
		return nil, fmt.Errorf("checkpoint %s: %d bytes is more than the %d this converter reads", path, st.Size(), int64(maxCheckpointBytes))
	}
	var tensors map[string]*Tensor
	if strings.EqualFold(filepath.Ext(path), ".safetensors") {
		tensors, err = loadSafetensors(path)
	} else {
		tensors, err = loadTorch(path)
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if len(tensors) == 0 {
		return nil, fmt.Errorf("checkpoint %s: no tensors", path)
	}
	return &Checkpoint{Path: path, Tensors: tensors}, nil
}

// loadTorch reads a torch.save file: checked (sniffTorch, guardTorch), then
// unpickled by gopickle.
func loadTorch(path string) (map[string]*Tensor, error) {
	if err := sniffTorch(path); err != nil {
		return nil, err
	}
	if err := guardTorch(path); err != nil {
		return nil, fmt.Errorf("not a readable PyTorch checkpoint: %w", err)
	}
	obj, err := unpickleTorch(path)
	if err != nil {
		return nil, fmt.Errorf("not a readable PyTorch checkpoint: %w", err)
	}
	entries, err := dictEntries(obj)
	if err != nil {
		return nil, err
	}
	// A training checkpoint may wrap the state_dict.
	for _, key := range []string{"model", "state_dict", "model_state_dict"} {
		for _, e := range entries {
			if k, _ := e.key.(string); k == key {
				if inner, err := dictEntries(e.value); err == nil {
					return torchTensors(inner, fileSize(path))
				}
			}
		}
	}
	return torchTensors(entries, fileSize(path))
}

// unpickleTorch runs gopickle. It is not our code and its input is
// untrusted, so a panic inside it (it panics on what it does not implement)
// becomes an error.
func unpickleTorch(path string) (obj any, err error) {
	defer func() {
		if r := recover(); r != nil {
			obj, err = nil, fmt.Errorf("unpickler failed: %v", r)
		}
	}()
	return pytorch.Load(path)
}

// sniffTorch accepts only what torch.save writes: a zip archive, or the
// legacy format, a pickle stream (first byte 0x80, PROTO). gopickle v0.2.0
// loops forever on an empty file or one that reads as an empty tar archive
// (its legacy loader's `break` leaves only the switch), so nothing else may
// reach it.
func sniffTorch(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, 4)
	n, _ := io.ReadFull(f, head)
	switch {
	case n == 4 && string(head) == "PK\x03\x04":
		// gopickle takes a zip archive that does not open for the legacy
		// format, and reports the zip header as a pickle opcode
		// ("unsupported persistent ID"): say what is wrong instead.
		z, err := zip.OpenReader(path)
		if err != nil {
			return fmt.Errorf("a zip archive (torch.save's format) that does not open, truncated or damaged: %w", err)
		}
		return z.Close()
	case n >= 2 && head[0] == 0x80:
		return nil
	}
	return fmt.Errorf("not a PyTorch checkpoint: neither a zip archive (torch.save) nor a pickle stream (%d bytes read)", n)
}

// pyType names the Python type of an unpickled value, for errors: gopickle's
// Go types (*types.List) mean nothing to the user.
func pyType(v any) string {
	switch t := v.(type) {
	case nil:
		return "None"
	case bool:
		return "a bool"
	case int, int64, *big.Int:
		return "an int"
	case float64:
		return "a float"
	case string:
		return "a string"
	case []byte:
		return "bytes"
	case *types.List, []any:
		return "a list"
	case *types.Tuple:
		return "a tuple"
	case *types.Dict, *types.OrderedDict:
		return "a dict"
	case *types.Set, *types.FrozenSet:
		return "a set"
	case *pytorch.Tensor:
		return "a tensor"
	case pytorch.StorageInterface:
		return "a storage"
	case *types.GenericObject:
		return fmt.Sprintf("a %s.%s object", t.Class.Module, t.Class.Name)
	case *types.GenericClass:
		return fmt.Sprintf("the class %s.%s", t.Module, t.Name)
	}
	return "a value of another type"
}

type entry struct{ key, value any }

func dictEntries(obj any) ([]entry, error) {
	var out []entry
	switch d := obj.(type) {
	case *types.OrderedDict:
		for e := d.List.Front(); e != nil; e = e.Next() {
			oe := e.Value.(*types.OrderedDictEntry)
			out = append(out, entry{oe.Key, oe.Value})
		}
	case *types.Dict:
		for _, e := range *d {
			out = append(out, entry{e.Key, e.Value})
		}
	default:
		return nil, fmt.Errorf("the checkpoint holds %s, want a state_dict (a dict of tensors)", pyType(obj))
	}
	return out, nil
}

// fileSize is the size of the file at path, 0 when it cannot be read.
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// torchTensors copies the tensors out of their storages. Views may share a
// storage (tied weights), so the copies may hold more elements than the
// storages; budget bounds them all to one element per byte of the file, which
// no real checkpoint comes near (a float takes 2 to 8 bytes), while a few
// hundred bytes of pickle cannot ask for gigabytes of views.
func torchTensors(entries []entry, budget int64) (map[string]*Tensor, error) {
	out := map[string]*Tensor{}
	for _, e := range entries {
		name, ok := e.key.(string)
		if !ok {
			return nil, fmt.Errorf("state_dict key %v is %s, want a string", e.key, pyType(e.key))
		}
		pt, ok := e.value.(*pytorch.Tensor)
		if !ok {
			return nil, fmt.Errorf("state_dict entry %q is %s, want a tensor", name, pyType(e.value))
		}
		t, err := fromTorch(pt, &budget)
		if err != nil {
			return nil, fmt.Errorf("tensor %q: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

// fromTorch copies a (possibly strided) tensor view out of its storage.
// budget is the number of elements left to copy (torchTensors).
func fromTorch(pt *pytorch.Tensor, budget *int64) (*Tensor, error) {
	var src []float32
	var doubles []float64
	switch s := pt.Source.(type) {
	case *pytorch.FloatStorage:
		src = s.Data
	case *pytorch.HalfStorage:
		src = s.Data
	case *pytorch.BFloat16Storage:
		src = s.Data
	case *pytorch.DoubleStorage:
		doubles = s.Data // converted below, once the budget allows
	default:
		return nil, fmt.Errorf("storage type %s is not a floating-point type", strings.TrimPrefix(fmt.Sprintf("%T", pt.Source), "*pytorch."))
	}
	if len(pt.Size) != len(pt.Stride) {
		return nil, fmt.Errorf("size %v and stride %v differ in rank", pt.Size, pt.Stride)
	}
	n := 1
	for _, d := range pt.Size {
		if d < 0 || (d > 0 && n > math.MaxInt32/d) {
			return nil, fmt.Errorf("bad size %v", pt.Size)
		}
		n *= d
	}
	if need := int64(n) + int64(len(doubles)); need > *budget {
		return nil, fmt.Errorf("%d elements: with the tensors before it, more than the file could hold (views that share a storage again and again?)", n)
	}
	*budget -= int64(n) + int64(len(doubles))
	if doubles != nil {
		src = make([]float32, len(doubles))
		for i, v := range doubles {
			src[i] = float32(v)
		}
	}
	t := &Tensor{Shape: append([]int(nil), pt.Size...), Data: make([]float32, n)}
	idx := make([]int, len(pt.Size))
	for i := 0; i < n; i++ {
		off := pt.StorageOffset
		for d, k := range idx {
			off += k * pt.Stride[d]
		}
		if off < 0 || off >= len(src) {
			return nil, fmt.Errorf("element %d lies outside its storage (%d elements)", i, len(src))
		}
		t.Data[i] = src[off]
		for d := len(idx) - 1; d >= 0; d-- { // next index, last dimension fastest
			if idx[d]++; idx[d] < pt.Size[d] {
				break
			}
			idx[d] = 0
		}
	}
	return t, nil
}

// maxSafetensorsHeader bounds the JSON header of a .safetensors file.
const maxSafetensorsHeader = 100 << 20

// loadSafetensors reads the format of huggingface/safetensors: a u64 header
// length, a JSON header {name: {dtype, shape, data_offsets}}, then the data.
func loadSafetensors(path string) (map[string]*Tensor, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if len(raw) < 8 {
		return nil, fmt.Errorf("not a safetensors file: %d bytes", len(raw))
	}
	hlen := binary.LittleEndian.Uint64(raw)
	if hlen > maxSafetensorsHeader || hlen > uint64(len(raw)-8) {
		return nil, fmt.Errorf("not a safetensors file: header length %d does not fit in %d bytes", hlen, len(raw))
	}
	var header map[string]json.RawMessage
	if err := json.Unmarshal(raw[8:8+hlen], &header); err != nil {
		return nil, fmt.Errorf("safetensors header: %w", err)
	}
	data := raw[8+hlen:]
	out := map[string]*Tensor{}
	// Tensors hold disjoint ranges of the data; ranges that overlap could
	// ask a small file for its data many times over.
	var total uint64
	for name, msg := range header {
		if name == "__metadata__" {
			continue
		}
		var info struct {
			Dtype       string   `json:"dtype"`
			Shape       []int    `json:"shape"`
			DataOffsets []uint64 `json:"data_offsets"`
		}
		if err := json.Unmarshal(msg, &info); err != nil {
			return nil, fmt.Errorf("safetensors tensor %q: %w", name, err)
		}
		t, err := safetensor(info.Dtype, info.Shape, info.DataOffsets, data)
		if err != nil {
			return nil, fmt.Errorf("safetensors tensor %q: %w", name, err)
		}
		if total += info.DataOffsets[1] - info.DataOffsets[0]; total > uint64(len(data)) {
			return nil, fmt.Errorf("safetensors tensor %q: the tensors' data_offsets overlap (%d bytes in all, %d of data)", name, total, len(data))
		}
		out[name] = t
	}
	return out, nil
}

func safetensor(dtype string, shape []int, offs []uint64, data []byte) (*Tensor, error) {
	size := map[string]int{"F32": 4, "F16": 2, "BF16": 2, "F64": 8}[dtype]
	if size == 0 {
		return nil, fmt.Errorf("dtype %q is not F32, F16, BF16 or F64", dtype)
	}
	n := 1
	for _, d := range shape {
		if d < 0 || (d > 0 && n > math.MaxInt32/d) {
			return nil, fmt.Errorf("bad shape %v", shape)
		}
		n *= d
	}
	if len(offs) != 2 || offs[0] > offs[1] || offs[1] > uint64(len(data)) || offs[1]-offs[0] != uint64(n*size) {
		return nil, fmt.Errorf("data_offsets %v do not hold %d %s values within %d bytes", offs, n, dtype, len(data))
	}
	b := data[offs[0]:offs[1]]
	t := &Tensor{Shape: append([]int(nil), shape...), Data: make([]float32, n)}
	for i := range t.Data {
		switch dtype {
		case "F32":
			t.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		case "F16":
			t.Data[i] = gguf.F16ToF32(binary.LittleEndian.Uint16(b[2*i:]))
		case "BF16":
			t.Data[i] = math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16)
		case "F64":
			t.Data[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
		}
	}
	return t, nil
}
