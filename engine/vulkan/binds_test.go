package vulkan

import (
	"testing"

	"github.com/modrun/modrun/shaders"
	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An op's binds must say what the variant's table says of each binding
// (newOp panics otherwise, so every recording test checks its ops): the
// two Access types mean the same bits, and checkBinds finds a wrong
// access or a missing bind.
func TestCheckBinds(t *testing.T) {
	assert.Equal(t, vk.Read, vk.Access(shaders.Read))
	assert.Equal(t, vk.Write, vk.Access(shaders.Write))
	assert.Equal(t, vk.ReadWrite, vk.Access(shaders.ReadWrite))
	v, err := shaders.Lookup("add")
	require.NoError(t, err)
	require.Equal(t, []shaders.Access{shaders.Read, shaders.Read, shaders.Write},
		[]shaders.Access{v.Bindings[0].Access, v.Bindings[1].Access, v.Bindings[2].Access})
	assert.NoError(t, checkBinds(v, []vk.Bind{rd(nil, 0, 0), rd(nil, 0, 0), wr(nil, 0, 0)}))
	assert.ErrorContains(t, checkBinds(v, []vk.Bind{rd(nil, 0, 0), rd(nil, 0, 0), rw(nil, 0, 0)}),
		"add: binding 2 (out) bound read-write, the variant's is write")
	assert.ErrorContains(t, checkBinds(v, []vk.Bind{rd(nil, 0, 0), rd(nil, 0, 0)}), "add: 2 binds for its 3 bindings")
	assert.Panics(t, func() { newOp(&kernel{v: v}, shaders.AddPush{}, [3]uint32{1, 1, 1}, wr(nil, 0, 0)) })
}
