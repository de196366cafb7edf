//go:build wasip1

package operator

// The canonical ABI of world `reconciler-plugin` (wit/plugin.wit,
// wasm-operator:plugin@0.1.0), by hand. Memory layouts (offsets in bytes)
// are noted where they are written; every address the host reads or writes
// comes from alloc, so reading one is a lookup in the live blocks, never a
// conversion of an integer to a pointer.

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// ---------------------------------------------------------------- memory

// block is one buffer handed across the boundary, at linear-memory address base.
type block struct {
	base uint32
	buf  []byte
}

// live keeps every block alive (arguments the host writes through
// cabi_realloc, results) until the call's post-return.
var live []block

// alloc is size bytes aligned to align, zeroed, and their address.
func alloc(size, align uint32) (uint32, []byte) {
	if align == 0 {
		align = 1
	}
	buf := make([]byte, size+align)
	base := uint32(uintptr(unsafe.Pointer(&buf[0])))
	live = append(live, block{base, buf})
	p := (base + align - 1) &^ (align - 1)
	return p, buf[p-base : p-base+size : p-base+size]
}

//go:wasmexport cabi_realloc
func cabiRealloc(oldPtr, oldSize, align, newSize uint32) uint32 {
	p, b := alloc(newSize, align)
	if oldPtr != 0 && oldSize != 0 {
		copy(b, mem(oldPtr, min(oldSize, newSize)))
	}
	return p
}

// mem is the n bytes at address p, inside a live block.
func mem(p, n uint32) []byte {
	if n == 0 {
		return nil
	}
	for i := len(live) - 1; i >= 0; i-- {
		b := live[i]
		if p >= b.base && uint64(p)+uint64(n) <= uint64(b.base)+uint64(len(b.buf)) {
			return b.buf[p-b.base : p-b.base+n]
		}
	}
	panic(fmt.Sprintf("wasm-operator: address %#x (%d bytes) is not in memory this SDK allocated", p, n))
}

func u32(p uint32) uint32    { return binary.LittleEndian.Uint32(mem(p, 4)) }
func str(p, n uint32) string { return string(mem(p, n)) }

// strList reads list<string> (elements: ptr, len).
func strList(p, n uint32) []string {
	out := make([]string, n)
	for i := range out {
		e := p + uint32(i)*8
		out[i] = str(u32(e), u32(e+4))
	}
	return out
}

// lower copies s into a live block: its address and length.
func lower(s string) (uint32, uint32) {
	if len(s) == 0 {
		return 1, 0
	}
	p, b := alloc(uint32(len(s)), 1)
	copy(b, s)
	return p, uint32(len(s))
}

// lowerOpt lowers option<string> ("" is none): discriminant, address, length.
func lowerOpt(s string) (uint32, uint32, uint32) {
	if s == "" {
		return 0, 0, 0
	}
	p, n := lower(s)
	return 1, p, n
}

// area is a block of linear memory the host will read.
type area struct {
	p uint32
	b []byte
}

func newArea(size, align uint32) area {
	p, b := alloc(size, align)
	return area{p, b}
}

func (a area) at(off, size uint32) area { return area{a.p + off, a.b[off : off+size]} }
func (a area) u8(off int, v uint8)      { a.b[off] = v }
func (a area) u32(off int, v uint32)    { binary.LittleEndian.PutUint32(a.b[off:], v) }
func (a area) u64(off int, v uint64)    { binary.LittleEndian.PutUint64(a.b[off:], v) }
func (a area) bool(off int, v bool) {
	if v {
		a.b[off] = 1
	}
}
func (a area) str(off int, s string) {
	p, n := lower(s)
	a.u32(off, p)
	a.u32(off+4, n)
}

// optStr writes option<string> ("" is none): 12 bytes, align 4.
func (a area) optStr(off int, s string) {
	if s != "" {
		a.u8(off, 1)
		a.str(off+4, s)
	}
}

// list writes (ptr, len) at off for n elements of size sz, filled by put.
func (a area) list(off int, n int, sz, align uint32, put func(e area, i int)) {
	if n > 0 {
		l := newArea(uint32(n)*sz, align)
		for i := 0; i < n; i++ {
			put(l.at(uint32(i)*sz, sz), i)
		}
		a.u32(off, l.p)
	}
	a.u32(off+4, uint32(n))
}

// kind writes resource-kind: 4 strings, scope u8 at 32; 36 bytes, align 4.
func (a area) kind(off int, k Kind) {
	a.str(off, k.Group)
	a.str(off+8, k.Version)
	a.str(off+16, k.Kind)
	a.str(off+24, k.Plural)
	a.bool(off+32, k.ClusterScoped)
}

// failure writes `failure` as the error of a result whose payload is at 8:
// variant discriminant at 8, string at 12.
func (a area) failure(f *Failure) {
	a.u8(0, 1)
	a.bool(8, f.Permanent)
	a.str(12, f.Message)
}

// ---------------------------------------------------------------- imports

//go:wasmimport wasm-operator:plugin/log@0.1.0 log
func hostLog(level, ptr, length uint32)

func hostLogString(level Level, msg string) {
	p, n := lower(msg)
	hostLog(uint32(level), p, n)
}

//go:wasmimport wasm-operator:plugin/cache@0.1.0 get
func hostCacheGet(apiPtr, apiLen, kindPtr, kindLen, nsDisc, nsPtr, nsLen, namePtr, nameLen, ret uint32)

//go:wasmimport wasm-operator:plugin/cache@0.1.0 list
func hostCacheList(apiPtr, apiLen, kindPtr, kindLen, nsDisc, nsPtr, nsLen, selDisc, selPtr, selLen, ret uint32)

func cacheGet(apiVersion, kind, namespace, name string) (string, bool, error) {
	ret := newArea(16, 4) // result<option<json>, string>: disc 0; option disc 4, string 8 | string 4
	ap, al := lower(apiVersion)
	kp, kl := lower(kind)
	nd, np, nl := lowerOpt(namespace)
	mp, ml := lower(name)
	hostCacheGet(ap, al, kp, kl, nd, np, nl, mp, ml, ret.p)
	b := ret.b
	if b[0] != 0 {
		return "", false, CacheError(str(binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])))
	}
	if b[4] == 0 {
		return "", false, nil
	}
	return str(binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])), true, nil
}

func cacheList(apiVersion, kind, namespace, selector string) ([]string, error) {
	ret := newArea(12, 4) // result<list<json>, string>: disc 0, payload 4
	ap, al := lower(apiVersion)
	kp, kl := lower(kind)
	nd, np, nl := lowerOpt(namespace)
	sd, sp, sl := lowerOpt(selector)
	hostCacheList(ap, al, kp, kl, nd, np, nl, sd, sp, sl, ret.p)
	b := ret.b
	p, n := binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
	if b[0] != 0 {
		return nil, CacheError(str(p, n))
	}
	return strList(p, n), nil
}

// ---------------------------------------------------------------- exports

//go:wasmexport wasm-operator:plugin/reconciler@0.1.0#manifest
func exportManifest() uint32 {
	m := plugin()
	a := newArea(92, 4) // manifest
	a.str(0, m.Name)
	a.str(8, m.Version)
	a.str(16, m.Description)
	a.kind(24, m.Primary)
	a.list(60, len(m.Owns), 36, 4, func(e area, i int) { e.kind(0, m.Owns[i]) })
	a.list(68, len(m.Watches), 36, 4, func(e area, i int) { e.kind(0, m.Watches[i]) })
	a.bool(76, m.Finalizer)
	a.u8(77, 0) // implements: neither migration nor backup
	a.optStr(80, m.MinCompatibleVersion)
	return a.p
}

// call lifts the arguments every reconciler function shares and runs fn
// under guard: call-context (plugin-version, attempt, managed-by-version,
// config), object, children.
func call(function string, pvPtr, pvLen, attempt, mbDisc, mbPtr, mbLen, cfgPtr, cfgLen, objPtr, objLen, chPtr, chLen uint32,
	fn func(ctx Context, obj Object, children Children) error) *Failure {
	return guard(function, func() error {
		ctx := Context{PluginVersion: str(pvPtr, pvLen), Attempt: attempt}
		if mbDisc != 0 {
			ctx.ManagedByVersion = str(mbPtr, mbLen)
		}
		config := str(cfgPtr, cfgLen)
		if config == "" {
			config = "{}"
		}
		var err error
		if ctx.Config, err = decodeObject(config); err != nil {
			return Permanent("config is not a JSON object: %v", err)
		}
		obj, err := decodeObject(str(objPtr, objLen))
		if err != nil {
			return Permanent("object is not a JSON object: %v", err)
		}
		texts := strList(chPtr, chLen)
		children := make(Children, len(texts))
		for i, t := range texts {
			if children[i], err = decodeObject(t); err != nil {
				return Permanent("child %d is not a JSON object: %v", i, err)
			}
		}
		return fn(ctx, obj, children)
	})
}

//go:wasmexport wasm-operator:plugin/reconciler@0.1.0#reconcile
func exportReconcile(pvPtr, pvLen, attempt, mbDisc, mbPtr, mbLen, cfgPtr, cfgLen, objPtr, objLen, chPtr, chLen uint32) uint32 {
	var d Desired
	var children []string
	var status string
	var hasStatus bool
	failure := call("reconcile", pvPtr, pvLen, attempt, mbDisc, mbPtr, mbLen, cfgPtr, cfgLen, objPtr, objLen, chPtr, chLen,
		func(ctx Context, obj Object, ch Children) error {
			p := plugin()
			if p.Reconcile == nil {
				return Permanent("plugin %s has no Reconcile function", p.Name)
			}
			var err error
			if d, err = p.Reconcile(ctx, obj, ch); err != nil {
				return err
			}
			children = make([]string, len(d.Children))
			for i, c := range d.Children {
				if children[i], err = encode(c); err != nil {
					return Permanent("child %d cannot be serialized: %v", i, err)
				}
			}
			if d.Status != nil {
				if status, err = encode(d.Status); err != nil {
					return Permanent("status cannot be serialized: %v", err)
				}
				hasStatus = status != "null" // a nil map or pointer
			}
			return nil
		})
	a := newArea(64, 8) // result<desired, failure>: disc 0, payload 8 (desired: 56 bytes, align 8)
	if failure != nil {
		a.failure(failure)
		return a.p
	}
	a.list(8, len(children), 8, 4, func(e area, i int) { e.str(0, children[i]) })
	if hasStatus { // option<json>: disc 16, string 20
		a.u8(16, 1)
		a.str(20, status)
	}
	a.list(28, len(d.Conditions), 32, 4, func(e area, i int) {
		c := d.Conditions[i]
		e.str(0, c.Type)
		e.str(8, c.Status)
		e.str(16, c.Reason)
		e.str(24, c.Message)
	})
	a.list(36, len(d.Events), 20, 4, func(e area, i int) {
		ev := d.Events[i]
		e.bool(0, ev.Warning)
		e.str(4, ev.Reason)
		e.str(12, ev.Message)
	})
	if d.RequeueAfter > 0 {
		a.u8(48, 1)
		a.u64(56, uint64(d.RequeueAfter.Milliseconds()))
	}
	return a.p
}

//go:wasmexport wasm-operator:plugin/reconciler@0.1.0#finalize
func exportFinalize(pvPtr, pvLen, attempt, mbDisc, mbPtr, mbLen, cfgPtr, cfgLen, objPtr, objLen, chPtr, chLen uint32) uint32 {
	var done Finalized
	failure := call("finalize", pvPtr, pvLen, attempt, mbDisc, mbPtr, mbLen, cfgPtr, cfgLen, objPtr, objLen, chPtr, chLen,
		func(ctx Context, obj Object, ch Children) error {
			p := plugin()
			if p.Finalize == nil {
				return nil
			}
			var err error
			done, err = p.Finalize(ctx, obj, ch)
			return err
		})
	a := newArea(24, 8) // result<finalized, failure>: disc 0, payload 8; finalized: disc 8, u64 16
	if failure != nil {
		a.failure(failure)
	} else if done.waiting {
		a.u8(8, 1)
		a.u64(16, uint64(done.wait.Milliseconds()))
	}
	return a.p
}

//go:wasmexport cabi_post_wasm-operator:plugin/reconciler@0.1.0#manifest
func postManifest(uint32) { live = nil }

//go:wasmexport cabi_post_wasm-operator:plugin/reconciler@0.1.0#reconcile
func postReconcile(uint32) { live = nil }

//go:wasmexport cabi_post_wasm-operator:plugin/reconciler@0.1.0#finalize
func postFinalize(uint32) { live = nil }
