#version 450
// stage_chain: a benchmark kernel (BenchmarkDispatchGPU's "handoff"): a
// chain of dependent stages inside ONE dispatch, each stage's workgroups
// waiting for the whole previous stage through an atomic count instead of
// a barrier between dispatches. It measures what such a hand-off costs
// against a dependent dispatch (docs/decode-attention-cost.md: on the H200
// a dispatch cost up to ~6.6 us beyond its work, and a decode block takes
// 5), before any engine kernel is built that way.
//
// The grid is STAGES x G workgroups of 256 along x, G = n / 256: workgroup
// w is stage s = w / G, slice g = w % G. Stage s reads buffer s % 2 and
// writes the other: element g*256 + l becomes element ((g+1) % G)*256 + l
// of the source plus 1, so each workgroup reads what another wrote in the
// stage before. After STAGES stages from zeros every element is STAGES.
//
// Vulkan does not promise that a workgroup waiting on others lets them
// run. Stage s waits only on stage s - 1, whose workgroups come earlier in
// the grid, so a driver that starts workgroups in order (NVIDIA and AMD
// do; lavapipe runs them in order too) has them running or done. Elsewhere
// the wait gives up after SPIN_LIMIT polls and sets count[STAGES] to 1:
// the output is then wrong and the benchmark says so, rather than the
// device hanging.
//
// PER_DISPATCH (stage_chain_dispatch): one stage a dispatch, its index in
// the push constants, the dispatches recorded with no barrier between them
// (vk's Handoff access): the same wait and count between dispatches, so
// that what a barrier costs can be told from what a launch costs.
#include "include/common.glsl"
#ifdef PER_DISPATCH
#define OP_STAGE_CHAIN
#else
#define OP_ADD
#endif
#include "include/push.glsl"

layout(local_size_x = 256) in;

layout(std430, binding = 0) coherent buffer Even { float even[]; }; // [n]: the source of even stages
layout(std430, binding = 1) coherent buffer Odd { float odd[]; };   // [n]: of odd stages
// [stages + 1]: workgroups of each stage done (zero before the dispatch;
// the last workgroup sets them back to zero), then the stall flag.
layout(std430, binding = 2) coherent buffer Count { uint count[]; };

// Polls: ~15-30 ms at most a stage on a GPU, so a driver that stalls ends
// the chain in seconds; under lavapipe's loop budget (65535 iterations a
// shader, past which loops stop unflagged), as include/handoff.glsl's.
const uint SPIN_LIMIT = 1u << 15;

void main() {
	uint l = gl_LocalInvocationID.x;
	uint groups = p.n / 256u;
#ifdef PER_DISPATCH
	uint stages = p.stages;
	uint s = p.stage, g = gl_WorkGroupID.x;
#else
	uint stages = gl_NumWorkGroups.x / groups;
	uint s = gl_WorkGroupID.x / groups, g = gl_WorkGroupID.x % groups;
#endif
	if (s > 0u) {
		if (l == 0u) {
			for (uint it = 0u; atomicAdd(count[s - 1u], 0u) < groups; it++) {
				if (it == SPIN_LIMIT) {
					atomicOr(count[stages], 1u); // stalled: go on, wrong
					break;
				}
			}
		}
		barrier();
		memoryBarrierBuffer(); // the previous stage's writes, seen after its count
	}
	uint from = ((g + 1u) % groups) * 256u + l, to = g * 256u + l;
	if ((s & 1u) == 0u) {
		odd[to] = even[from] + 1.0;
	} else {
		even[to] = odd[from] + 1.0;
	}
	memoryBarrierBuffer(); // the writes, before the count that says they are done
	barrier();
	if (l == 0u && atomicAdd(count[s], 1u) == groups - 1u && s == stages - 1u) {
		// The last stage is complete, so every wait has passed: zero the
		// counts for the next dispatch.
		for (uint i = 0u; i < stages; i++) {
			count[i] = 0u;
		}
	}
}
