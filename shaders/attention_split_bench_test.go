package shaders

import (
	"fmt"
	"testing"

	"github.com/modrun/modrun/vk"
)

// prefillAttentionShape is a model's heads and a prompt of n tokens
// attending causally to themselves (a prefill of n).
type prefillAttentionShape struct {
	name               string
	nHead, nKVHead, hd int
	n                  int
}

// prefillAttentionGPUShapes: TinyLlama-1.1B's heads (32 over 4 kv heads of
// 64) and Llama-2-7B's (32 of 128), a 512-token prompt (#43's pp512) and a
// 2048-token one (a long prompt: 16 times the attention of 512, item 4).
var prefillAttentionGPUShapes = []prefillAttentionShape{{"1.1b", 32, 4, 64, 512}, {"7b", 32, 32, 128, 512},
	{"1.1b", 32, 4, 64, 2048}, {"7b", 32, 32, 128, 2048}}

// prefillAttentionCPUShapes are tiny, so that the benchmark's code and its
// validation run in seconds on lavapipe.
var prefillAttentionCPUShapes = []prefillAttentionShape{{"tiny", 4, 2, 64, 48}}

// BenchmarkPrefillAttentionGPU times a prefill's attention (attention_split
// over an F16 cache with its count on the GPU, then attention_merge, in the
// device's key tiles) with one invocation a query row ("rows") against the
// ATTN_LANES variants, 2, 4 and 8 lanes a row where the subgroups allow
// (Profile.AttentionSplit takes AttentionSplitLanes(hd): one lane per 32
// dimensions). One invocation a row holds 2*hd floats of query and output
// in registers: at hd 128 past NVIDIA's 255 a thread
// (docs/decode-attention-cost.md). On a device with VK_NV_cooperative_matrix
// a "coop" candidate runs attention_coop (both products on tensor cores:
// MODRUN_ATTENTION_COOP=1), on a CPU device its emulation ("coop-emu").
// Each candidate is first checked on 64 of the prompt's rows against the
// CPU reference (mod.Attend, at attentionTolerance, widened by lanesScale
// for the lanes' order of summation, coopScale for the tensor cores').
// Reported: us/call and TFLOP/s (2 FLOPs a multiply-add, scores and
// values, over the entries each row sees).
//
// Run from the compiled test binary on a GPU machine:
//
//	shaders.test -test.run '^$' -test.bench BenchmarkPrefillAttentionGPU -test.benchtime 20x
func BenchmarkPrefillAttentionGPU(b *testing.B) {
	dev := openDeviceWith(b, vk.InstanceOptions{})
	d := deviceOf(dev)
	shapes := prefillAttentionGPUShapes
	if d.CPU {
		shapes = prefillAttentionCPUShapes
	}
	merge := newKernel(b, dev, lookup(b, "attention_merge"))
	for _, sh := range shapes {
		hd := uint32(sh.hd)
		splitLen := AttentionSplitLen(hd, d.CPU)
		type cand struct {
			label, name string
			lpr         uint32
			spec        []uint32
		}
		cands := []cand{{"rows", AttentionSplitName(KVF16, true), 1, AttentionSplitSpec(hd)}}
		for _, lpr := range []uint32{2, 4, 8} {
			if d.SubgroupShuffle && d.SubgroupSize >= lpr && AttentionSplitRows*lpr <= d.MaxWorkGroupInvocations {
				cands = append(cands, cand{fmt.Sprintf("lanes%d", lpr), AttentionSplitLanesName(KVF16, true), lpr, AttentionSplitLanesSpec(hd, lpr)})
			}
		}
		// attention_coop (both products on tensor cores, MODRUN_ATTENTION_COOP=1)
		// where the device has them; its emulation on a CPU device, to
		// prove the candidate's code (its speed there means nothing).
		if d.CooperativeMatrixNV && d.SubgroupSize == MatmulCoopSubgroup && AttentionCoopHeads(hd) {
			cands = append(cands, cand{"coop", AttentionCoopName(false), 0, AttentionCoopSpec(hd)})
		} else if d.CPU && AttentionCoopHeads(hd) {
			cands = append(cands, cand{"coop-emu", AttentionCoopName(true), 0, AttentionCoopSpec(hd)})
		}
		check := newAttentionCase(min(64, sh.n), sh.n, sh.nHead, sh.nKVHead, sh.hd, 1, 7) // the prompt's last 64 rows
		roundToHalf(b, check.k)
		roundToHalf(b, check.v)
		want, scale := check.reference()
		timed := newAttentionCase(sh.n, sh.n, sh.nHead, sh.nKVHead, sh.hd, 1, 8)
		roundToHalf(b, timed.k)
		roundToHalf(b, timed.v)
		flops := 4 * float64(sh.nHead*sh.hd) * float64(sh.n*(sh.n+1)/2)
		for _, c := range cands {
			b.Run(fmt.Sprintf("%s/n%d/heads%d:%d/hd%d/%s%v", sh.name, sh.n, sh.nHead, sh.nKVHead, sh.hd, c.label, c.spec), func(b *testing.B) {
				split := newKernel(b, dev, lookup(b, c.name), c.spec...)
				sc := scale
				if c.lpr > 1 {
					sc = check.lanesScale(scale, c.lpr)
				}
				groups := func(n, nHead, splits uint32) [3]uint32 {
					return AttentionSplitGroupsOf(c.name, c.spec, n, nHead, splits)
				}
				if IsAttentionCoop(c.name) {
					sc = check.coopScale(scale)
				}
				if err := closeness(check.runSplit(b, dev, split, merge, splitLen, true, true, 1, groups), want, sc, attentionTolerance); err != nil {
					b.Fatalf("wrong before timing: %v", err)
				}
				rec, _ := timed.splitRecorder(b, dev, split, merge, splitLen, true, true, 1, groups)
				perCall := timeReplays(b, dev, rec)
				b.ReportMetric(perCall/1e3, "us/call")
				b.ReportMetric(flops/perCall/1e3, "TFLOP/s")
			})
		}
	}
}
