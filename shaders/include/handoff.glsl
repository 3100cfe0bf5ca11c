// handoff.glsl: a decode kernel's HANDOFF variant (shaders/handoff.go,
// docs/decode-attention-cost.md "Dispatches without barriers"): the step
// records it with no pipeline barrier before it, and the kernel orders
// itself after the dispatch before it instead. Include after the push
// constants and before the bindings it must read coherently (HANDOFF_COHERENT);
// include handoff_main.glsl at the end of the file.
//
// Without HANDOFF this file only defines HANDOFF_COHERENT as nothing.
//
// With HANDOFF (and HANDOFF_BINDING, the binding after the kernel's own):
//   - the kernel's main becomes kernelMain, and handoff_main.glsl's main
//     waits, runs it, and counts this workgroup done;
//   - the wait: one invocation polls hand[p.handWait] until it reaches
//     p.handNeed (the workgroups of the dispatch before, all of which
//     count themselves after their last write), then the workgroup reads.
//     p.handWait 0 waits for nothing (a barrier ordered the kernel);
//   - the count: each workgroup's writes are made visible
//     (memoryBarrierBuffer), then hand[p.handSlot] gets one more;
//   - hand[0] is the stall flag: a wait that polls HANDOFF_SPIN times in
//     vain sets it and goes on (its results then wrong), so that a driver
//     that does not start a dispatch's workgroups after the earlier
//     dispatch's (the order the wait relies on: NVIDIA's and AMD's do)
//     ends the step with a flag the host reads, not a hung GPU.
// Every earlier dispatch of the step is complete once the one before is:
// that one waited in turn before its first read. The buffers an earlier
// kernel of the step wrote are read through HANDOFF_COHERENT bindings, so
// that no workgroup reads a stale copy from a cache of its own.

#ifdef HANDOFF
#extension GL_GOOGLE_include_directive : require
#define HANDOFF_COHERENT coherent
layout(std430, binding = HANDOFF_BINDING) coherent buffer Handoff { uint hand[]; }; // [0] stall flag, [slot] workgroups done
// Polls before the wait gives up: a round trip to the GPU's cache each,
// ~15-30 ms on a GPU, far past any one kernel's time (the longest wait is
// the dispatch before's whole run), and under lavapipe's loop budget
// (LavapipeLoopIterations, 65535 a shader, past which loops stop silently:
// a longer spin would end unflagged there).
const uint HANDOFF_SPIN = 1u << 15;
#define main kernelMain
#else
#define HANDOFF_COHERENT
#endif
