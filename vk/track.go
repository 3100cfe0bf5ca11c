package vk

import (
	"fmt"
	"strings"
)

// Barrier derivation. The recorder tells the tracker, for each command, which
// buffer ranges it reads and writes and in which pipeline stage; the tracker
// answers with the barrier that must precede the command, or none. A barrier
// is needed exactly when the command
//   - reads what an earlier command wrote (RAW: the write must be finished
//     and visible, or the read sees stale memory),
//   - writes what an earlier command read (WAR: the read must finish first,
//     or it sees the new value), or
//   - writes what an earlier command wrote (WAW: the writes must land in order),
// and no barrier recorded since already ordered the two, and the two did
// not both bind it with Handoff (the kernels order those themselves).

// Pipeline stages and access masks: the VkPipelineStageFlagBits and
// VkAccessFlagBits values (the Vulkan spec fixes them).
const (
	stageDrawIndirect uint32 = 0x00000002
	stageCompute      uint32 = 0x00000800
	stageTransfer     uint32 = 0x00001000
	stageHost         uint32 = 0x00004000
	stageConditional  uint32 = 0x00040000 // VK_EXT_conditional_rendering's predicate read

	accessIndirectRead    uint32 = 0x00000001
	accessShaderRead      uint32 = 0x00000020
	accessShaderWrite     uint32 = 0x00000040
	accessTransferRead    uint32 = 0x00000800
	accessTransferWrite   uint32 = 0x00001000
	accessHostRead        uint32 = 0x00002000
	accessConditionalRead uint32 = 0x00100000
)

// allStages are the stages commands of a recorder run in. An access ordered
// before all of them can never cause a hazard again. A device with
// conditional rendering adds stageConditional (Device.stages): a barrier may
// name that stage only where the extension is enabled.
const allStages = stageDrawIndirect | stageCompute | stageTransfer

// stages are the stages this device's commands run in.
func (d *Device) stages() uint32 {
	if d.info.Features.ConditionalRendering {
		return allStages | stageConditional
	}
	return allStages
}

// use is one command's access to a buffer range [off, end).
type use struct {
	buf      *Buffer
	off, end uint64
	write    bool
	stage    uint32
	access   uint32
	handoff  bool // Access Handoff: ordered by the kernels against an earlier Handoff use
}

// entry is an earlier access still tracked. synced holds the stages that a
// recorded barrier has already ordered after it (and, for a write, made its
// data visible to).
type entry struct {
	use
	synced uint32
}

// bufferBarrier is one VkBufferMemoryBarrier.
type bufferBarrier struct {
	buf                  *Buffer
	off, end             uint64
	srcAccess, dstAccess uint32
}

// barrier is one vkCmdPipelineBarrier: of buffer memory barriers, or, when
// buffers is empty, of one global memory barrier with srcAccess and
// dstAccess.
type barrier struct {
	srcStages, dstStages uint32
	buffers              []bufferBarrier
	srcAccess, dstAccess uint32 // the global memory barrier's
}

// tracker holds, per buffer, the accesses not yet ordered before every stage.
type tracker struct {
	all     uint32 // the device's stages (Device.stages); 0 means allStages
	entries map[*Buffer][]entry
	// The stages and accesses that wrote host-visible buffers: the end of
	// the command buffer needs a barrier from them to the host.
	hostStages, hostAccess uint32
}

func overlaps(a, b use) bool { return a.off < b.end && b.off < a.end }

// accessWiden records a command's uses and returns the barrier that must be
// recorded before it (nil when none is needed).
//
// A barrier's cost is mostly the wait it imposes, not its size, so once one is
// needed it also makes every other pending write visible to the command's
// stages: a later command that reads one of them then needs no barrier of its
// own (q, k and v written side by side, then read together, cost one).
//
// A widen of stages beyond the command's own also orders everything before
// the barrier ahead of those stages and makes every pending write visible
// there: for a command whose own stage is not where the commands after it
// run (a conditional span's predicate read), so that they need no barrier
// of their own. 0 widens nothing.
func (t *tracker) accessWiden(uses []use, widen uint32) *barrier {
	if t.entries == nil {
		t.entries = map[*Buffer][]entry{}
	}
	var b barrier
	for _, u := range uses {
		for _, e := range t.entries[u.buf] {
			if !overlaps(e.use, u) || e.synced&u.stage != 0 || (!e.write && !u.write) || (e.handoff && u.handoff) {
				continue
			}
			src := uint32(0) // WAR: an execution dependency is enough
			if e.write {
				src = e.access
			}
			b.srcStages |= e.stage
			b.dstStages |= u.stage
			b.add(u.buf, min(e.off, u.off), max(e.end, u.end), src, u.access)
		}
	}
	if b.srcStages == 0 {
		for _, u := range uses {
			t.add(u)
		}
		return nil
	}
	b.dstStages |= widen
	dstAccess := accessesOf(b.dstStages)
	for buf, es := range t.entries {
		for _, e := range es {
			if e.write && e.synced&b.dstStages == 0 {
				b.srcStages |= e.stage
				b.add(buf, e.off, e.end, e.access, dstAccess)
			}
		}
	}
	t.apply(&b)
	for _, u := range uses {
		t.add(u)
	}
	return &b
}

func (t *tracker) stages() uint32 {
	if t.all == 0 {
		return allStages
	}
	return t.all
}

// accessesOf is every access a command can make in stages.
func accessesOf(stages uint32) uint32 {
	var a uint32
	if stages&stageCompute != 0 {
		a |= accessShaderRead | accessShaderWrite
	}
	if stages&stageTransfer != 0 {
		a |= accessTransferRead | accessTransferWrite
	}
	if stages&stageDrawIndirect != 0 {
		a |= accessIndirectRead
	}
	if stages&stageConditional != 0 {
		a |= accessConditionalRead
	}
	return a
}

// add merges a buffer barrier into b: one per buffer, spanning the union of
// the conflicting ranges.
func (b *barrier) add(buf *Buffer, off, end uint64, src, dst uint32) {
	for i := range b.buffers {
		if bb := &b.buffers[i]; bb.buf == buf {
			bb.off, bb.end = min(bb.off, off), max(bb.end, end)
			bb.srcAccess |= src
			bb.dstAccess |= dst
			return
		}
	}
	b.buffers = append(b.buffers, bufferBarrier{buf, off, end, src, dst})
}

// apply marks what the barrier b orders: every earlier access in its source
// stages is now ordered before its destination stages (execution dependencies
// cover all earlier commands), and a write is also made visible there when a
// buffer barrier of b covers its range with its access.
func (t *tracker) apply(b *barrier) {
	for buf, es := range t.entries {
		for i := range es {
			e := &es[i]
			if e.stage&b.srcStages == 0 {
				continue
			}
			if !e.write || b.covers(buf, e.off, e.end, e.access) {
				e.synced |= b.dstStages
			}
		}
	}
}

func (b *barrier) covers(buf *Buffer, off, end uint64, access uint32) bool {
	for _, bb := range b.buffers {
		if bb.buf == buf && bb.off <= off && end <= bb.end && bb.srcAccess&access == access {
			return true
		}
	}
	return false
}

// add tracks u. A write supersedes the earlier accesses it covers that are
// already ordered before it; entries ordered before every stage are dropped.
func (t *tracker) add(u use) {
	es := t.entries[u.buf][:0:0]
	for _, e := range t.entries[u.buf] {
		switch {
		case e.synced&t.stages() == t.stages():
			continue
		case u.write && e.synced&u.stage != 0 && u.off <= e.off && e.end <= u.end:
			continue
		case !u.write && !e.write && e.stage == u.stage && u.off <= e.off && e.end <= u.end:
			// An older read inside a newer one in the same stage: a barrier
			// that orders the newer read orders the older one too.
			continue
		}
		es = append(es, e)
	}
	t.entries[u.buf] = append(es, entry{use: u})
	if u.write && u.buf.kind == HostVisible {
		t.hostStages |= u.stage
		t.hostAccess |= u.access
	}
}

// Stages and accesses the derived barriers never name; the
// conditional-rendering diagnostic compares barriers made of them.
const (
	stageAllCommands  uint32 = 0x00010000
	accessMemoryRead  uint32 = 0x00008000
	accessMemoryWrite uint32 = 0x00010000
)

var stageNames = []struct {
	bit  uint32
	name string
}{
	{stageDrawIndirect, "DRAW_INDIRECT"}, {stageCompute, "COMPUTE_SHADER"}, {stageTransfer, "TRANSFER"},
	{stageHost, "HOST"}, {stageAllCommands, "ALL_COMMANDS"}, {stageConditional, "CONDITIONAL_RENDERING"},
}

var accessNames = []struct {
	bit  uint32
	name string
}{
	{accessIndirectRead, "INDIRECT_COMMAND_READ"}, {accessShaderRead, "SHADER_READ"}, {accessShaderWrite, "SHADER_WRITE"},
	{accessTransferRead, "TRANSFER_READ"}, {accessTransferWrite, "TRANSFER_WRITE"}, {accessHostRead, "HOST_READ"},
	{accessMemoryRead, "MEMORY_READ"}, {accessMemoryWrite, "MEMORY_WRITE"}, {accessConditionalRead, "CONDITIONAL_RENDERING_READ"},
}

// flagNames spells mask as its Vulkan names joined by |, with any bit it
// does not know in hex.
func flagNames(mask uint32, names []struct {
	bit  uint32
	name string
}) string {
	if mask == 0 {
		return "0"
	}
	var s []string
	for _, n := range names {
		if mask&n.bit != 0 {
			s = append(s, n.name)
			mask &^= n.bit
		}
	}
	if mask != 0 {
		s = append(s, fmt.Sprintf("%#x", mask))
	}
	return strings.Join(s, "|")
}

// String spells the barrier as vkCmdPipelineBarrier gets it, for the
// diagnostics that print what was recorded.
func (b *barrier) String() string { return b.describe(nil) }

// describe is String with the buffers named by name (nil: by address).
func (b *barrier) describe(name func(*Buffer) string) string {
	if name == nil {
		name = func(buf *Buffer) string { return fmt.Sprintf("%p", buf) }
	}
	var s strings.Builder
	fmt.Fprintf(&s, "src %s -> dst %s", flagNames(b.srcStages, stageNames), flagNames(b.dstStages, stageNames))
	if len(b.buffers) == 0 {
		fmt.Fprintf(&s, ", memory %s -> %s", flagNames(b.srcAccess, accessNames), flagNames(b.dstAccess, accessNames))
	}
	for _, bb := range b.buffers {
		fmt.Fprintf(&s, ", buffer %s [%d,%d) %s -> %s", name(bb.buf), bb.off, bb.end,
			flagNames(bb.srcAccess, accessNames), flagNames(bb.dstAccess, accessNames))
	}
	return s.String()
}
