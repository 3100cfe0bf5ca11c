// handoff_main.glsl: the HANDOFF variant's main (include/handoff.glsl), at
// the end of the kernel's file. Nothing without HANDOFF.
#ifdef HANDOFF
#undef main
void main() {
	if (p.handWait != 0u) {
		if (gl_LocalInvocationIndex == 0u) {
			for (uint it = 0u; atomicAdd(hand[p.handWait], 0u) < p.handNeed; it++) {
				if (it == HANDOFF_SPIN) {
					atomicOr(hand[0], 1u); // stalled: go on, wrong
					break;
				}
			}
		}
		barrier();
		memoryBarrierBuffer(); // the earlier dispatch's writes, seen after its count
	}
	kernelMain();
	memoryBarrierBuffer(); // this workgroup's writes, before the count that says they are done
	barrier();
	if (gl_LocalInvocationIndex == 0u) {
		atomicAdd(hand[p.handSlot], 1u);
	}
}
#endif
