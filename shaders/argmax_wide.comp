#version 450
// argmax_wide: argmax (argmax.comp: out[r] = the index of the largest
// x[r][j], ties to the lower index; NONFINITE for a row holding a NaN or an
// infinity) with each row spread over many workgroups, for GPUs: argmax
// gives a row one workgroup of 128 invocations, each walking 250 of a
// 32,000-entry vocabulary one dependent load at a time, 59.2 us a call on
// an H200 (docs/decode-attention-cost.md), where a row's 128 KB take
// 0.03 us to read.
//
// Workgroup s of row r takes the row's columns [s*WG*PER, (s+1)*WG*PER):
// invocation t its PER columns t, t+WG, ... (ascending, loads coalesced and
// independent), keeping its first maximum; the workgroup folds the pairs
// (value, index) in a shared-memory tree where a tie goes to the lower
// index, writes its winner to part and counts itself done (done[r]); the
// row's last workgroup folds the row's partial winners the same way,
// writes out[r] and leaves done[r] at zero for the next dispatch (the
// split-K hand-off of decode_attend: each workgroup's part write is made
// visible before its atomic, the last one reads after it).
//
// The draw (docs/sampling-cost.md): a row whose temperature T = draw[r][0]
// is above 0 gets a token drawn instead, the host's engine.Sampler.drawAll
// in float32: with M the row's largest logit and w_j = exp((x_j - M) / T),
// the first j in id order whose running sum of weights passes u*z, where
// u = draw[r][1] (in [0, 1], drawn by the host) and z the sum of them all;
// a u*z that rounding leaves at or past the total gives the last column,
// as the host does. Each workgroup also sums exp((x_j - m) / T) over its
// columns, m its own largest, into part; the last workgroup weighs each
// block's sum by exp((m - M) / T), finds the block where the running sum
// passes u*z (running sums over invocations, each a run of blocks), then
// that block's column by running sums of its weights (PER contiguous
// columns an invocation). A row with T = 0 is the argmax, bit for bit;
// NONFINITE holds for both.
//
// Top-p (draw[r][4] = TopP in (0, 1); else none): the columns with
// x_j >= t, t the largest logit whose columns and those above it hold
// TopP of the row's probability at temperature 1 or more (engine.Sampler's
// top-p, which keeps every column equal to its crossing). The last
// workgroup finds t (topPCut: 8 ranges of the logits' order-preserving
// bits a pass, 11 passes), each block having summed its weights at
// temperature 1 too (part's fourth word), then draws as min-p does with
// the columns under t weighing 0.
//
// Min-p (draw[r][2] = MinP above 0, draw[r][3] = ln(MinP) as the host
// computes it; MinP 0: none): only the columns with
// x_j - M >= ln(MinP) weigh, the rest weigh 0 (engine.Sampler's min-p,
// whose kept tokens it walks in id order as here). The blocks' own sums
// could not know M, so the last workgroup sums each block's kept weights
// again (a block whose largest is below the floor weighs 0) into part's
// last word, which top-p's total no longer needs; a draw that rounding leaves
// past the total takes the row's last kept column, one left short in a
// block the block's last kept column, as the host's last candidate.
//
// Top-k (draw[r][5] = TopK, an integer in [1, cols); else none): the TopK
// columns of largest logit, the lower ids first among equal ones
// (engine.Sampler's heap), before top-p and min-p. The last workgroup
// finds t, the TopK-th largest logit, by the cut's search with counts
// for masses (cutSearch: integers, exact), and c = TopK less the columns
// above t: every column above t is kept, and of those equal to t the
// first c in id order (kLast, the c-th of them, found only where the ties
// straddle the TopK-th place: tieLast). Top-p then takes its target from
// the kept set's mass at temperature 1 and searches among the kept set's
// keys (t's columns weighing c of them), so its cut is t or above it.
//
// Specialization constants: 0 WG, 1 PER (ArgmaxWideSpec). Dispatch
// ArgmaxWideGroups(n, cols, spec); part holds ArgmaxWidePartWords(n, cols,
// spec) words, done n words zero-filled once.
#include "include/common.glsl"
#define OP_ARGMAX
#include "include/push_dense.glsl"
#include "include/handoff.glsl"

layout(local_size_x = 256, local_size_x_id = 0) in;
layout(constant_id = 1) const uint PER = 4; // columns per invocation

layout(std430, binding = 0) HANDOFF_COHERENT readonly buffer X { float x[]; }; // [n][cols]
layout(std430, binding = 1) writeonly buffer Out { uint out_[]; }; // [n]
layout(std430, binding = 2) coherent buffer Part { uint part[]; }; // [n][groups][4]: a winner's value bits and index, the sums' bits (at T, at 1; the last word then the kept weight)
layout(std430, binding = 3) coherent buffer Done { uint done[]; }; // [n] workgroups done, zero between dispatches
layout(std430, binding = 4) readonly buffer Draw { float draw[]; }; // [n][8]: T (0: the argmax), u, MinP (0: none), ln(MinP), TopP, TopK (0: none), unused

const uint NONFINITE = 0xfffffffeu;
const uint NONE = 0xffffffffu; // no column yet: loses every tie

shared float bestV[gl_WorkGroupSize.x];
shared uint bestI[gl_WorkGroupSize.x];
shared float sums[gl_WorkGroupSize.x];
shared bool last;
shared uint pickT, pickT2; // the invocation whose run holds the draw's block, column (NONE: none)
shared uint pickB; // the draw's block
shared float pickBefore; // the running sum before it
shared uint pickC; // the draw's column
shared uint rowLast, blkLast; // the row's and the block's last kept column, plus 1 (0: none yet)
const uint SEARCH_ILP = 8u; // topPCut's columns an invocation loads at once
const uint RANGES = 8u; // topPCut's ranges a pass: 8 KB of shared memory at 256 invocations (16 would pass 16 KB with the rest)
shared float hist[RANGES * gl_WorkGroupSize.x]; // topPCut: each invocation's mass in each range of keys
shared uint selLo, selHi; // topPCut: the range of keys holding the cut
const uint CANDIDATES = 1024u; // topPCut's list of the columns still in range, once they fit (4 KB)
shared float cand[CANDIDATES];
shared uint candN; // topPCut: columns appended to cand (past CANDIDATES: too many)
shared bool candOn; // topPCut: cand holds every column of the range, candN of them
shared float selAbove; // topPCut: the mass above selHi
shared float selMass; // cutSearch: the mass of the range picked last (one key once the search ends)
shared uint tieAt; // tieLast: the c-th tie's column

// beats says whether (v, i) wins over (bv, bi): NONFINITE beats
// everything, NONE nothing; a tie goes to the lower index.
bool beats(float v, uint i, float bv, uint bi) {
	return i == NONFINITE || (bi != NONFINITE && i != NONE && (bi == NONE || v > bv || (v == bv && i < bi)));
}

// fold leaves the workgroup's winner of (bv, bi) in bestV[0], bestI[0].
void fold(uint tid, float bv, uint bi) {
	bestV[tid] = bv;
	bestI[tid] = bi;
	barrier();
	for (uint width = gl_WorkGroupSize.x; width > 1u;) {
		uint half_ = (width + 1u) / 2u;
		if (tid < width - half_ && beats(bestV[tid + half_], bestI[tid + half_], bestV[tid], bestI[tid])) {
			bestV[tid] = bestV[tid + half_];
			bestI[tid] = bestI[tid + half_];
		}
		width = half_;
		barrier();
	}
}

// total is the workgroup's sum of v (a shared-memory tree).
float total(uint tid, float v) {
	sums[tid] = v;
	barrier();
	for (uint width = gl_WorkGroupSize.x; width > 1u;) {
		uint half_ = (width + 1u) / 2u;
		if (tid < width - half_) {
			sums[tid] += sums[tid + half_];
		}
		width = half_;
		barrier();
	}
	float s = sums[0];
	barrier(); // every invocation read it before sums is written again
	return s;
}

// scan is the running sum of v up to invocation tid, inclusive; sums then
// holds every invocation's (read it, then barrier before the next scan).
float scan(uint tid, float v) {
	sums[tid] = v;
	barrier();
	for (uint off = 1u; off < gl_WorkGroupSize.x; off <<= 1u) {
		float a = tid >= off ? sums[tid - off] : 0.0;
		barrier();
		sums[tid] += a;
		barrier();
	}
	return sums[tid];
}

// blockWeight is block b's sum of weights relative to the row's largest
// logit M: its own sum, relative to its own largest, scaled; with min-p,
// the sum of its kept weights the last workgroup wrote in the last word.
float blockWeight(uint at, float M, float inv, bool filtered) {
	if (filtered) {
		return uintBitsToFloat(part[4u * at + 3u]);
	}
	return uintBitsToFloat(part[4u * at + 2u]) * exp((uintBitsToFloat(part[4u * at]) - M) * inv);
}

// Top-k's cut for the kept and weight of the last workgroup: the TopK-th
// largest logit kT and the last column equal to it that is kept (NONE:
// every one, or no top-k).
float kT = 0.0;
uint kLast = NONE;

// kept says whether column j of value v is kept: at or above the min-p
// floor fl (relative to M) and the cut (top-p's or top-k's; -inf: none),
// and, equal to top-k's kT, not past kLast.
bool kept(float v, uint j, float M, float fl, float cut) { return v - M >= fl && v >= cut && (v != kT || j <= kLast); }

// weight is column j of value v's weight relative to M: 0 where not kept.
float weight(float v, uint j, float M, float inv, float fl, float cut) {
	return kept(v, j, M, fl, cut) ? exp((v - M) * inv) : 0.0;
}

// orderKey is v's bits ordered as floats are (-0 as +0: the host's
// comparisons take them as equal); keyValue is its inverse.
uint orderKey(float v) {
	uint b = floatBitsToUint(v);
	if (b == 0x80000000u) {
		b = 0u;
	}
	return (b & 0x80000000u) != 0u ? ~b : b | 0x80000000u;
}

float keyValue(uint k) { return uintBitsToFloat((k & 0x80000000u) != 0u ? k & 0x7fffffffu : ~k); }

// topPCut is the largest logit t of row base whose columns at or above it
// weigh target or more at temperature 1 (weights exp(x - M)): the range
// of keys (orderKey) that holds it, from all of them, cut into RANGES a pass,
// the first range from the top whose running sum reaches target kept
// (where rounding leaves none, the lowest with weight). Every invocation
// returns it. cutSearch is the search itself: with count, each column
// weighs 1 (top-k's cut: the sums are integers, exact in float32 up to
// 2^24 columns); with a floor key, the columns below it weigh nothing
// (top-p among top-k's kept columns); with ties, the columns equal to tieV
// weigh tieMass together, whatever their number (top-k keeps c of them).
// selAbove is then the mass above the cut, selMass the cut's own.
//
// From the fourth pass (the ranges are then one float exponent wide or
// less), a pass over the row also appends its columns in range to cand;
// when they fit, the passes after it read the list, not the row (the next
// range lies inside this one).
float cutSearch(uint tid, uint base, float M, float target, bool count, uint floorKey, bool ties, float tieV, float tieMass) {
	const uint WG = gl_WorkGroupSize.x;
	if (tid == 0u) {
		selLo = floorKey;
		selMass = 0.0;
		selHi = orderKey(M);
		selAbove = 0.0;
		candN = 0u;
		candOn = false;
	}
	barrier();
	for (uint pass = 0u; pass < 16u; pass++) { // 11 passes of 8 ranges reach one key
		uint lo = selLo, hi = selHi, listed = candN;
		bool fromList = candOn, append = !candOn && pass >= 3u;
		if (lo == hi) {
			break; // uniform: every invocation read the same after the barrier
		}
		uint step = (hi - lo) / RANGES + 1u; // range b holds the keys (hi - (b+1)*step, hi - b*step]
		for (uint b = 0u; b < RANGES; b++) {
			hist[b * WG + tid] = 0.0;
		}
		barrier(); // every invocation read candN before an append changes it
		if (fromList) {
			for (uint i = tid; i < listed; i += WG) {
				float v = cand[i];
				uint k = orderKey(v);
				if (k >= lo && k <= hi && !(ties && v == tieV)) {
					hist[((hi - k) / step) * WG + tid] += count ? 1.0 : exp(v - M);
				}
			}
		} else {
			// SEARCH_ILP columns an iteration, their loads issued together: one
			// workgroup reads the whole row, so it is bound by the loads'
			// latency, not by bandwidth.
			for (uint j0 = tid; j0 < p.cols; j0 += SEARCH_ILP * WG) {
				float v[SEARCH_ILP];
				for (uint u = 0u; u < SEARCH_ILP; u++) {
					uint j = j0 + u * WG;
					v[u] = j < p.cols ? x[base + j] : M; // M's key is in range, but only a column adds
				}
				for (uint u = 0u; u < SEARCH_ILP; u++) {
					uint k = orderKey(v[u]);
					if (j0 + u * WG < p.cols && k >= lo && k <= hi && !(ties && v[u] == tieV)) {
						hist[((hi - k) / step) * WG + tid] += count ? 1.0 : exp(v[u] - M);
						if (append) {
							uint slot = atomicAdd(candN, 1u);
							if (slot < CANDIDATES) {
								cand[slot] = v[u];
							}
						}
					}
				}
			}
		}
		barrier();
		for (uint width = WG; width > 1u;) { // each range's sum over the invocations, a tree as total's
			uint half_ = (width + 1u) / 2u, pairs = width - half_;
			for (uint item = tid; item < RANGES * pairs; item += WG) {
				uint b = item / pairs, i = item % pairs;
				hist[b * WG + i] += hist[b * WG + i + half_];
			}
			width = half_;
			barrier();
		}
		if (tid == 0u) {
			if (ties) { // tieV's columns, c of them
				uint k = orderKey(tieV);
				if (k >= lo && k <= hi) {
					hist[((hi - k) / step) * WG] += tieMass;
				}
			}
			float cum = selAbove, before = cum, beforeLast = cum;
			uint pick = NONE, lastWeighed = NONE;
			for (uint b = 0u; b < RANGES; b++) {
				float m = hist[b * WG];
				if (m > 0.0) {
					lastWeighed = b;
					beforeLast = cum;
					if (cum + m >= target) {
						pick = b;
						before = cum;
						break;
					}
				}
				cum += m;
			}
			if (pick == NONE) {
				pick = lastWeighed;
				before = beforeLast;
			}
			selMass = hist[pick * WG];
			uint top = hi - pick * step;
			selHi = top;
			selLo = top - lo < step - 1u ? lo : top - (step - 1u);
			selAbove = before;
			if (!candOn) { // the list holds every column of this range, so of the next, or is dropped
				candOn = append && candN <= CANDIDATES;
				if (!candOn) {
					candN = 0u;
				}
			}
		}
		barrier();
	}
	return keyValue(selLo);
}

float topPCut(uint tid, uint base, float M, float target) {
	return cutSearch(tid, base, M, target, false, 0u, false, 0.0, 0.0);
}

// tieLast is the column of row base's c-th column equal to t in id order
// (c at least 1, at most their number): the blocks in order (those whose
// largest is below t hold none), each counting its columns equal to t by
// a scan over its invocations' PER contiguous columns, to the block where
// the running count reaches c, then in it the invocation, then the column.
// Every invocation returns it.
uint tieLast(uint tid, uint base, uint groups, uint r, float t, uint c) {
	uint span = gl_WorkGroupSize.x * PER;
	uint seen = 0u;
	for (uint b = 0u; b < groups; b++) { // uniform: part's maxima and the scans' totals are the same for every invocation
		if (uintBitsToFloat(part[4u * (r * groups + b)]) < t) {
			continue;
		}
		uint j0 = b * span + tid * PER, mine = 0u;
		for (uint k = 0u; k < PER; k++) {
			if (j0 + k < p.cols && x[base + j0 + k] == t) {
				mine++;
			}
		}
		uint incl = uint(scan(tid, float(mine)));
		uint blockN = uint(sums[gl_WorkGroupSize.x - 1u]);
		if (seen + blockN >= c) {
			uint need = c - seen; // the need-th of this block's ties
			if (mine > 0u && incl >= need && incl - mine < need) {
				uint left = need - (incl - mine);
				for (uint k = 0u; k < PER; k++) {
					if (j0 + k < p.cols && x[base + j0 + k] == t) {
						left--;
						if (left == 0u) {
							tieAt = j0 + k;
							break;
						}
					}
				}
			}
			barrier();
			return tieAt;
		}
		seen += blockN;
		barrier(); // every invocation read sums before the next scan
	}
	return NONE; // not reached: c is at most the ties' number
}

void main() {
	const uint WG = gl_WorkGroupSize.x;
	uint tid = gl_LocalInvocationID.x;
	uint span = WG * PER;
	uint groups = (p.cols + span - 1u) / span; // workgroups per row
	uint g = groupIndex();
	uint r = g / groups, s = g % groups;
	if (r >= p.n) {
		return; // a surplus workgroup of a 2D grid
	}
	uint base = r * p.cols;
	float temp = draw[8u * r];
	bool drawRow = temp > 0.0; // the same for the whole row
	float inv = drawRow ? 1.0 / temp : 0.0;
	float NEG_INF = uintBitsToFloat(0xff800000u);
	bool minP = drawRow && draw[8u * r + 2u] > 0.0;
	float fl = minP ? draw[8u * r + 3u] : NEG_INF; // -inf: every finite column kept
	float tp = draw[8u * r + 4u];
	bool topP = drawRow && tp > 0.0 && tp < 1.0;
	float tk = draw[8u * r + 5u];
	bool topK = drawRow && tk >= 1.0 && tk < float(p.cols);
	bool filtered = minP || topP || topK;
	float cut = NEG_INF; // top-p's, found by the last workgroup
	float bv = 0.0;
	uint bi = NONE;
	for (uint k = 0u; k < PER; k++) {
		uint j = s * span + k * WG + tid; // ascending in k: a strict > keeps the first maximum
		if (j < p.cols) {
			float v = x[base + j];
			if (isnan(v) || isinf(v)) {
				bi = NONFINITE;
			} else if (bi != NONFINITE && (bi == NONE || v > bv)) {
				bv = v;
				bi = j;
			}
		}
	}
	fold(tid, bv, bi);
	float mb = bestV[0];
	uint ib = bestI[0];
	float sb = 0.0, s1 = 0.0;
	if (drawRow && ib != NONFINITE) { // the block's sum of weights, relative to mb
		float acc = 0.0, acc1 = 0.0;
		for (uint k = 0u; k < PER; k++) {
			uint j = s * span + k * WG + tid;
			if (j < p.cols) {
				float v = x[base + j];
				acc += exp((v - mb) * inv);
				if (topP && !topK) { // the row's: a plain draw takes no second exp, top-k sums its own
					acc1 += exp(v - mb);
				}
			}
		}
		sb = total(tid, acc);
		if (topP && !topK) { // uniform: the row's
			s1 = total(tid, acc1);
		}
	}
	uint at = 4u * (r * groups + s);
	if (tid == 0u) {
		part[at] = floatBitsToUint(mb);
		part[at + 1u] = ib;
		part[at + 2u] = floatBitsToUint(sb);
		part[at + 3u] = floatBitsToUint(s1);
	}
	memoryBarrierBuffer();
	barrier(); // the part write precedes the atomic
	if (tid == 0u) {
		last = atomicAdd(done[r], 1u) == groups - 1u;
	}
	barrier();
	if (!last) {
		return;
	}
	memoryBarrierBuffer();
	bv = 0.0;
	bi = NONE;
	for (uint t = tid; t < groups; t += WG) {
		float v = uintBitsToFloat(part[4u * (r * groups + t)]);
		uint i = part[4u * (r * groups + t) + 1u];
		if (beats(v, i, bv, bi)) {
			bv = v;
			bi = i;
		}
	}
	fold(tid, bv, bi);
	float M = bestV[0];
	uint best = bestI[0];
	if (!drawRow || best == NONFINITE) {
		if (tid == 0u) {
			out_[r] = best;
			done[r] = 0u;
		}
		return;
	}
	if (topK) {
		// t, the TopK-th largest, with the count above it and its own.
		uint K = uint(tk);
		float t = cutSearch(tid, base, M, float(K), true, 0u, false, 0.0, 0.0);
		uint above = uint(selAbove), nTies = uint(selMass);
		uint c = K - above; // t's columns kept: 1 to nTies
		kT = t;
		cut = t;
		if (c < nTies) { // the ties straddle the TopK-th place: the first c by id
			kLast = tieLast(tid, base, groups, r, t, c);
		}
		if (topP) {
			// The kept set's weight at temperature 1: the columns above t,
			// and c of t's.
			float acc = 0.0;
			for (uint j = tid; j < p.cols; j += WG) {
				float v = x[base + j];
				if (v > t) {
					acc += exp(v - M);
				}
			}
			float tieMass = float(c) * exp(t - M);
			float z1 = total(tid, acc) + tieMass;
			cut = cutSearch(tid, base, M, tp * z1, false, orderKey(t), true, t, tieMass);
		}
	} else if (topP) {
		// The row's weight at temperature 1, from the blocks' own sums.
		uint per1 = (groups + WG - 1u) / WG;
		float z1 = 0.0;
		for (uint b = min(groups, tid * per1); b < min(groups, tid * per1 + per1); b++) {
			uint at1 = 4u * (r * groups + b);
			z1 += uintBitsToFloat(part[at1 + 3u]) * exp(uintBitsToFloat(part[at1]) - M);
		}
		cut = topPCut(tid, base, M, tp * total(tid, z1));
	}
	if (filtered) {
		// Each block's kept weights relative to M, summed again (the blocks'
		// own sums could not know the floor or the cuts), into part's last
		// word, which the sums at temperature 1 no longer need.
		if (tid == 0u) {
			rowLast = best + 1u; // the argmax is kept (M - M = 0 >= fl for MinP <= 1; M >= cut; the first of M's columns)
		}
		uint keptLast = 0u;
		for (uint b = 0u; b < groups; b++) { // uniform: part's maxima are the same for every invocation
			uint pat = 4u * (r * groups + b);
			float w = 0.0;
			if (kept(uintBitsToFloat(part[pat]), part[pat + 1u], M, fl, cut)) { // the block's largest, its first: a later column equal to it is past kLast where it is
				uint j0 = b * span + tid * PER;
				float acc = 0.0;
				for (uint k = 0u; k < PER; k++) {
					if (j0 + k < p.cols) {
						float v = x[base + j0 + k];
						if (kept(v, j0 + k, M, fl, cut)) {
							acc += exp((v - M) * inv);
							keptLast = j0 + k + 1u;
						}
					}
				}
				w = total(tid, acc);
			}
			if (tid == 0u) {
				part[pat + 3u] = floatBitsToUint(w);
			}
		}
		atomicMax(rowLast, keptLast);
		memoryBarrierBuffer();
		barrier(); // every block's weight written before any is read
	}
	// The block: invocation t sums the blocks [b0, b1), a run of them. The
	// running sums over invocations (scan) are not monotone to the last
	// rounding (each is its own tree of additions), so the run is the first
	// with weight whose running sum passes u*z, found by atomicMin, not the
	// one whose interval holds it: exactly one, or none past the total.
	uint per = (groups + WG - 1u) / WG;
	uint b0 = min(groups, tid * per), b1 = min(groups, b0 + per);
	float c = 0.0;
	for (uint b = b0; b < b1; b++) {
		c += blockWeight(r * groups + b, M, inv, filtered);
	}
	if (tid == 0u) {
		pickT = NONE;
		pickT2 = NONE;
		blkLast = 0u;
	}
	float incl = scan(tid, c);
	float excl = tid > 0u ? sums[tid - 1u] : 0.0;
	float target = draw[8u * r + 1u] * sums[WG - 1u];
	if (c > 0.0 && target < incl) {
		atomicMin(pickT, tid);
	}
	barrier();
	if (pickT == NONE) { // rounding left u*z at the total: the last (kept) column, as the host
		if (tid == 0u) {
			out_[r] = filtered ? rowLast - 1u : p.cols - 1u;
			done[r] = 0u;
		}
		return;
	}
	if (tid == pickT) { // the first block with weight that passes; left short, the run's last with weight
		float cum = excl, before = excl;
		uint pick = b1 - 1u;
		for (uint b = b0; b < b1; b++) {
			float w = blockWeight(r * groups + b, M, inv, filtered);
			if (w > 0.0) {
				before = cum;
				pick = b;
				if (target < cum + w) {
					break;
				}
			}
			cum += w;
		}
		pickB = pick;
		pickBefore = before;
	}
	barrier();
	// The column: invocation t's PER contiguous columns of the block, the
	// first with weight whose running sum passes what is left of u*z.
	uint blk = pickB;
	float target2 = target - pickBefore;
	uint j0 = blk * span + tid * PER;
	float acc = 0.0;
	uint keptLast = 0u;
	for (uint k = 0u; k < PER; k++) {
		if (j0 + k < p.cols) {
			float v = x[base + j0 + k];
			acc += weight(v, j0 + k, M, inv, fl, cut);
			if (kept(v, j0 + k, M, fl, cut)) {
				keptLast = j0 + k + 1u;
			}
		}
	}
	atomicMax(blkLast, keptLast);
	incl = scan(tid, acc);
	excl = tid > 0u ? sums[tid - 1u] : 0.0;
	if (acc > 0.0 && target2 < incl) {
		atomicMin(pickT2, tid);
	}
	barrier();
	if (tid == pickT2) { // the first column with weight that passes; left short, the last with weight
		float cum = excl;
		uint col = min(p.cols, j0 + PER) - 1u;
		for (uint k = 0u; k < PER && j0 + k < p.cols; k++) {
			float w = weight(x[base + j0 + k], j0 + k, M, inv, fl, cut);
			cum += w;
			if (w > 0.0) {
				col = j0 + k;
				if (target2 < cum) {
					break;
				}
			}
		}
		pickC = col;
	}
	barrier();
	if (tid == 0u) {
		out_[r] = pickT2 != NONE ? pickC : blkLast - 1u; // none: rounding, the block's last (kept) column
		done[r] = 0u;
	}
}
#include "include/handoff_main.glsl"
