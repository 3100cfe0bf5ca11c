#version 450
// route_rows: a batched step's routed layer's whole selection over its n
// rows (a few: the step's matvec path, n <= ROUTE_ROWS_MOST), in one
// workgroup, where it took three dispatches (router_score,
// compact_positive_table, paged_gather): route_decode's work for each row,
// then compact's and paged_gather's over them.
//   r[i] = w . x[i] + bias[0]              every row's router score
//   PREDICTOR: p[i] = w2 . h[i] [+ pb[0]]  an MLP predictor: h = SiLU(W1 x)
//                                          from router.comp; a linear one
//                                          (mod.PredictorLinear): h = x,
//                                          w2 its weight, pb its bias
//   selected[i] = selects(bits of p[i], else r[i])   mod.Selects
//   trace (traceRows > 0): r, p and selected of every row at the routed
//     layer's place in the step's trace, [nRouted][3][traceRows] (what
//     three copies after the selector wrote)
//   x[i] = NaN when the deciding score is not finite (mod.PoisonRows)
//   idx, count: the selected rows, ascending; args: the table's m
//     VkDispatchIndirectCommands for count (compact.comp's TABLE_ARGS)
//   xs[g] = x[idx[g]]; pos, ropePos, ent, toff of each selected row g:
//     paged.comp's PAGED_GATHER (its entry: rmeta's length before the step
//     plus the selected rows of its sequence before it in the step)
// Each invocation sums its share of every row's products at once; one
// tree in shared memory reduces the n sums together (log2 WG barriers,
// not n times that), so the kernel needs no subgroup operation and its
// result does not depend on the device's subgroups. Dispatch (1, 1, 1).
#include "include/common.glsl"
#define OP_ROUTE_ROWS
#include "include/push_routing.glsl"
#include "include/selects.glsl"

layout(local_size_x = 64) in;
const uint ROUTE_ROWS_MOST = 16; // shaders.RouteRowsMost

layout(std430, binding = 0) readonly buffer W { float w[]; };          // [nEmbd] mod_router.weight
layout(std430, binding = 1) readonly buffer Bias { float bias[]; };    // [1] (read when hasBias)
layout(std430, binding = 2) buffer X { float x[]; };                   // [n][nEmbd] every row's block input (NaN when poisoned)
layout(std430, binding = 3) writeonly buffer XS { float xs[]; };       // [count][nEmbd] the selected rows'
layout(std430, binding = 4) writeonly buffer R { float r[]; };         // [n] router scores
layout(std430, binding = 5) writeonly buffer Count { uint count[]; };  // [1]
layout(std430, binding = 6) readonly buffer Table { uint table[]; };   // [n+1][m][3] each dispatch's workgroups by count
layout(std430, binding = 7) writeonly buffer Args { uint args[]; };    // [m][3] VkDispatchIndirectCommand
layout(std430, binding = 8) writeonly buffer Idx { uint idx[]; };      // [n] the first count are the selected, ascending
layout(std430, binding = 9) writeonly buffer Trace { uint trace[]; }; // [nRouted][3][traceRows]: r, p (f32 bits), selected (0/1)
layout(std430, binding = 10) readonly buffer RowPos { uint rowPos[]; }; // [n] every row's position
layout(std430, binding = 11) readonly buffer RowSeq { uint rowSeq[]; }; // [n] a word per sequence
layout(std430, binding = 12) readonly buffer RMeta { uint rmeta[]; };   // [n][nRouted][2] (table offset, length before the step)
layout(std430, binding = 13) writeonly buffer Pos { uint pos[]; };      // [n] the selected rows' positions
layout(std430, binding = 14) writeonly buffer RopePos { uint rpos[]; }; // [n] RoPE's positions
layout(std430, binding = 15) writeonly buffer Ent { uint ent[]; };      // [n] their entries
layout(std430, binding = 16) writeonly buffer Toff { uint toff[]; };    // [n] their tables' offsets
#if defined(PREDICTOR)
layout(std430, binding = 17) readonly buffer H { float h[]; };      // [n][predHidden] SiLU(W1 x), or x (linear)
layout(std430, binding = 18) readonly buffer W2 { float w2[]; };    // [predHidden] mod_pred_down.weight
layout(std430, binding = 19) readonly buffer PB { float pb[]; };    // [1] (read when predBias)
#endif

shared float red[ROUTE_ROWS_MOST * gl_WorkGroupSize.x]; // [row][invocation] partial sums
shared uint pick[ROUTE_ROWS_MOST];                       // the selected rows, ascending
shared uint picked;                                      // how many

// sums reduces each row's partial sums in red (row i at i*WG) into
// red[i*WG], all rows in one tree.
void sums(uint n, uint tid) {
	const uint WG = gl_WorkGroupSize.x;
	barrier();
	for (uint s = WG / 2u; s > 0u; s >>= 1) {
		if (tid < s) {
			for (uint i = 0u; i < n; i++) {
				red[i * WG + tid] += red[i * WG + tid + s];
			}
		}
		barrier();
	}
}

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint n = min(p.n, ROUTE_ROWS_MOST);
	for (uint i = 0u; i < n; i++) {
		float acc = 0.0;
		for (uint j = tid; j < p.nEmbd; j += WG) {
			acc += w[j] * x[i * p.nEmbd + j];
		}
		red[i * WG + tid] = acc;
	}
	sums(n, tid);
	float rs[ROUTE_ROWS_MOST];
	for (uint i = 0u; i < n; i++) {
		rs[i] = red[i * WG] + (p.hasBias != 0u ? bias[0] : 0.0);
	}
#if defined(PREDICTOR)
	barrier(); // every invocation read the router's sums
	for (uint i = 0u; i < n; i++) {
		float acc = 0.0;
		for (uint j = tid; j < p.predHidden; j += WG) {
			acc += w2[j] * h[i * p.predHidden + j];
		}
		red[i * WG + tid] = acc;
	}
	sums(n, tid);
#endif
	// Every invocation holds every row's scores: each poisons the elements
	// of x it read itself (no read races with the write), and the first
	// writes the scores, the decisions and the compaction.
	for (uint i = 0u; i < n; i++) {
#if defined(PREDICTOR)
		float score = red[i * WG] + (p.predBias != 0u ? pb[0] : 0.0);
#else
		float score = rs[i];
#endif
		uint bits = floatBitsToUint(score);
		if (poisons(bits)) {
			for (uint j = tid; j < p.nEmbd; j += WG) {
				x[i * p.nEmbd + j] = quietNaN();
			}
		}
		if (tid == 0u) {
			r[i] = rs[i];
			bool s = selects(bits);
			if (p.traceRows != 0u) {
				uint at = 3u * p.traceRows * p.routed + i;
				trace[at] = floatBitsToUint(rs[i]);
#if defined(PREDICTOR)
				trace[at + p.traceRows] = bits;
#endif
				trace[at + 2u * p.traceRows] = s ? 1u : 0u;
			}
			if (i == 0u) {
				picked = 0u;
			}
			if (s) {
				pick[picked] = i;
				idx[picked] = i;
				picked++;
			}
		}
	}
	memoryBarrierBuffer(); // the poisoned rows before the gather reads them
	barrier();
	uint c = picked;
	if (tid == 0u) {
		count[0] = c;
	}
	for (uint j = tid; j < 3u * p.m; j += WG) {
		args[j] = table[3u * p.m * c + j];
	}
	for (uint g = 0u; g < c; g++) {
		uint i = pick[g];
		for (uint e = tid; e < p.nEmbd; e += WG) {
			xs[g * p.nEmbd + e] = x[i * p.nEmbd + e];
		}
	}
	for (uint g = tid; g < c; g += WG) { // paged_gather's entries
		uint i = pick[g], seq = rowSeq[i], rank = 0u;
		while (rank < g && rowSeq[pick[g - rank - 1u]] == seq) {
			rank++;
		}
		uint m = 2u * (i * p.nRouted + p.routed);
		uint e = rmeta[m + 1u] + rank;
		pos[g] = rowPos[i];
		rpos[g] = p.compact != 0u ? e : rowPos[i];
		ent[g] = e;
		toff[g] = rmeta[m];
	}
}
