#version 450
// paged: the KV cache of many sequences in one pool of pages (engine/sched's
// pages, docs/batching-gpu.md), for a step whose rows belong to different
// sequences (engine/vulkan/stepper.go). A page holds blockTokens entries of
// one layer; a sequence's table of a layer lists its pages: entry e of a
// table at word toff of tables, of width pages per block, layer layer, is
// in page tables[toff + (e/blockTokens)*width + layer] at slot
// e%blockTokens. Every row of a block carries its entry e (its position in a
// dense layer, its index among the tokens that entered a routed layer) and
// its table's offset toff; its attention sees entries 0..e of its own table:
// every earlier entry of a table lies at an earlier position, and no other
// sequence's entry is in it.
//
// PAGED_GATHER: for the selected rows g < count[0] of a routed layer
//   (idx ascending), a workgroup each: its row of x gathered into xs
//   (gather.comp's copy), and its entry in the layer's table: rmeta's base
//   (the table's length before the step) plus the selected rows of the
//   same sequence before it in the step (a sequence's rows are
//   consecutive, so they are idx's neighbours, told apart by rowSeq), its
//   table's offset, its original position and RoPE's (the entry with
//   compact positions). Dispatch Groups(n).
// PAGED_KV: row i < rows[0] of k (rotated) and v goes to its entry's page
//   slot (KV_F16: packed halves, two to a word). Dispatch Groups(n).
// PAGED_ATTENTION: workgroup (row i, head h, tile s) over entries
//   [s*splitLen, min((s+1)*splitLen, ent[i]+1)) of the row's table: each
//   invocation an online softmax over every WG-th entry, then the
//   workgroup's combine into the tile's partial result (max, sum, output),
//   which attention_merge combines over the tiles. A row i >= rows[0]
//   writes nothing. Dispatch Groups(n * nHead * splits). An invocation
//   holds a query row and an output row in registers: lavapipe's kernel.
//   With PAGED_MERGE (paged_attend: GPUs) the tile is walked in chunks of
//   WG entries instead: each invocation scores one entry of the chunk (the
//   query in shared memory), then, online over the chunks, each keeps the
//   output dims tid, tid+WG, ... (no row of HD registers: RDNA3's compiler
//   spilled 115-353 registers on the other walk, TestPagedRegistersRDNA3);
//   then each tile counts itself done for its (row, head) (an atomic in
//   done, zero between dispatches) and the last one merges the tiles into
//   out as attention_merge does (include/attention_merge.glsl: the same
//   combine, bit for bit): one dispatch where two ran.
//   With PAGED_OWN too (paged_attend_own: GPUs, a step whose rows are
//   each their sequence's only one, as a chain of decode steps) it is
//   paged_qkv and paged_attend in one dispatch: the rows are the stacked
//   q|k|v matvec's raw rows, and each workgroup turns its head of q by
//   RoPE into shared memory. The tile holding the row's own entry ent[i]
//   also turns its kv head's k and reads its v into shared memory (rounded
//   to halves with KV_F16, as the pool holds them) and uses them for that
//   entry, so that no workgroup reads what another writes in the dispatch;
//   its kv head's last query head's workgroup writes them to the entry's
//   page slot (the last: on a device that runs workgroups in order, as
//   lavapipe, a read of the slot by the others would see it unwritten,
//   and the tests and the self-check fail). Every other entry a row sees was written by an earlier
//   step (the row is its sequence's only one), so the results are
//   paged_qkv then paged_attend's, bit for bit (TestPagedAttendOwn).
//
// PAGED_SPLIT: the rows of a stacked q|k|v matvec ([n][stride]) into q, k
//   and v ([n][...] each), as the batch kernels read them: a step of a few
//   rows runs its products as matvecs over several vectors (the weights
//   read once for all of them). Dispatch Groups(n).
//
// PAGED_QKV: PAGED_SPLIT, RoPE of q and k (rope.comp's rotation, bit for
//   bit) and PAGED_KV in one: for row i < rows[0] of a stacked q|k|v
//   matvec's rows, q rotated into q, k rotated and v into the entry's page
//   slot. The step's few rows (the matvec path) then take one dispatch
//   where they took four. Dispatch Groups(n).
//
// PAGED_ADVANCE: after a step whose rows are each their sequence's only
//   one (a chain of decode steps, engine/vulkan's Stepper.StepChain), each
//   row's routed tables' lengths in rmeta advanced by the rows the step's
//   routed layers took (the trace's selected words, [nRouted][3][stride]),
//   so that the next step recorded after it writes and attends the entries
//   the host would have given it. Dispatch Groups(ceil(n / 64)).
#include "include/common.glsl"
#include "include/push_paged.glsl"

#if defined(PAGED_GATHER)
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Idx { uint idx[]; };        // [count] selected rows, ascending
layout(std430, binding = 1) readonly buffer Count { uint count[]; };    // [1]
layout(std430, binding = 2) readonly buffer RowPos { uint rowPos[]; };  // [n] every row's position
layout(std430, binding = 3) readonly buffer RowSeq { uint rowSeq[]; };  // [n] a word per sequence (its dense table's offset)
layout(std430, binding = 4) readonly buffer RMeta { uint rmeta[]; };    // [n][nRouted][2] (table offset, length before the step)
layout(std430, binding = 5) writeonly buffer Pos { uint pos[]; };       // [n] the selected rows' positions
layout(std430, binding = 6) writeonly buffer RopePos { uint rpos[]; };  // [n] RoPE's positions
layout(std430, binding = 7) writeonly buffer Ent { uint ent[]; };       // [n] their entries
layout(std430, binding = 8) writeonly buffer Toff { uint toff[]; };     // [n] their tables' offsets
layout(std430, binding = 9) readonly buffer X { float x[]; };           // [n][stride] every row's residual
layout(std430, binding = 10) writeonly buffer XS { float xs[]; };       // [count][stride] the selected rows'

void main() {
	uint g = groupIndex();
	if (g >= count[0] || g >= p.n) {
		return; // the whole workgroup
	}
	uint i = idx[g];
	uint src = i * p.stride, dst = g * p.stride;
	for (uint e = gl_LocalInvocationID.x; e < p.stride; e += gl_WorkGroupSize.x) {
		xs[dst + e] = x[src + e];
	}
	if (gl_LocalInvocationID.x != 0u) {
		return;
	}
	uint seq = rowSeq[i], rank = 0u;
	while (rank < g && rowSeq[idx[g - rank - 1u]] == seq) {
		rank++;
	}
	uint m = 2u * (i * p.nRouted + p.routed);
	uint e = rmeta[m + 1u] + rank;
	pos[g] = rowPos[i];
	rpos[g] = p.compact != 0u ? e : rowPos[i];
	ent[g] = e;
	toff[g] = rmeta[m];
}

#elif defined(PAGED_KV)
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer K { float k[]; };          // [n][kvDim], rotated
layout(std430, binding = 1) readonly buffer V { float v[]; };          // [n][kvDim]
layout(std430, binding = 2) readonly buffer Rows { uint rows[]; };     // [1] rows to write (<= n)
layout(std430, binding = 3) readonly buffer Ent { uint ent[]; };       // [n] each row's entry
layout(std430, binding = 4) readonly buffer Toff { uint toff[]; };     // [n] its table's offset
layout(std430, binding = 5) readonly buffer Tables { uint tables[]; }; // the step's block tables
#ifdef KV_F16
layout(std430, binding = 6) writeonly buffer KPool { uint kc[]; };     // [pages*blockTokens][kvDim/2] half2
layout(std430, binding = 7) writeonly buffer VPool { uint vc[]; };
#else
layout(std430, binding = 6) writeonly buffer KPool { float kc[]; };    // [pages*blockTokens][kvDim]
layout(std430, binding = 7) writeonly buffer VPool { float vc[]; };
#endif

void main() {
	uint i = groupIndex();
	if (i >= rows[0] || i >= p.n) {
		return;
	}
	uint e = ent[i];
	uint page = tables[toff[i] + (e / p.blockTokens) * p.width + p.layer];
	uint slot = page * p.blockTokens + e % p.blockTokens;
	uint src = i * p.kvDim;
#ifdef KV_F16
	uint half_ = p.kvDim / 2u, dst = slot * half_;
	for (uint d = gl_LocalInvocationID.x; d < half_; d += gl_WorkGroupSize.x) {
		kc[dst + d] = packHalf2x16(vec2(k[src + 2u * d], k[src + 2u * d + 1u]));
		vc[dst + d] = packHalf2x16(vec2(v[src + 2u * d], v[src + 2u * d + 1u]));
	}
#else
	uint dst = slot * p.kvDim;
	for (uint d = gl_LocalInvocationID.x; d < p.kvDim; d += gl_WorkGroupSize.x) {
		kc[dst + d] = k[src + d];
		vc[dst + d] = v[src + d];
	}
#endif
}

#elif defined(PAGED_ATTENTION)
layout(local_size_x = 16, local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 64; // the head dimension
const float NO_SCORE = -1e30;               // below any score, finite (see decode_attention.comp)

#ifdef PAGED_OWN
#include "include/rope.glsl"
#define POOL_ACCESS                                                     // the own entry is written
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };      // [n][stride] raw: q at 0, k at kOff, v at vOff
layout(std430, binding = 11) readonly buffer RopePos { uint rpos[]; }; // [n] RoPE's positions
layout(std430, binding = 12) readonly buffer Freq { uvec2 freq[]; };   // [headDim/2] RopeFreqs
vec2 pairAt(uint at) { return vec2(qkv[at], qkv[at + 1u]); }
#else
#define POOL_ACCESS readonly
layout(std430, binding = 0) readonly buffer Q { float q[]; };          // [n][nHead*headDim], rotated
#endif
#ifdef KV_F16
layout(std430, binding = 1) POOL_ACCESS buffer KPool { uint k[]; };    // [pages*blockTokens][kvDim/2] half2, rotated
layout(std430, binding = 2) POOL_ACCESS buffer VPool { uint v[]; };
float kAt(uint i) { return unpackHalf2x16(k[i >> 1])[i & 1u]; }
float vAt(uint i) { return unpackHalf2x16(v[i >> 1])[i & 1u]; }
#else
layout(std430, binding = 1) POOL_ACCESS buffer KPool { float k[]; };   // [pages*blockTokens][kvDim], rotated
layout(std430, binding = 2) POOL_ACCESS buffer VPool { float v[]; };
float kAt(uint i) { return k[i]; }
float vAt(uint i) { return v[i]; }
#endif
layout(std430, binding = 3) readonly buffer Rows { uint rows[]; };     // [1] query rows (<= n)
layout(std430, binding = 4) readonly buffer Ent { uint ent[]; };       // [n] each row's entry: it sees 0..ent
layout(std430, binding = 5) readonly buffer Toff { uint toff[]; };     // [n] its table's offset
layout(std430, binding = 6) readonly buffer Tables { uint tables[]; }; // the step's block tables
#ifdef PAGED_MERGE
layout(std430, binding = 7) coherent buffer PartO { float partO[]; };  // [n*nHead*splits][headDim]
layout(std430, binding = 8) coherent buffer PartML { vec2 partML[]; }; // [n*nHead*splits] (m, l)
layout(std430, binding = 9) coherent buffer Done { uint done[]; };     // [n*nHead] tiles done, zero between dispatches
layout(std430, binding = 10) writeonly buffer Out { float out_[]; };   // [n][nHead*headDim]
#include "include/attention_merge.glsl"
shared bool lastTile;
#else
layout(std430, binding = 7) writeonly buffer PartO { float partO[]; }; // [n*nHead*splits][headDim]
layout(std430, binding = 8) writeonly buffer PartML { vec2 partML[]; }; // [n*nHead*splits] (m, l)
#endif

#ifdef PAGED_MERGE
// The query in shared memory, and a chunk's scores: no invocation holds a
// row of HD floats in registers (two such rows, the query and the output,
// spilled on RDNA3's compiler: 115 registers at HD 64, 353 at 128).
const uint DPI = (HD + gl_WorkGroupSize.x - 1u) / gl_WorkGroupSize.x; // output dims an invocation owns
shared float qs[HD];
shared float ssc[gl_WorkGroupSize.x];
#ifdef PAGED_OWN
shared float kn[HD], vn[HD]; // the row's own entry of this kv head, as the pool holds it
#endif

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint g = groupIndex();
	if (g >= p.n * p.nHead * p.splits) {
		return;
	}
	uint s = g % p.splits, ih = g / p.splits;
	uint h = ih % p.nHead, i = ih / p.nHead;
	if (i >= rows[0]) {
		return; // the whole workgroup: i is uniform
	}
	uint kvh = h / (p.nHead / p.nKVHead);
	uint e0 = s * p.splitLen, e1 = min(e0 + p.splitLen, ent[i] + 1u);
	uint base = toff[i];
#ifdef PAGED_OWN
	// paged_qkv's rotation of this head of q, and in the tile holding the
	// row's own entry eo, of its kv head's k (v as it is); the kv head's
	// first query head writes the entry (paged_qkv's KV write).
	uint eo = ent[i], src = i * p.stride, ps = rpos[i];
	bool own = eo >= e0 && eo < e1;
	uint group = p.nHead / p.nKVHead;
	bool writer = own && h % group == group - 1u; // the last of the kv head's: the others, before it in the grid, must not need the slot
	uint dst = 0u; // the entry's first pair of this kv head in the pool: the writer's only
	if (writer) {
		dst = (tables[base + (eo / p.blockTokens) * p.width + p.layer] * p.blockTokens + eo % p.blockTokens) * (p.kvDim / 2u) + kvh * (HD / 2u);
	}
	for (uint j = tid; j < HD / 2u; j += WG) {
		vec2 cs = ropeCosSin(ps, freq[j]);
		vec2 qv = ropeTurn(pairAt(src + h * HD + 2u * j), cs);
		qs[2u * j] = qv.x;
		qs[2u * j + 1u] = qv.y;
		if (own) {
			vec2 kv = ropeTurn(pairAt(src + p.kOff + kvh * HD + 2u * j), cs);
			vec2 vv = pairAt(src + p.vOff + kvh * HD + 2u * j);
#ifdef KV_F16
			uint kw = packHalf2x16(kv), vw = packHalf2x16(vv);
			kv = unpackHalf2x16(kw);
			vv = unpackHalf2x16(vw);
			if (writer) {
				k[dst + j] = kw;
				v[dst + j] = vw;
			}
#else
			if (writer) {
				k[2u * (dst + j)] = kv.x;
				k[2u * (dst + j) + 1u] = kv.y;
				v[2u * (dst + j)] = vv.x;
				v[2u * (dst + j) + 1u] = vv.y;
			}
#endif
			kn[2u * j] = kv.x;
			kn[2u * j + 1u] = kv.y;
			vn[2u * j] = vv.x;
			vn[2u * j + 1u] = vv.y;
		}
	}
#else
	uint qBase = i * p.nHead * HD + h * HD;
	for (uint d = tid; d < HD; d += WG) {
		qs[d] = q[qBase + d];
	}
#endif
	float acc[DPI];
	for (uint c = 0u; c < DPI; c++) {
		acc[c] = 0.0;
	}
	float m = NO_SCORE, l = 0.0;
	barrier();
	// Chunks of WG entries: invocation t scores entry e + t, then each owns
	// the output dims tid, tid + WG, ... of every entry of the chunk.
	for (uint e = e0; e < e1; e += WG) { // uniform
		uint n = min(WG, e1 - e);
		if (tid < n) {
			uint et = e + tid;
			uint page = tables[base + (et / p.blockTokens) * p.width + p.layer];
			uint at = (page * p.blockTokens + et % p.blockTokens) * p.kvDim + kvh * HD;
			float dt = 0.0;
#ifdef PAGED_OWN
			if (et == eo) {
				for (uint d = 0u; d < HD; d++) {
					dt += qs[d] * kn[d];
				}
			} else
#endif
			for (uint d = 0u; d < HD; d++) { // in element order, as mod.Attend sums
				dt += qs[d] * kAt(at + d);
			}
			ssc[tid] = dt * p.scale;
		}
		barrier();
		float mn = m;
		for (uint j = 0u; j < n; j++) {
			mn = maxNaN(mn, ssc[j]);
		}
		float a = exp(m - mn);
		l *= a;
		for (uint c = 0u; c < DPI; c++) {
			acc[c] *= a;
		}
		for (uint j = 0u; j < n; j++) {
			float pe = exp(ssc[j] - mn);
			l += pe;
			uint ej = e + j;
			uint page = tables[base + (ej / p.blockTokens) * p.width + p.layer];
			uint at = (page * p.blockTokens + ej % p.blockTokens) * p.kvDim + kvh * HD;
#ifdef PAGED_OWN
			if (ej == eo) { // uniform
				for (uint c = 0u; c < DPI; c++) {
					uint d = tid + c * WG;
					if (d < HD) {
						acc[c] += pe * vn[d];
					}
				}
				continue;
			}
#endif
			for (uint c = 0u; c < DPI; c++) {
				uint d = tid + c * WG;
				if (d < HD) {
					acc[c] += pe * vAt(at + d);
				}
			}
		}
		m = mn;
		barrier(); // every invocation read the chunk's scores before the next's
	}
	uint pb = ih * p.splits + s;
	for (uint c = 0u; c < DPI; c++) {
		uint d = tid + c * WG;
		if (d < HD) {
			partO[pb * HD + d] = acc[c];
		}
	}
	if (tid == 0u) {
		partML[pb] = vec2(m, l);
	}
#else
// Each invocation an online softmax over every WG-th entry of the tile, a
// query row and an output row in its registers: on lavapipe, where a
// barrier costs and registers do not, 2-3x the chunks' speed (measured);
// GPUs take paged_attend's chunks.
shared float sm[gl_WorkGroupSize.x], sl[gl_WorkGroupSize.x];
shared float sacc[gl_WorkGroupSize.x * HD];

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint g = groupIndex();
	if (g >= p.n * p.nHead * p.splits) {
		return;
	}
	uint s = g % p.splits, ih = g / p.splits;
	uint h = ih % p.nHead, i = ih / p.nHead;
	if (i >= rows[0]) {
		return; // the whole workgroup: i is uniform
	}
	uint kvh = h / (p.nHead / p.nKVHead);
	uint e0 = s * p.splitLen, e1 = min(e0 + p.splitLen, ent[i] + 1u);
	uint base = toff[i];
	float qr[HD], acc[HD];
	uint qBase = i * p.nHead * HD + h * HD;
	for (uint d = 0u; d < HD; d++) {
		qr[d] = q[qBase + d];
		acc[d] = 0.0;
	}
	float m = NO_SCORE, l = 0.0;
	for (uint e = e0 + tid; e < e1; e += WG) {
		uint page = tables[base + (e / p.blockTokens) * p.width + p.layer];
		uint at = (page * p.blockTokens + e % p.blockTokens) * p.kvDim + kvh * HD;
		float dt = 0.0;
		for (uint d = 0u; d < HD; d++) { // in element order, as mod.Attend sums
			dt += qr[d] * kAt(at + d);
		}
		float sc = dt * p.scale;
		float mn = maxNaN(m, sc);
		float a = exp(m - mn), pe = exp(sc - mn);
		l = l * a + pe;
		for (uint d = 0u; d < HD; d++) {
			acc[d] = acc[d] * a + pe * vAt(at + d);
		}
		m = mn;
	}
	sm[tid] = m;
	sl[tid] = l;
	for (uint d = 0u; d < HD; d++) {
		sacc[tid * HD + d] = acc[d];
	}
	barrier();
	float mx = NO_SCORE;
	for (uint t = 0u; t < WG; t++) {
		mx = maxNaN(mx, sm[t]);
	}
	uint pb = ih * p.splits + s;
	for (uint d = tid; d < HD; d += WG) {
		float o = 0.0;
		for (uint t = 0u; t < WG; t++) {
			o += sacc[t * HD + d] * exp(sm[t] - mx);
		}
		partO[pb * HD + d] = o;
	}
	if (tid == 0u) {
		float sum = 0.0;
		for (uint t = 0u; t < WG; t++) {
			sum += sl[t] * exp(sm[t] - mx);
		}
		partML[pb] = vec2(mx, sum);
	}
#endif
#ifdef PAGED_MERGE
	// The last tile of row-head ih to finish merges them all (attention_merge's
	// combine), then sets the count back to zero for the next dispatch.
	memoryBarrierBuffer();
	barrier(); // every invocation's partial writes precede the atomic
	if (tid == 0u) {
		lastTile = atomicAdd(done[ih], 1u) == p.splits - 1u;
	}
	barrier();
	if (!lastTile) {
		return;
	}
	memoryBarrierBuffer();
	mergeSplits(ih, HD, p.splits, tid, WG);
	if (tid == 0u) {
		done[ih] = 0u;
	}
#endif
}
#elif defined(PAGED_SPLIT)
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; }; // [n][stride]
layout(std430, binding = 1) writeonly buffer Q { float q[]; };    // [n][nHead*headDim]
layout(std430, binding = 2) writeonly buffer K { float k[]; };    // [n][kvDim]
layout(std430, binding = 3) writeonly buffer V { float v[]; };    // [n][kvDim]

void main() {
	uint i = groupIndex();
	if (i >= p.n) {
		return;
	}
	uint qd = p.nHead * p.headDim, src = i * p.stride;
	for (uint d = gl_LocalInvocationID.x; d < qd; d += gl_WorkGroupSize.x) {
		q[i * qd + d] = qkv[src + d];
	}
	for (uint d = gl_LocalInvocationID.x; d < p.kvDim; d += gl_WorkGroupSize.x) {
		k[i * p.kvDim + d] = qkv[src + p.kOff + d];
		v[i * p.kvDim + d] = qkv[src + p.vOff + d];
	}
}
#elif defined(PAGED_QKV)
#include "include/rope.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer QKV { float qkv[]; };      // [n][stride]: q at 0, k at kOff, v at vOff
layout(std430, binding = 1) readonly buffer RopePos { uint rpos[]; };  // [n] RoPE's positions
layout(std430, binding = 2) readonly buffer Freq { uvec2 freq[]; };    // [headDim/2] RopeFreqs
layout(std430, binding = 3) readonly buffer Rows { uint rows[]; };     // [1] rows to write (<= n)
layout(std430, binding = 4) readonly buffer Ent { uint ent[]; };       // [n] each row's entry
layout(std430, binding = 5) readonly buffer Toff { uint toff[]; };     // [n] its table's offset
layout(std430, binding = 6) readonly buffer Tables { uint tables[]; }; // the step's block tables
layout(std430, binding = 7) writeonly buffer Q { vec2 q[]; };          // [n][nHead*headDim/2] rotated pairs
#ifdef KV_F16
layout(std430, binding = 8) writeonly buffer KPool { uint kc[]; };     // [pages*blockTokens][kvDim/2] half2
layout(std430, binding = 9) writeonly buffer VPool { uint vc[]; };
#else
layout(std430, binding = 8) writeonly buffer KPool { vec2 kc[]; };     // [pages*blockTokens][kvDim/2] pairs
layout(std430, binding = 9) writeonly buffer VPool { vec2 vc[]; };
#endif

vec2 pairAt(uint at) { return vec2(qkv[at], qkv[at + 1u]); }

void main() {
	uint i = groupIndex();
	if (i >= rows[0] || i >= p.n) {
		return;
	}
	uint half_ = p.headDim / 2u, kvPairs = p.kvDim / 2u, src = i * p.stride, ps = rpos[i];
	uint e = ent[i];
	uint page = tables[toff[i] + (e / p.blockTokens) * p.width + p.layer];
	uint dst = (page * p.blockTokens + e % p.blockTokens) * kvPairs; // the entry's first pair
	for (uint j = gl_LocalInvocationID.x; j < half_; j += gl_WorkGroupSize.x) {
		vec2 cs = ropeCosSin(ps, freq[j]);
		for (uint h = 0u; h < p.nHead; h++) {
			q[(i * p.nHead + h) * half_ + j] = ropeTurn(pairAt(src + h * p.headDim + 2u * j), cs);
		}
		for (uint h = 0u; h < p.nKVHead; h++) {
			vec2 k = ropeTurn(pairAt(src + p.kOff + h * p.headDim + 2u * j), cs);
#ifdef KV_F16
			kc[dst + h * half_ + j] = packHalf2x16(k);
#else
			kc[dst + h * half_ + j] = k;
#endif
		}
	}
	for (uint d = gl_LocalInvocationID.x; d < kvPairs; d += gl_WorkGroupSize.x) {
		vec2 v = pairAt(src + p.vOff + 2u * d);
#ifdef KV_F16
		vc[dst + d] = packHalf2x16(v);
#else
		vc[dst + d] = v;
#endif
	}
}

#elif defined(PAGED_ADVANCE)
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Trace { uint trace[]; }; // [nRouted][3][stride]: r, p, selected
layout(std430, binding = 1) buffer RMeta { uint rmeta[]; };          // [n][nRouted][2] (table offset, length)

void main() {
	uint i = groupIndex() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
	if (i >= p.n) {
		return;
	}
	for (uint j = 0u; j < p.nRouted; j++) {
		if (trace[(3u * j + 2u) * p.stride + i] != 0u) {
			rmeta[2u * (i * p.nRouted + j) + 1u] += 1u;
		}
	}
}
#else
#error "define one of PAGED_GATHER, PAGED_KV, PAGED_ATTENTION, PAGED_SPLIT, PAGED_QKV, PAGED_ADVANCE"
#endif
