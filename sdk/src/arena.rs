//! The plugin's global allocator on wasm: a bump arena in front of the
//! standard library's allocator.
//!
//! The host runs every call in a fresh instance whose memory starts from the
//! component's initial image, so nothing a call allocates outlives the call.
//! A general-purpose allocator's bookkeeping (size classes, free lists,
//! coalescing) buys nothing there: an allocation is a pointer bump, a free is
//! a no-op, and the pages the call wrote are reset by the host anyway. Freeing
//! or growing the most recent allocation works in place, which covers the
//! common `String`/`Vec` growth while serializing.
//!
//! The arena is a fixed region of static memory ([`ARENA_BYTES`]). A call that
//! needs more carries on in the standard library's allocator (wasi-libc's
//! dlmalloc), so a large call costs at most the arena's size in unreclaimed
//! memory, and an instance that were ever reused for a second call would only
//! be slower, never wrong.
//!
//! It is the global allocator of any wasm plugin built with the SDK's default
//! `arena-allocator` feature. A plugin that brings its own allocator turns the
//! feature off (`default-features = false`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, UnsafeCell};
use std::mem::MaybeUninit;

/// Size of the arena: a realistic reconcile allocates a few tens of KiB
/// (the host's benchmark WebApp: ~33 KiB), a large list read from the cache
/// a few hundred. Static memory, so it counts toward the component's initial
/// memory but only the pages a call writes cost anything.
pub const ARENA_BYTES: usize = 512 << 10;

/// Alignment of the arena's start; larger alignments are bumped to.
const ARENA_ALIGN: usize = 16;

#[repr(C, align(16))]
struct Region(UnsafeCell<[MaybeUninit<u8>; ARENA_BYTES]>);

/// A bump allocator over a static region, falling back to [`System`].
///
/// Only sound where a single thread allocates: the SDK installs it for wasm
/// targets without the `atomics` feature, where no other thread can exist.
pub struct CallArena {
    region: Region,
    /// Offset of the first free byte in `region`.
    top: Cell<usize>,
}

// SAFETY: installed only on single-threaded wasm (see the `cfg` in lib.rs);
// there is no second thread to race on `top` or the region.
unsafe impl Sync for CallArena {}

impl CallArena {
    /// An empty arena.
    pub const fn new() -> CallArena {
        const _: () = assert!(ARENA_ALIGN.is_power_of_two());
        CallArena {
            region: Region(UnsafeCell::new([MaybeUninit::uninit(); ARENA_BYTES])),
            top: Cell::new(0),
        }
    }

    fn base(&self) -> usize {
        self.region.0.get() as usize
    }

    /// The arena offset of `ptr`, if it points into the arena.
    fn offset_of(&self, ptr: *mut u8) -> Option<usize> {
        let offset = (ptr as usize).wrapping_sub(self.base());
        (offset < ARENA_BYTES).then_some(offset)
    }

    /// Bumps `top` for `layout`; `None` when the arena cannot hold it.
    fn bump(&self, layout: Layout) -> Option<*mut u8> {
        let base = self.base();
        let start = (base + self.top.get()).checked_next_multiple_of(layout.align())? - base;
        let end = start.checked_add(layout.size())?;
        if end > ARENA_BYTES {
            return None;
        }
        self.top.set(end);
        // SAFETY: `start..end` lies within the region.
        Some(unsafe { (self.region.0.get() as *mut u8).add(start) })
    }
}

impl Default for CallArena {
    fn default() -> Self {
        CallArena::new()
    }
}

// SAFETY: every block handed out is either a disjoint range of the arena
// (bumped past, never handed out twice while live) or comes from `System`;
// `dealloc`/`realloc` tell the two apart by address.
unsafe impl GlobalAlloc for CallArena {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match self.bump(layout) {
            Some(ptr) => ptr,
            // SAFETY: forwarded with the caller's (valid) layout.
            None => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match self.offset_of(ptr) {
            // Only the most recent block can be given back.
            Some(offset) if offset + layout.size() == self.top.get() => self.top.set(offset),
            Some(_) => {}
            // SAFETY: not ours, so `System` allocated it with this layout.
            None => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if let Some(offset) = self.offset_of(ptr) {
            let is_top = offset + layout.size() == self.top.get();
            if new_size <= layout.size() {
                if is_top {
                    self.top.set(offset + new_size);
                }
                return ptr;
            }
            if is_top && offset + new_size <= ARENA_BYTES {
                self.top.set(offset + new_size);
                return ptr;
            }
        } else {
            // SAFETY: not ours, so `System` allocated it with this layout.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // An arena block that cannot grow in place moves (to the arena's top,
        // or to `System` once the arena is full).
        // SAFETY: `new_size` is non-zero and, rounded up to the alignment,
        // does not overflow (the caller's contract for `realloc`).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: valid layout, see above.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least
            // `layout.size()` bytes long.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size());
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Each test has its own arena in a static (too large for a test thread's
    // stack), used by that test's thread only.

    fn layout(size: usize, align: usize) -> Layout {
        Layout::from_size_align(size, align).unwrap()
    }

    #[test]
    fn bumps_aligns_and_gives_back_the_last_block() {
        static ARENA: CallArena = CallArena::new();
        let arena = &ARENA;
        unsafe {
            let a = arena.alloc(layout(3, 1));
            let b = arena.alloc(layout(8, 8));
            assert_eq!(arena.offset_of(a), Some(0));
            assert_eq!(arena.offset_of(b), Some(8));
            arena.dealloc(b, layout(8, 8));
            assert_eq!(arena.top.get(), 8);
            // Not the last block any more: freeing it reclaims nothing.
            arena.dealloc(a, layout(3, 1));
            assert_eq!(arena.top.get(), 8);
        }
    }

    #[test]
    fn grows_the_last_block_in_place_and_moves_others() {
        static ARENA: CallArena = CallArena::new();
        let arena = &ARENA;
        unsafe {
            let a = arena.alloc(layout(4, 1));
            a.copy_from(b"abcd".as_ptr(), 4);
            let grown = arena.realloc(a, layout(4, 1), 64);
            assert_eq!(grown, a);
            assert_eq!(arena.top.get(), 64);
            let b = arena.alloc(layout(1, 1));
            let moved = arena.realloc(a, layout(64, 1), 128);
            assert_ne!(moved, a);
            assert_eq!(std::slice::from_raw_parts(moved, 4), b"abcd");
            assert_eq!(arena.offset_of(b), Some(64));
        }
    }

    #[test]
    fn falls_back_to_the_system_allocator_when_full() {
        static ARENA: CallArena = CallArena::new();
        let arena = &ARENA;
        unsafe {
            let big = arena.alloc(layout(ARENA_BYTES - 8, 8));
            assert_eq!(arena.offset_of(big), Some(0));
            let outside = arena.alloc(layout(64, 8));
            assert!(!outside.is_null());
            assert_eq!(arena.offset_of(outside), None);
            outside.write_bytes(7, 64);
            // Growing a block beyond the arena moves it to the system allocator.
            let small = arena.alloc(layout(8, 8));
            small.write_bytes(1, 8);
            let moved = arena.realloc(small, layout(8, 8), 1 << 20);
            assert_eq!(arena.offset_of(moved), None);
            assert_eq!(*moved.add(7), 1);
            arena.dealloc(moved, layout(1 << 20, 8));
            arena.dealloc(outside, layout(64, 8));
        }
    }
}
