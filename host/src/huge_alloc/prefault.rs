//! Faulting in a compile's large blocks on the core it leaves idle.
//!
//! On a VM, memory touched for the first time is slow: the kernel zeroes each page,
//! and the hypervisor has to back it first (on a Firecracker VM with free page
//! reporting, every page freed a while ago is handed back to the host). The serial
//! tail of a big compile is mostly that: wasmtime appends every function to a text
//! section of hundreds of megabytes, then writes the object, on one thread, while the
//! other cores wait; half of clang.wasm's baseline tail was the kernel zeroing those
//! two blocks.
//!
//! While a compile runs ([`during`]), each large block [`super::HugeLarge`] maps, and
//! the part a growing one gains, is handed to a *prefault thread* that faults it in
//! (`madvise(MADV_POPULATE_WRITE)`) two megabytes at a time, ahead of the thread
//! writing it. Faulting in leaves the contents alone, so it may race the writer: a
//! page is faulted in once, by whichever comes first. Zeroed blocks are not handed
//! over (they may be meant sparse), nor is anything outside a compile.
//!
//! One block is worked on at a time: the largest offered (the text section grows
//! beside blocks of a few megabytes, which must not take the thread from it). A block
//! is withdrawn, under the same lock the prefault thread holds while it works on a
//! piece, before it is unmapped or moved, so the thread never touches memory that is
//! no longer the block's. A kernel without `MADV_POPULATE_WRITE` (before Linux 5.14)
//! turns the thread off; `WASM9P_PREFAULT=0` does too (to measure what it brings).
//!
//! Why it pays on two cores: the compile's serial tail leaves one idle, and first
//! touches do not queue behind each other. On the VM of BENCHMARKS.md §6 one thread
//! faults in fresh memory at 300-450 MB/s and two at 0.9-2 GB/s together.
//!
//! The cost: a block is faulted in to its end even where its owner would not have
//! written (the spare capacity of a `Vec` that doubled). For clang.wasm's baseline
//! compile that is 15-20 MB more at the peak (2.09 -> 2.11 GB).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

/// How much is faulted in at a time (and the longest a withdrawal waits for).
const PIECE: usize = 2 << 20;

/// How far ahead of its writer a block is faulted in. Two threads faulting in the
/// same huge page wait for each other, so the prefault thread starts this far into a
/// block, and jumps this far again whenever it finds its next piece already faulted
/// in (the writer has caught up): the writer faults in what lies behind, the thread
/// what lies ahead, and neither waits for the other.
const AHEAD: usize = 16 << 20;

const PAGE: usize = 4096;

/// Bytes still to fault in: `[next, end)`, page-aligned, of a block of `size` bytes.
struct Span {
    next: usize,
    end: usize,
    size: usize,
}

/// The block being faulted in (`size`: the block's, to keep to the largest).
static SPAN: Mutex<Option<Span>> = Mutex::new(None);
/// Wakes the prefault thread when there is a span.
static WAKE: Condvar = Condvar::new();
/// The prefault thread exists (set once; withdrawals then take the lock).
static STARTED: AtomicBool = AtomicBool::new(false);
/// The kernel refused `MADV_POPULATE_WRITE`.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);
/// Compiles under way: blocks are handed over while this is not zero.
static COMPILES: AtomicUsize = AtomicUsize::new(0);

fn span() -> MutexGuard<'static, Option<Span>> {
    SPAN.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `work` (a compile) with large blocks faulted in ahead of their writers, when
/// the process's allocator is [`super::HugeLarge`]; otherwise just runs it.
pub fn during<T>(work: impl FnOnce() -> T) -> T {
    start();
    COMPILES.fetch_add(1, Ordering::SeqCst);
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            COMPILES.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let _done = Done;
    work()
}

/// Starts the prefault thread once, when this process allocates with `HugeLarge`.
fn start() {
    if std::env::var_os("WASM9P_PREFAULT").is_some_and(|v| v == "0") {
        return;
    }
    if !super::installed() {
        return;
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let spawned = std::thread::Builder::new()
            .name("wasm9p-prefault".into())
            .spawn(run);
        if spawned.is_ok() {
            STARTED.store(true, Ordering::SeqCst);
        }
    });
}

/// Hands `[block + from, block + to)` of a block just mapped or grown to the prefault
/// thread, in place of whatever it was doing, when a compile is under way.
pub(super) fn offer(block: *mut u8, from: usize, to: usize) {
    if !STARTED.load(Ordering::Relaxed)
        || COMPILES.load(Ordering::Relaxed) == 0
        || UNSUPPORTED.load(Ordering::Relaxed)
    {
        return;
    }
    let base = block as usize;
    let (start, end) = (
        (base + from).next_multiple_of(PAGE),
        (base + to).next_multiple_of(PAGE),
    );
    if start >= end {
        return;
    }
    let next = start + (AHEAD.min((end - start) / 2)).next_multiple_of(PAGE);
    let mut span = span();
    if span.as_ref().is_some_and(|s| s.size > to) {
        return;
    }
    *span = Some(Span {
        next,
        end,
        size: to,
    });
    WAKE.notify_one();
}

/// Takes the block `[block, block + len)` back before it is unmapped or moved: once
/// this returns, the prefault thread does not touch it.
pub(super) fn withdraw(block: *mut u8, len: usize) {
    if !STARTED.load(Ordering::Relaxed) {
        return;
    }
    let (lo, hi) = (block as usize, block as usize + len.next_multiple_of(PAGE));
    let mut span = span();
    if span.as_ref().is_some_and(|s| s.next < hi && lo < s.end) {
        *span = None;
    }
}

/// The prefault thread: faults in the current span a piece at a time, holding the
/// lock for each piece so that a withdrawal waits for it.
fn run() {
    let mut span = span();
    loop {
        let Some(s) = span.as_mut() else {
            span = WAKE.wait(span).unwrap_or_else(PoisonError::into_inner);
            continue;
        };
        if s.next < s.end && resident(s.next) {
            s.next = (s.next + AHEAD).min(s.end);
        }
        if s.next >= s.end {
            *span = None;
            continue;
        }
        let piece_end = ((s.next / PIECE + 1) * PIECE).min(s.end);
        match populate(s.next, piece_end - s.next) {
            Ok(()) => s.next = piece_end,
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => {
                if e.raw_os_error() == Some(libc::EINVAL) {
                    UNSUPPORTED.store(true, Ordering::Relaxed);
                }
                *span = None;
            }
        }
        // Let a withdrawal or a new offer in between pieces.
        drop(span);
        span = self::span();
    }
}

/// Whether the page at `at` (in a live block, as for [`populate`]) is faulted in.
#[allow(unsafe_code)]
pub(super) fn resident(at: usize) -> bool {
    let mut vec = [0u8; 1];
    // SAFETY: `at` is page-aligned and in a live mapping; `vec` holds the one byte
    // the kernel writes for one page.
    let r = unsafe { libc::mincore(at as *mut libc::c_void, 1, vec.as_mut_ptr()) };
    r == 0 && vec[0] & 1 == 1
}

/// Faults in `[at, at + len)` for writing, leaving its contents alone.
#[allow(unsafe_code)]
fn populate(at: usize, len: usize) -> std::io::Result<()> {
    // SAFETY: the range lies in a live block of `HugeLarge` (the caller holds the span
    // lock, and blocks are withdrawn under it before they are unmapped or moved);
    // MADV_POPULATE_WRITE only faults pages in, as a write would, without writing.
    let r = unsafe { libc::madvise(at as *mut libc::c_void, len, libc::MADV_POPULATE_WRITE) };
    match r {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}
