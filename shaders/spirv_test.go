package shaders

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// A reader of just enough SPIR-V to check a variant's interface against the
// table: the push-constant block's members, the storage buffers' bindings and
// access, the workgroup size and the specialization constants.

// SPIR-V opcodes, decorations and storage classes used here (SPIR-V 1.5 spec).
const (
	opName            = 5
	opMemberName      = 6
	opExecutionMode   = 16
	opTypeInt         = 21
	opTypeFloat       = 22
	opTypeStruct      = 30
	opTypePointer     = 32
	opVariable        = 59
	opDecorate        = 71
	opMemberDecorate  = 72
	decSpecID         = 1
	decNonWritable    = 24
	decNonReadable    = 25
	decBinding        = 33
	decDescriptorSet  = 34
	decOffset         = 35
	modeLocalSize     = 17
	classPushConstant = 9
	classStorage      = 12
)

type member struct {
	name   string
	offset uint32
	typ    string // "uint32", "int32", "float32" or "other"
}

type storageBinding struct {
	set, binding             uint32
	nonWritable, nonReadable bool
}

type module struct {
	push      []member // nil when the kernel has no push constants
	bindings  []storageBinding
	localSize [3]uint32
	specIDs   []uint32
}

func parseSPIRV(b []byte) (*module, error) {
	if len(b)%4 != 0 || len(b) < 20 || binary.LittleEndian.Uint32(b) != 0x07230203 {
		return nil, fmt.Errorf("not little-endian SPIR-V")
	}
	words := make([]uint32, len(b)/4)
	for i := range words {
		words[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	var (
		m           = &module{}
		memberNames = map[[2]uint32]string{}
		memberOff   = map[[2]uint32]uint32{}
		memberDecs  = map[uint32]map[uint32]bool{} // struct id -> decorations on any member
		decs        = map[uint32]map[uint32]uint32{}
		structs     = map[uint32][]uint32{}
		scalars     = map[uint32]string{}
		pointers    = map[uint32][2]uint32{} // id -> (storage class, pointee)
		variables   = map[uint32][2]uint32{} // id -> (pointer type, storage class)
	)
	for i := 5; i < len(words); {
		n, op := int(words[i]>>16), words[i]&0xffff
		if n == 0 || i+n > len(words) {
			return nil, fmt.Errorf("bad instruction at word %d", i)
		}
		ops := words[i+1 : i+n]
		switch op {
		case opMemberName:
			memberNames[[2]uint32{ops[0], ops[1]}] = spirvString(ops[2:])
		case opExecutionMode:
			if ops[1] == modeLocalSize {
				copy(m.localSize[:], ops[2:5])
			}
		case opTypeInt:
			scalars[ops[0]] = "other"
			if ops[1] == 32 {
				scalars[ops[0]] = map[uint32]string{0: "uint32", 1: "int32"}[ops[2]]
			}
		case opTypeFloat:
			scalars[ops[0]] = "other"
			if ops[1] == 32 {
				scalars[ops[0]] = "float32"
			}
		case opTypeStruct:
			structs[ops[0]] = append([]uint32(nil), ops[1:]...)
		case opTypePointer:
			pointers[ops[0]] = [2]uint32{ops[1], ops[2]}
		case opVariable:
			variables[ops[1]] = [2]uint32{ops[0], ops[2]}
		case opDecorate:
			if decs[ops[0]] == nil {
				decs[ops[0]] = map[uint32]uint32{}
			}
			val := uint32(0)
			if len(ops) > 2 {
				val = ops[2]
			}
			decs[ops[0]][ops[1]] = val
			if ops[1] == decSpecID {
				m.specIDs = append(m.specIDs, val)
			}
		case opMemberDecorate:
			if ops[2] == decOffset {
				memberOff[[2]uint32{ops[0], ops[1]}] = ops[3]
			}
			if memberDecs[ops[0]] == nil {
				memberDecs[ops[0]] = map[uint32]bool{}
			}
			memberDecs[ops[0]][ops[2]] = true
		}
		i += n
	}
	for id, v := range variables {
		ptr := pointers[v[0]]
		switch v[1] {
		case classPushConstant:
			st := ptr[1]
			for j, t := range structs[st] {
				typ, ok := scalars[t]
				if !ok {
					typ = "other"
				}
				key := [2]uint32{st, uint32(j)}
				m.push = append(m.push, member{name: memberNames[key], offset: memberOff[key], typ: typ})
			}
		case classStorage:
			d := decs[id]
			md := memberDecs[ptr[1]]
			m.bindings = append(m.bindings, storageBinding{set: d[decDescriptorSet], binding: d[decBinding],
				nonWritable: md[decNonWritable] || hasKey(d, decNonWritable),
				nonReadable: md[decNonReadable] || hasKey(d, decNonReadable)})
		}
	}
	return m, nil
}

func hasKey(m map[uint32]uint32, k uint32) bool { _, ok := m[k]; return ok }

func spirvString(ws []uint32) string {
	var sb strings.Builder
	for _, w := range ws {
		for s := 0; s < 32; s += 8 {
			c := byte(w >> s)
			if c == 0 {
				return sb.String()
			}
			sb.WriteByte(c)
		}
	}
	return sb.String()
}
