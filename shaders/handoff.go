package shaders

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// Handoff variants (include/handoff.glsl): a decode kernel that orders
// itself after the dispatch before it, so that the decode step records no
// pipeline barrier between them (vk's Handoff access). Each has its base
// variant's code, bindings and push constants, and then
//   - one binding more, the step's handoff words: [0] a stall flag, then
//     one count of workgroups done per dispatch (a slot);
//   - three push constants more (HandoffPush): the slot to wait on (0:
//     none), the workgroups to wait for there, and its own slot.
//
// Only the kernels of a GPU profile's dense decode block and head have
// one: matvec_rows for the types of the models the issues measure (Q8_0,
// Q4_K, Q6_K: Q4_K_M's), with the fusions of the step, decode_attend_keys,
// and argmax_wide. A step's other kernels keep their barriers.
// docs/decode-attention-cost.md, "Dispatches without barriers".

// HandoffSuffix ends a handoff variant's name.
const HandoffSuffix = "_handoff"

// HandoffPush is the three push constants a handoff variant adds after its
// base variant's.
type HandoffPush struct {
	HandWait uint32 // the slot of the dispatch to wait for; 0: none (a barrier orders this one)
	HandNeed uint32 // that dispatch's workgroups (all count themselves)
	HandSlot uint32 // this dispatch's slot, 1 or more
}

// HandoffStallWord is the handoff buffer's word that a wait which gave up
// sets (include/handoff.glsl's hand[0]).
const HandoffStallWord = 0

// HandoffMatvecTypes are the weight types whose decode matvec
// (matvec_rows) has handoff variants.
var HandoffMatvecTypes = []string{MatvecQ8_0, MatvecQ4_K, MatvecQ6_K}

// handoffMatvecFusions are the fusions of a dense decode step's matvecs
// (the profile with FuseNorm): q|k|v and the head with the norm, gate|up
// with the norm and SwiGLU, the output and down with the add.
var handoffMatvecFusions = []string{FuseNorm, FuseNormSwiGLU, FuseAdd}

// HandoffName is the handoff variant of variant name, and whether it has one.
func HandoffName(name string) (string, bool) {
	h := name + HandoffSuffix
	_, err := Lookup(h)
	return h, err == nil
}

// IsHandoff says whether v is a handoff variant.
func IsHandoff(v Variant) bool { return strings.HasSuffix(v.Name, HandoffSuffix) }

// HandoffBase is the name of a handoff variant's base variant (name itself
// for any other).
func HandoffBase(name string) string { return strings.TrimSuffix(name, HandoffSuffix) }

// handoffVariant is v's handoff variant.
func handoffVariant(v Variant) Variant {
	h := v
	h.Name += HandoffSuffix
	h.Defines = append(append([]string(nil), v.Defines...), "HANDOFF", fmt.Sprintf("HANDOFF_BINDING=%d", len(v.Bindings)))
	h.Bindings = append(append([]Binding(nil), v.Bindings...),
		Binding{"handoff", ReadWrite, "[1 + slots] u32: [0] the stall flag, [slot] workgroups done (include/handoff.glsl)"})
	h.Push = WithHandoff(v.Push, HandoffPush{})
	h.Notes += "; HANDOFF: waits for slot HandWait to count HandNeed workgroups, then counts itself in slot HandSlot " +
		"(the step records no barrier before it: include/handoff.glsl)"
	return h
}

// handoffPushTypes are the push structs WithHandoff made, by base type, so
// that every handoff push of one base has one type.
var handoffPushTypes = struct {
	sync.Mutex
	m map[reflect.Type]reflect.Type
}{m: map[reflect.Type]reflect.Type{}}

// WithHandoff is base (a push-constant struct) followed by hp's fields: a
// handoff variant's push constants, packed by vk.PackPush as the GLSL block
// lays them out.
func WithHandoff(base any, hp HandoffPush) any {
	bt := reflect.TypeOf(base)
	handoffPushTypes.Lock()
	defer handoffPushTypes.Unlock()
	t, ok := handoffPushTypes.m[bt]
	if !ok {
		var fields []reflect.StructField
		for i := 0; i < bt.NumField(); i++ {
			f := bt.Field(i)
			fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type, Tag: f.Tag})
		}
		ht := reflect.TypeOf(hp)
		for i := 0; i < ht.NumField(); i++ {
			f := ht.Field(i)
			fields = append(fields, reflect.StructField{Name: f.Name, Type: f.Type})
		}
		t = reflect.StructOf(fields)
		handoffPushTypes.m[bt] = t
	}
	v := reflect.New(t).Elem()
	bv := reflect.ValueOf(base)
	for i := 0; i < bv.NumField(); i++ {
		v.Field(i).Set(bv.Field(i))
	}
	hv := reflect.ValueOf(hp)
	for i := 0; i < hv.NumField(); i++ {
		v.Field(bv.NumField() + i).Set(hv.Field(i))
	}
	return v.Interface()
}
