//! The allocator of the wheel (feature `thread-mimalloc`): mimalloc for the threads that ask
//! for it (the gateway's serving threads, [`prefer_mimalloc`]), the system allocator for every
//! other thread.
//!
//! Why: glibc's malloc took a fifth to a quarter of the serving threads' CPU (it merges its
//! fast bins at each request of 1 KiB or more, about four a call), and mimalloc on those threads
//! cut the gateway's CPU per call by about a fifth. Everywhere else mimalloc bought little
//! (nothing on the memory store's admit + bill from Python; a tenth to a fifth of the
//! process's CPU per call with the Redis store) and cost memory: a process's peak
//! RSS grew by 4 MB at import and by 18-35 MB with 4-32 Python threads calling the guard
//! (docs/performance.md, "The allocator"). So an
//! application that embeds the guard keeps the system allocator on its own threads.
//!
//! A block is freed (and grown) by the allocator that made it, whichever thread frees it: a
//! row the ledger's writer drops was made on a serving thread. `mi_is_in_heap_region` tells
//! them apart (a look at mimalloc's arenas and segment map); until a thread has asked for
//! mimalloc, no block can be mimalloc's and the look is skipped.
// With feature `mimalloc` also on, every thread takes mimalloc and this allocator is unused.
#![cfg_attr(feature = "mimalloc", allow(dead_code))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

use mimalloc::MiMalloc;

thread_local! {
    /// This thread allocates from mimalloc. (A `const` cell: reading it never allocates.)
    static MIMALLOC_HERE: Cell<bool> = const { Cell::new(false) };
}

/// Some thread has asked for mimalloc: from then on a block may be mimalloc's.
static MIMALLOC_USED: AtomicBool = AtomicBool::new(false);

/// From now on this thread allocates from mimalloc (blocks it made before stay the system
/// allocator's, and are freed there).
pub(crate) fn prefer_mimalloc() {
    MIMALLOC_USED.store(true, Ordering::Release);
    MIMALLOC_HERE.with(|here| here.set(true));
}

/// The allocator for new blocks on this thread.
fn here() -> bool {
    // During a thread's teardown the cell may be gone: the system allocator then.
    MIMALLOC_HERE.try_with(Cell::get).unwrap_or(false)
}

/// Whether `ptr` is a block mimalloc made.
fn mimalloc_made(ptr: *mut u8) -> bool {
    // SAFETY: mi_is_in_heap_region only compares the address with mimalloc's own maps.
    MIMALLOC_USED.load(Ordering::Acquire)
        && unsafe { libmimalloc_sys::mi_is_in_heap_region(ptr.cast()) }
}

/// mimalloc on the threads that asked for it, the system allocator elsewhere; a block always
/// goes back to the allocator that made it.
pub(crate) struct ThreadMimalloc;

// SAFETY: every block is made by one of two sound allocators and freed or grown by the same
// one (`mimalloc_made`), with the layout it was made with.
unsafe impl GlobalAlloc for ThreadMimalloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if here() {
            MiMalloc.alloc(layout)
        } else {
            System.alloc(layout)
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if here() {
            MiMalloc.alloc_zeroed(layout)
        } else {
            System.alloc_zeroed(layout)
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if mimalloc_made(ptr) {
            MiMalloc.dealloc(ptr, layout)
        } else {
            System.dealloc(ptr, layout)
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if mimalloc_made(ptr) {
            MiMalloc.realloc(ptr, layout, new_size)
        } else {
            System.realloc(ptr, layout, new_size)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{mimalloc_made, prefer_mimalloc};

    /// A thread that asked for mimalloc makes its blocks there, another thread in the system
    /// allocator; each block is freed by its maker from any thread.
    #[test]
    fn each_block_goes_back_to_the_allocator_that_made_it() {
        let system = vec![1u8; 4096];
        let made = std::thread::spawn(|| {
            prefer_mimalloc();
            (vec![2u8; 4096], vec![3u8; 64])
        })
        .join()
        .expect("the thread ran");
        assert!(mimalloc_made(made.0.as_ptr().cast_mut()));
        assert!(mimalloc_made(made.1.as_ptr().cast_mut()));
        assert!(!mimalloc_made(system.as_ptr().cast_mut()));
        // Grown and freed here, on a thread that never asked: they stay mimalloc's.
        let mut grown = made.0;
        grown.extend_from_slice(&[4u8; 100_000]);
        assert!(mimalloc_made(grown.as_ptr().cast_mut()));
        assert_eq!((grown[0], grown[4096], system[0], made.1[63]), (2, 4, 1, 3));
        drop(grown);
        drop(made.1);
        let after = vec![5u8; 4096];
        assert!(!mimalloc_made(after.as_ptr().cast_mut()));
    }
}
