package shaders

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/modrun/modrun/vk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpirvIsFresh recompiles every variant and fails when a committed .spv
// differs (glslc's output is deterministic) or has no variant.
func TestSpirvIsFresh(t *testing.T) {
	glslc, err := exec.LookPath("glslc")
	if err != nil {
		t.Skip("glslc is not installed (Debian: glslc): cannot check that spv/ is fresh")
	}
	dir := t.TempDir()
	for _, v := range Variants {
		out := filepath.Join(dir, v.Name+".spv")
		require.NoError(t, v.Compile(glslc, out))
		fresh, err := os.ReadFile(out)
		require.NoError(t, err)
		assert.True(t, bytes.Equal(fresh, v.SPIRV()), "spv/%s.spv is stale: run go generate ./shaders", v.Name)
	}
	committed, err := filepath.Glob("spv/*.spv")
	require.NoError(t, err)
	var names []string
	for _, v := range Variants {
		names = append(names, "spv/"+v.Name+".spv")
	}
	sort.Strings(committed)
	sort.Strings(names)
	assert.Equal(t, names, committed, "spv/ holds exactly the table's variants")
}

// TestVariantInterfaces checks the table, and the Go push-constant structs,
// against what glslc compiled: push-constant members (name, offset, 4-byte
// type) in order, storage buffers at set 0 bindings 0..n-1 with the declared
// access, the workgroup size and specialization constants.
func TestVariantInterfaces(t *testing.T) {
	seen := map[string]bool{}
	for _, v := range Variants {
		t.Run(v.Name, func(t *testing.T) {
			assert.False(t, seen[v.Name], "unique name")
			seen[v.Name] = true
			m, err := parseSPIRV(v.SPIRV())
			require.NoError(t, err)

			// Push constants: Go fields and GLSL members match one to one.
			if v.Push == nil {
				assert.Empty(t, m.push)
			} else {
				rt := reflect.TypeOf(v.Push)
				require.Equal(t, rt.NumField(), len(m.push), "%s has as many fields as the GLSL block", rt.Name())
				for i := 0; i < rt.NumField(); i++ {
					f, g := rt.Field(i), m.push[i]
					assert.True(t, strings.EqualFold(f.Name, g.name), "%s field %d: Go %s, GLSL %s", rt.Name(), i, f.Name, g.name)
					assert.Equal(t, uint32(f.Offset), g.offset, "%s.%s offset", rt.Name(), f.Name)
					assert.Equal(t, f.Type.Kind().String(), g.typ, "%s.%s type", rt.Name(), f.Name)
				}
				packed, err := vk.PackPush(v.Push)
				require.NoError(t, err)
				assert.Len(t, packed, v.PushBytes())
				assert.LessOrEqual(t, v.PushBytes(), 128, "Vulkan guarantees 128 bytes of push constants")
			}

			// Bindings. A binding may be declared more than once (matvec
			// reads its weights as words and as 16-byte vectors): the
			// aliases must agree on their access.
			sort.SliceStable(m.bindings, func(i, j int) bool { return m.bindings[i].binding < m.bindings[j].binding })
			bindings := m.bindings[:0:0]
			for _, b := range m.bindings {
				if n := len(bindings); n > 0 && bindings[n-1].binding == b.binding && bindings[n-1].set == b.set {
					assert.Equal(t, bindings[n-1], b, "aliases of binding %d agree", b.binding)
					continue
				}
				bindings = append(bindings, b)
			}
			require.Len(t, bindings, len(v.Bindings))
			for i, b := range bindings {
				want := v.Bindings[i]
				assert.Equal(t, uint32(0), b.set)
				assert.Equal(t, uint32(i), b.binding)
				assert.Equal(t, want.Access == Read, b.nonWritable, "binding %d (%s) is readonly in GLSL iff Read", i, want.Name)
				assert.Equal(t, want.Access == Write, b.nonReadable, "binding %d (%s) is writeonly in GLSL iff Write", i, want.Name)
			}

			// Workgroup size and specialization constants.
			assert.Equal(t, v.LocalSize, m.localSize, "workgroup size")
			sort.Slice(m.specIDs, func(i, j int) bool { return m.specIDs[i] < m.specIDs[j] })
			want := []uint32{}
			for i := range v.Spec {
				want = append(want, uint32(i))
			}
			assert.Equal(t, want, append([]uint32{}, m.specIDs...), "constant_ids 0..len(Spec)-1")
			if v.LocalSizeSpec {
				require.NotEmpty(t, v.Spec)
				assert.Equal(t, v.LocalSize[0], v.Spec[0], "Spec[0] defaults to the compiled size")
			}
		})
	}
}

func TestLookupAndGroups(t *testing.T) {
	v, err := Lookup("matvec_q8_0")
	require.NoError(t, err)
	assert.Equal(t, 16, v.PushBytes())
	_, err = Lookup("matvec_q8_1")
	assert.EqualError(t, err, `shaders: no kernel variant "matvec_q8_1"`)

	assert.Equal(t, [3]uint32{1, 1, 1}, Groups(1))
	assert.Equal(t, [3]uint32{65535, 1, 1}, Groups(65535))
	assert.Equal(t, [3]uint32{65535, 2, 1}, Groups(65536))
	g := Groups(200000)
	assert.GreaterOrEqual(t, g[0]*g[1], uint32(200000))
}
