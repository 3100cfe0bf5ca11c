package vulkan

import (
	"fmt"

	"github.com/modrun/modrun/mod"
	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
)

// NoRoomError is New's (and NewEvaluator's) error when the model cannot fit
// the device's memory: found before anything is allocated, from the
// tensors' sizes and the KV caches' size, so that a model too big for the
// device is one clear line, not an allocation failing halfway through.
type NoRoomError struct {
	Path    string
	Device  string
	Heap    uint64 // the device's device-local memory
	Weights uint64 // the model's tensors, as the file holds them (F32 vectors decoded)
	KVCache uint64 // every layer's keys, values and positions
	Ctx     int    // the tokens the KV caches hold (Options.ContextLen, --ctx)
	KVType  string // "f16" or "f32"
	// MaxCtx is the longest context whose caches fit beside the weights,
	// 0 when the weights alone do not fit.
	MaxCtx int
}

func (e *NoRoomError) Error() string {
	need := fmt.Sprintf("vulkan: %s does not fit in the %s of GPU memory of %s: it needs %s of weights",
		e.Path, vk.Bytes(e.Heap), e.Device, vk.Bytes(e.Weights))
	if e.KVCache > 0 {
		need += fmt.Sprintf(" and %s of KV cache (%d tokens, %s)", vk.Bytes(e.KVCache), e.Ctx, e.KVType)
	}
	switch {
	case e.MaxCtx > 0:
		return need + fmt.Sprintf(": a context of %d tokens at most fits (--ctx)", e.MaxCtx)
	case e.Weights >= e.Heap:
		return need + ": a smaller or more quantized model would fit"
	}
	return need
}

// fitReserve is the memory kept for what checkFit does not count (the
// activations, the prompt batch's buffers, the staging buffer), as a
// fraction of the heap: 1/16.
const fitReserve = 16

// checkFit refuses a model whose weights and KV caches (kvBytesPerToken a
// token, ctx tokens) would not fit the device's memory heap.
func checkFit(dev *vk.Device, m *mod.Model, ctx int, kvBytesPerToken uint64, kvType string) error {
	info := dev.Info()
	heap := info.DeviceLocalBytes
	if heap == 0 {
		return nil // unknown: the allocations will tell
	}
	weights := weightBytes(m.Weights)
	room := heap - heap/fitReserve
	kv := kvBytesPerToken * uint64(ctx)
	if weights+kv <= room {
		return nil
	}
	e := &NoRoomError{Path: m.Path, Device: info.Name, Heap: heap, Weights: weights, KVCache: kv, Ctx: ctx, KVType: kvType}
	if weights < room && kvBytesPerToken > 0 {
		e.MaxCtx = int((room - weights) / kvBytesPerToken)
	}
	return e
}

// kvBytesPerToken is what one token takes in every layer's cache: its key,
// its value and its position.
func kvBytesPerToken(c mod.Config, kv shaders.KV) uint64 {
	return uint64(c.NLayer) * (2*kv.ElementBytes()*uint64(c.KVDim()) + 4)
}

// weightBytes is what the model's tensors take on the device: decoded F32
// tensors as they are, the others as shaders.DeviceMatrix lays them out
// (the sub-block layouts take a little more than the file; a type no
// kernel reads counts its file bytes, and the upload then refuses it).
func weightBytes(w *mod.Weights) uint64 {
	mats := []*mod.Mat{&w.TokenEmbd, &w.OutputNorm}
	if w.Output.Name != w.TokenEmbd.Name { // not tied
		mats = append(mats, &w.Output)
	}
	for i := range w.Blocks {
		b := &w.Blocks[i]
		mats = append(mats, &b.AttnNorm, &b.Q, &b.K, &b.V, &b.O, &b.FFNNorm, &b.Gate, &b.Up, &b.Down)
		if r := b.Router; r != nil {
			mats = append(mats, &r.Weight, &r.Bias, r.PredUp, r.PredDown)
		}
	}
	var n uint64
	for _, m := range mats {
		if m == nil {
			continue
		}
		f32, packed := m.Data()
		if f32 != nil {
			n += 4 * uint64(len(f32))
		} else if mx, err := shaders.DeviceMatrix(m.Type.String(), m.Rows, m.Cols); err == nil {
			n += mx.DeviceBytes()
		} else {
			n += uint64(len(packed))
		}
	}
	return n
}
