package convert

// A guard in front of gopickle. gopickle allocates what a file's lengths say
// before it reads the bytes: a 14-byte pickle that announces a 1 TiB string
// ends the process with "fatal error: runtime: out of memory", which no
// recover catches, and a storage of 2^31 floats asks for 8 GiB. So before
// gopickle sees a file, guardTorch walks its pickles opcode by opcode
// (without running them), checking every length against the bytes that
// follow; then runs them once with inert classes to learn each storage's
// size, which must fit in the bytes that hold its data.

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"

	"github.com/nlpodyssey/gopickle/pickle"
	"github.com/nlpodyssey/gopickle/types"
)

// maxPickleBytes bounds the pickle of a state_dict (data.pkl): names and
// shapes, a few KiB per tensor.
const maxPickleBytes = 256 << 20

// How a pickle opcode's argument is laid out (Python's pickletools).
const (
	argNone  = iota
	argFixed // n bytes
	argLines // n newline-terminated lines
	argSized // an n-byte little-endian length, then that many bytes
)

type pickleArg struct{ kind, n int }

const (
	opStop  = '.'
	opFrame = 0x95 // protocol 4: the length of a frame of opcodes that follows
)

// pickleOps is every opcode of pickle protocols 0 to 5.
var pickleOps = func() map[byte]pickleArg {
	ops := map[byte]pickleArg{}
	for _, op := range []byte("(.012NRabd}el]ostu)Q\x81\x85\x86\x87\x88\x89\x8f\x90\x91\x92\x93\x94\x97\x98") {
		ops[op] = pickleArg{argNone, 0}
	}
	for op, n := range map[byte]int{0x80: 1, 'K': 1, 'M': 2, 'J': 4, 'G': 8, 'h': 1, 'j': 4, 'q': 1, 'r': 4, 0x82: 1, 0x83: 2, 0x84: 4} {
		ops[op] = pickleArg{argFixed, n}
	}
	for _, op := range []byte("ILFSVPgp") {
		ops[op] = pickleArg{argLines, 1}
	}
	ops['c'], ops['i'] = pickleArg{argLines, 2}, pickleArg{argLines, 2}
	for op, n := range map[byte]int{'T': 4, 'U': 1, 'B': 4, 'C': 1, 'X': 4, 0x8c: 1, 0x8d: 8, 0x8e: 8, 0x96: 8, 0x8a: 1, 0x8b: 4, opFrame: 8} {
		ops[op] = pickleArg{argSized, n}
	}
	return ops
}()

// scanPickle walks the pickle that starts at data[off] and returns the
// offset just after its STOP opcode.
func scanPickle(data []byte, off int) (int, error) {
	for off < len(data) {
		op, at := data[off], off
		off++
		arg, ok := pickleOps[op]
		if !ok {
			return 0, fmt.Errorf("pickle: unknown opcode 0x%02x at byte %d", op, at)
		}
		switch arg.kind {
		case argFixed:
			off += arg.n
		case argLines:
			for i := 0; i < arg.n && off <= len(data); i++ {
				nl := bytes.IndexByte(data[off:], '\n')
				if nl < 0 {
					return 0, fmt.Errorf("pickle: opcode %q at byte %d: no end of line", op, at)
				}
				off += nl + 1
			}
		case argSized:
			if off+arg.n > len(data) {
				return 0, fmt.Errorf("pickle: ends inside opcode 0x%02x at byte %d (truncated?)", op, at)
			}
			var b [8]byte
			copy(b[:], data[off:off+arg.n])
			n := binary.LittleEndian.Uint64(b[:])
			off += arg.n
			if n > uint64(len(data)-off) {
				return 0, fmt.Errorf("pickle: opcode 0x%02x at byte %d asks for %d bytes; %d follow", op, at, n, len(data)-off)
			}
			if op != opFrame { // a frame holds opcodes: walk into it
				off += int(n)
			}
		}
		if off > len(data) {
			break
		}
		if op == opStop {
			return off, nil
		}
	}
	return 0, fmt.Errorf("pickle: ends before its STOP opcode (truncated?)")
}

// storageRef is a tensor storage a pickle names by persistent id.
type storageRef struct {
	key   string
	class string // e.g. torch.FloatStorage
	size  int    // elements
}

// storageBytes is the element size of each storage class torch writes.
var storageBytes = map[string]int{
	"torch.FloatStorage": 4, "torch.HalfStorage": 2, "torch.BFloat16Storage": 2, "torch.DoubleStorage": 8,
	"torch.LongStorage": 8, "torch.IntStorage": 4, "torch.ShortStorage": 2, "torch.CharStorage": 1,
	"torch.ByteStorage": 1, "torch.BoolStorage": 1,
}

// bytes is the size of r's data, or an error for a class or size that no
// file can hold.
func (r storageRef) bytes() (uint64, error) {
	elem, ok := storageBytes[r.class]
	if !ok {
		return 0, fmt.Errorf("storage %q: class %s is not a torch storage", r.key, r.class)
	}
	if r.size < 0 || r.size > maxCheckpointBytes {
		return 0, fmt.Errorf("storage %q: %d elements", r.key, r.size)
	}
	return uint64(r.size) * uint64(elem), nil
}

// inert stands for every class and object while storageRefs runs a pickle:
// calling, instantiating or setting the state of one does nothing.
type inert struct{ name string }

func (c inert) Call(...any) (any, error)  { return inert{}, nil }
func (c inert) PyNew(...any) (any, error) { return inert{}, nil }
func (c inert) PySetState(any) error      { return nil }

var _ types.Callable = inert{}

// storageRefs runs pkl (already scanned) with inert classes and returns the
// storages its persistent ids name, in order.
func storageRefs(pkl []byte) ([]storageRef, error) {
	var refs []storageRef
	u := pickle.NewUnpickler(bytes.NewReader(pkl))
	u.FindClass = func(module, name string) (any, error) { return inert{module + "." + name}, nil }
	u.PersistentLoad = func(id any) (any, error) {
		t, ok := id.(*types.Tuple)
		if !ok || t.Len() < 5 || t.Get(0) != "storage" {
			return inert{}, nil // gopickle reports what it cannot take
		}
		class, _ := t.Get(1).(inert)
		key, _ := t.Get(2).(string)
		size, ok := t.Get(4).(int)
		if !ok {
			return nil, fmt.Errorf("storage %q: size %v is not an int", key, t.Get(4))
		}
		refs = append(refs, storageRef{key: key, class: class.name, size: size})
		return inert{}, nil
	}
	if _, err := u.Load(); err != nil {
		return nil, err
	}
	return refs, nil
}

// guardTorch checks the file at path, which sniffTorch has accepted, before
// gopickle reads it.
func guardTorch(path string) error {
	if z, err := zip.OpenReader(path); err == nil {
		defer z.Close()
		st, err := os.Stat(path)
		if err != nil {
			return err
		}
		return guardTorchZip(&z.Reader, st.Size())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return guardTorchLegacy(data)
}

// guardTorchZip checks torch.save's zip format: the pickle in data.pkl, and a
// record data/KEY, stored uncompressed as torch writes it, big enough for
// each storage.
func guardTorchZip(z *zip.Reader, fileSize int64) error {
	records := map[string]*zip.File{} // by base name, as gopickle finds them
	for _, f := range z.File {
		_, name := path.Split(f.Name)
		records[name] = f
	}
	rec, ok := records["data.pkl"]
	if !ok {
		return fmt.Errorf("the zip archive has no data.pkl: not a torch.save file")
	}
	r, err := rec.Open()
	if err != nil {
		return fmt.Errorf("data.pkl: %w", err)
	}
	pkl, err := io.ReadAll(io.LimitReader(r, maxPickleBytes+1))
	r.Close()
	if err != nil {
		return fmt.Errorf("data.pkl: %w", err)
	}
	if len(pkl) > maxPickleBytes {
		return fmt.Errorf("data.pkl: more than %d bytes", maxPickleBytes)
	}
	if _, err := scanPickle(pkl, 0); err != nil {
		return fmt.Errorf("data.pkl: %w", err)
	}
	refs, err := storageRefs(pkl)
	if err != nil {
		return fmt.Errorf("data.pkl: %w", err)
	}
	for _, ref := range refs {
		n, err := ref.bytes()
		if err != nil {
			return err
		}
		rec, ok := records[ref.key]
		switch {
		case !ok:
			return fmt.Errorf("storage %q: no record data/%s in the archive", ref.key, ref.key)
		case rec.Method != zip.Store || rec.UncompressedSize64 != rec.CompressedSize64 || rec.CompressedSize64 > uint64(fileSize):
			return fmt.Errorf("storage %q: record %s is compressed or larger than the file; torch.save stores tensor data as is", ref.key, rec.Name)
		case n > rec.UncompressedSize64:
			return fmt.Errorf("storage %q: %d %s elements do not fit in its %d bytes", ref.key, ref.size, ref.class, rec.UncompressedSize64)
		}
	}
	return nil
}

// guardTorchLegacy checks the format before torch 1.6: five pickles (magic
// number, protocol, system info, the object, the storage keys), then each
// storage as a u64 element count and its data.
func guardTorchLegacy(data []byte) error {
	var ends [5]int
	off := 0
	for i := range ends {
		end, err := scanPickle(data, off)
		if err != nil {
			return err
		}
		ends[i], off = end, end
	}
	refs, err := storageRefs(data[ends[2]:ends[3]])
	if err != nil {
		return err
	}
	byKey := map[string]storageRef{}
	for _, r := range refs {
		byKey[r.key] = r
	}
	u := pickle.NewUnpickler(bytes.NewReader(data[ends[3]:ends[4]]))
	keys, err := u.Load()
	if err != nil {
		return err
	}
	list, ok := keys.(*types.List)
	if !ok {
		return nil // gopickle reports it
	}
	for _, k := range *list {
		key, _ := k.(string)
		ref, ok := byKey[key]
		if !ok {
			return nil // gopickle reports it
		}
		if _, err := ref.bytes(); err != nil {
			return err
		}
		if len(data)-off < 8 {
			return fmt.Errorf("storage %q: the file ends before its data", key)
		}
		n := binary.LittleEndian.Uint64(data[off:])
		off += 8
		if n > uint64(len(data)-off)/uint64(storageBytes[ref.class]) {
			return fmt.Errorf("storage %q: %d elements do not fit in the %d bytes left", key, n, len(data)-off)
		}
		off += int(n) * storageBytes[ref.class]
	}
	return nil
}
