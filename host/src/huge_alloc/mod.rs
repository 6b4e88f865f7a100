//! The `wasm9p` binary's allocator: the system's for everything but large blocks, which
//! get mappings of their own marked for transparent huge pages.
//!
//! Why: compiling a big guest grows blocks of hundreds of megabytes (Winch's text
//! section for clang.wasm is 320 MB, built by appending every function). glibc maps
//! blocks that large on their own too, but faults them in 4 KiB at a time, and on a VM
//! a first touch of a page is a fault the hypervisor may have to back as well: 40 % of
//! the serial tail of clang.wasm's baseline compile was those faults. Where the system
//! gives transparent huge pages only to memory that asks (`madvise`, the common
//! default), a mapping marked `MADV_HUGEPAGE` faults 2 MiB at a time. The first
//! `clang --version` on the baseline tier, from an empty cache: 8.76 s without this,
//! 7.82 s with it (medians of 13 alternating rounds, BENCHMARKS.md §6).
//!
//! Only blocks of [`LARGE`] and more are mapped here: such a block is written whole as
//! it grows, so huge pages cost it no memory. Smaller ones stay with the system
//! allocator, where huge pages would pin partly used 2 MiB pages (the 9p page cache's
//! 64 KiB buffers must stay within `cache_size`). glibc's `glibc.malloc.hugetlb=1`
//! tunable would mark its whole heap instead, and is read only at process start.
//!
//! A growing block is moved with `mremap`, which keeps the mapping's huge-page mark and
//! copies nothing.
//!
//! While a compile runs, [`prefault`] faults large blocks in ahead of their writers, on
//! a thread of its own (the serial tail of a compile leaves a core idle).
//!
//! The `wasm9p` binary installs [`HugeLarge`] as its global allocator. An embedder
//! keeps whatever allocator its own binary chose, or installs this one too; without
//! it, [`prefault::during`] just runs its work.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, Ordering};

pub mod prefault;

/// A block has been mapped here: this process allocates with [`HugeLarge`].
static MAPPED_ANY: AtomicBool = AtomicBool::new(false);

/// Whether this process allocates with [`HugeLarge`] and has mapped a large block.
fn installed() -> bool {
    MAPPED_ANY.load(Ordering::Relaxed)
}

/// Blocks from this size up get a mapping of their own (glibc maps them too, above its
/// threshold: 4 MiB as this binary sets it).
pub const LARGE: usize = 4 << 20;

/// The allocator: [`System`] below [`LARGE`], huge-page mappings from it up.
pub struct HugeLarge;

/// Whether a block of `layout` is mapped here (page alignment at most: a mapping is
/// page-aligned, and no more).
fn mapped(layout: Layout) -> bool {
    layout.size() >= LARGE && layout.align() <= 4096
}

/// A fresh, zeroed mapping of `size` bytes marked for huge pages, or null.
#[allow(unsafe_code)]
fn map(size: usize) -> *mut u8 {
    // SAFETY: an anonymous private mapping at an address the kernel picks touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return std::ptr::null_mut();
    }
    MAPPED_ANY.store(true, Ordering::Relaxed);
    // SAFETY: advice on the mapping just made; a kernel without THP refuses it, and the
    // mapping works all the same.
    unsafe { libc::madvise(p, size, libc::MADV_HUGEPAGE) };
    p.cast()
}

// SAFETY: every block comes from `System` or from `map`, and goes back to where it came
// from, told apart by its layout's size, which the caller passes unchanged to
// `dealloc` and `realloc` (the `GlobalAlloc` contract).
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for HugeLarge {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        match mapped(layout) {
            true => {
                let p = map(layout.size());
                if !p.is_null() {
                    prefault::offer(p, 0, layout.size());
                }
                p
            }
            // SAFETY: the caller's layout, as `GlobalAlloc::alloc` requires.
            false => unsafe { System.alloc(layout) },
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        match mapped(layout) {
            // A fresh anonymous mapping reads as zeros.
            true => map(layout.size()),
            // SAFETY: as in `alloc`.
            false => unsafe { System.alloc_zeroed(layout) },
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        match mapped(layout) {
            true => {
                prefault::withdraw(ptr, layout.size());
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map`.
                unsafe { libc::munmap(ptr.cast(), layout.size()) };
            }
            // SAFETY: `ptr` came from `System` with this layout.
            false => unsafe { System.dealloc(ptr, layout) },
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `new_size` is nonzero and, rounded to `layout.align()`, does not
        // overflow (the caller's guarantee).
        let new = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        match (mapped(layout), mapped(new)) {
            // SAFETY: `ptr` came from `System` with `layout`.
            (false, false) => unsafe { System.realloc(ptr, layout, new_size) },
            (true, true) => {
                prefault::withdraw(ptr, layout.size());
                // SAFETY: `ptr` is a mapping of `layout.size()` bytes made by `map`;
                // the kernel may move it, keeping its contents and its advice.
                let p = unsafe {
                    libc::mremap(ptr.cast(), layout.size(), new_size, libc::MREMAP_MAYMOVE)
                };
                if p == libc::MAP_FAILED {
                    return std::ptr::null_mut();
                }
                let p: *mut u8 = p.cast();
                if new_size > layout.size() {
                    prefault::offer(p, layout.size(), new_size);
                }
                p
            }
            // From one kind to the other: a copy (a block crossing `LARGE`).
            _ => {
                // SAFETY: `new` is a valid layout (above).
                let p = unsafe { self.alloc(new) };
                if !p.is_null() {
                    // SAFETY: both blocks hold at least the smaller size, and are
                    // distinct; the old one is freed with its own layout.
                    unsafe {
                        std::ptr::copy_nonoverlapping(ptr, p, layout.size().min(new_size));
                        self.dealloc(ptr, layout);
                    }
                }
                p
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[allow(unsafe_code)]
    fn blocks_keep_their_bytes_across_sizes_and_go_back_where_they_came_from() {
        let a = HugeLarge;
        // Small, small -> large, large -> larger, large -> small, and zeroed.
        let small = Layout::from_size_align(1000, 8).unwrap();
        // SAFETY: each block is used within its layout and freed with it.
        unsafe {
            let p = a.alloc(small);
            assert!(!p.is_null());
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            let p = a.realloc(p, small, LARGE + 123);
            assert!(!p.is_null());
            let large = Layout::from_size_align(LARGE + 123, 8).unwrap();
            *p.add(LARGE + 100) = 7;
            let p = a.realloc(p, large, 3 * LARGE);
            let larger = Layout::from_size_align(3 * LARGE, 8).unwrap();
            assert_eq!(*p.add(LARGE + 100), 7);
            let p = a.realloc(p, larger, 500);
            let back = Layout::from_size_align(500, 8).unwrap();
            assert!((0..500).all(|i| *p.add(i) == (i % 251) as u8));
            a.dealloc(p, back);
            let zeroed = Layout::from_size_align(2 * LARGE, 4096).unwrap();
            let z = a.alloc_zeroed(zeroed);
            assert!((0..2 * LARGE).step_by(4093).all(|i| *z.add(i) == 0));
            a.dealloc(z, zeroed);
        }
        // A big alignment is the system's (a mapping is only page-aligned).
        assert!(!mapped(Layout::from_size_align(LARGE, 1 << 21).unwrap()));
    }

    #[test]
    #[allow(unsafe_code)]
    fn during_a_compile_a_large_block_is_faulted_in_ahead_of_its_writer_and_keeps_its_bytes() {
        let a = HugeLarge;
        let size = 64 << 20;
        let block = Layout::from_size_align(size, 8).unwrap();
        let page = |p: *mut u8, at: usize| prefault::resident(p as usize + at);
        // SAFETY: each block is used within its layout and freed with it.
        unsafe {
            // A first mapping tells `during` that this allocator is in use.
            a.dealloc(a.alloc(block), block);
            prefault::during(|| {
                let p = a.alloc(block);
                assert!(!p.is_null());
                let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
                while !page(p, size - 4096) {
                    assert!(
                        std::time::Instant::now() < deadline,
                        "the end of the block was not faulted in"
                    );
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                assert!(page(p, 32 << 20), "ahead of the writer");
                assert!(!page(p, 0), "the writer's first pages are left to it");
                // Written while the thread may still be at it, grown (withdrawn,
                // moved, offered again) and written on: every byte stays.
                for i in (0..size).step_by(4096) {
                    *p.add(i) = (i / 4096 % 251) as u8;
                }
                let q = a.realloc(p, block, 2 * size);
                assert!(!q.is_null());
                for i in (size..2 * size).step_by(4096) {
                    *q.add(i) = (i / 4096 % 251) as u8;
                }
                assert!((0..2 * size)
                    .step_by(4096)
                    .all(|i| *q.add(i) == (i / 4096 % 251) as u8));
                a.dealloc(q, Layout::from_size_align(2 * size, 8).unwrap());
            });
        }
    }

    #[test]
    #[allow(unsafe_code)]
    fn a_large_block_is_a_mapping_marked_for_huge_pages_and_a_small_one_is_not() {
        // The kernel lists a mapping's advice in /proc/self/smaps: `hg` for
        // MADV_HUGEPAGE.
        let marked = |p: *mut u8| -> Option<bool> {
            let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
            let at = p as usize;
            let mut inside = false;
            for line in smaps.lines() {
                if let Some((range, _)) = line.split_once(' ') {
                    if let Some((lo, hi)) = range.split_once('-') {
                        if let (Ok(lo), Ok(hi)) =
                            (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                        {
                            inside = (lo..hi).contains(&at);
                            continue;
                        }
                    }
                }
                if inside {
                    if let Some(flags) = line.strip_prefix("VmFlags:") {
                        return Some(flags.split_whitespace().any(|f| f == "hg"));
                    }
                }
            }
            None
        };
        let a = HugeLarge;
        let large = Layout::from_size_align(LARGE, 8).unwrap();
        let small = Layout::from_size_align(64 << 10, 8).unwrap();
        // SAFETY: the blocks are only looked up, then freed with their layouts.
        unsafe {
            let (l, s) = (a.alloc(large), a.alloc(small));
            assert_eq!(marked(l), Some(true), "the large block is advised");
            assert_eq!(marked(s), Some(false), "the small one is the heap's");
            a.dealloc(l, large);
            a.dealloc(s, small);
        }
    }
}
