//! In-process stack capture: the return addresses of the calling thread, innermost first.
//!
//! # Native mode
//!
//! DWARF CFI unwinding with framehop over the `.eh_frame_hdr`/`.eh_frame` bytes of every loaded
//! object, read in place (mstange/framehop, `Readme.md`, "in-process" use; the recipe and its
//! cost, about 18 ns a frame here, are in `docs/dependencies.md`, "Stack capture"). With
//! [`MustNotAllocateDuringUnwind`] and a cache made beforehand, unwinding allocates nothing;
//! code without unwind information (JIT code, objects built without `.eh_frame`) is crossed by
//! framehop's frame-pointer fallback rule.
//!
//! # Frame-pointer mode
//!
//! Opt-in, for programs built with frame pointers: DWARF until the first frame outside this
//! library (which is built without them), then a plain `rbp` chain walk, about 2 ns a frame.
//!
//! # Never crash the program
//!
//! Every read of the stack goes through one bounds check: the address must lie between the
//! stack pointer at capture and the end of the readable mapping that holds it, the thread's
//! stack, as listed in `/proc/self/maps` (read with plain system calls into a buffer on the
//! stack, once per thread, because `pthread_getattr_np` allocates in glibc). A wrong unwind
//! rule can then only end the stack early or produce a wrong address, never fault. The unwind
//! tables themselves are read in place and stay mapped while their object is loaded; the module
//! list is refreshed by the writer thread, so a library unloaded and another loaded at the same
//! address within one refresh period is the one case where stale tables could be read.

use crate::config::Mode;
use crate::memo::{self, Memo};
use crate::modules::Loaded;
use framehop::Unwinder as _;
use framehop::x86_64::{CacheX86_64, UnwindRegsX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, FrameAddress, Module, MustNotAllocateDuringUnwind};
use std::ops::Range;

/// The unwinder over the objects' unwind tables, in place in memory.
pub type Unwinder = UnwinderX86_64<&'static [u8], MustNotAllocateDuringUnwind>;
/// framehop's rule cache and DWARF evaluation space (allocated beforehand).
type Shard = CacheX86_64<MustNotAllocateDuringUnwind>;

/// Shards of framehop's cache, one picked per frame by address.
const SHARDS: usize = 8;

/// A thread's unwind-rule cache: [`SHARDS`] framehop caches side by side.
///
/// framehop's cache is direct-mapped with 509 slots (`rule_cache.rs`), so two hot return
/// addresses whose slots collide evict each other on every capture and each miss costs a DWARF
/// evaluation (about a microsecond in a large library). PyTorch's allocation stacks touch a few
/// hundred distinct return addresses (358 in a recorded H200 run), enough for many such
/// collisions: the likely cause of the 34% slower transformer steps measured there with one
/// cache. Choosing the shard by the address makes it a 4,072-slot cache (8 shards, about
/// 300 KiB a thread; 16 measured no faster). On `recorder/bench/many_stacks.py` (50 stacks over
/// 400 functions) a capture fell from 1.36 µs to 0.42 µs.
///
/// Beside it, the rules framehop does not cache, per return address ([`memo`]).
pub struct Cache {
    shards: Box<[Shard]>,
    memo: Memo,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache {
            shards: (0..SHARDS).map(|_| Shard::new_in()).collect(),
            memo: Memo::default(),
        }
    }
}

impl Cache {
    fn for_address(&mut self, address: u64) -> Option<&mut Shard> {
        // Consecutive slots of one shard are 1 apart in address; spread by the bits above.
        let i = (address / 509) as usize % SHARDS;
        self.shards.get_mut(i)
    }
}

/// An immutable unwinder for one state of the module list. Replaced, never changed, when the
/// list changes (see `stacks`).
pub struct Snapshot {
    unwinder: Unwinder,
    /// The same objects' call frame information, for the rules framehop does not cache.
    cfi: memo::Tables,
    /// This library's own address range, whose frames are left out.
    own: Range<u64>,
    /// The CUDA driver's and runtime's ranges (`libcuda.so*`, `libcudart*`): what stands between
    /// a library's call and the driver ([`Snapshot::in_cuda`]).
    cuda: Vec<Range<u64>>,
}

impl Snapshot {
    /// An unwinder over `modules`.
    pub fn new(modules: &[Loaded], own: Range<u64>) -> Snapshot {
        let mut unwinder = Unwinder::new();
        for m in modules {
            let (Some((hdr_svma, hdr)), Some((eh_svma, eh))) = (m.eh_frame_hdr, m.eh_frame) else {
                continue;
            };
            let info = ExplicitModuleSectionInfo {
                base_svma: 0,
                eh_frame_hdr_svma: Some(hdr_svma..hdr_svma + hdr.len() as u64),
                eh_frame_hdr: Some(hdr),
                eh_frame_svma: Some(eh_svma..eh_svma + eh.len() as u64),
                eh_frame: Some(eh),
                ..Default::default()
            };
            unwinder.add_module(Module::new(m.path.clone(), m.range.clone(), m.bias, info));
        }
        let cuda = modules
            .iter()
            .filter(|m| {
                let name = m.path.rsplit('/').next().unwrap_or(&m.path);
                ["libcuda.so", "libcuda-", "libcudart"]
                    .iter()
                    .any(|p| name.starts_with(p))
            })
            .map(|m| m.range.clone())
            .collect();
        Snapshot {
            unwinder,
            cfi: memo::Tables::new(modules),
            own,
            cuda,
        }
    }

    /// True for an address in the CUDA driver or runtime.
    pub fn in_cuda(&self, at: u64) -> bool {
        self.cuda.iter().any(|r| r.contains(&at))
    }
}

/// The readable mapping that holds a thread's stack.
#[derive(Debug, Clone, Copy, Default)]
pub struct Bounds {
    lo: u64,
    hi: u64,
}

impl Bounds {
    /// The upper end of readable stack above `sp`, finding the mapping again when `sp` left the
    /// known one (the first capture on a thread, a signal handler on an alternate stack, a main
    /// thread stack that grew).
    fn top_for(&mut self, sp: u64) -> Option<u64> {
        if !(self.lo <= sp && sp < self.hi) {
            let (lo, hi) = readable_mapping(sp)?;
            *self = Bounds { lo, hi };
        }
        Some(self.hi)
    }
}

/// Writes the calling thread's return addresses, innermost first and each adjusted to point
/// into its call instruction, into `out`, leaving out this library's own frames and stopping
/// before the first frame inside `stop` (the Python interpreter, for `mixed` stacks); returns
/// how many it wrote (at most `out.len()`). Allocation-free, lock-free, never faults.
#[inline(never)]
pub fn capture(
    snapshot: &Snapshot,
    cache: &mut Cache,
    bounds: &mut Bounds,
    mode: Mode,
    stop: &Range<u64>,
    out: &mut [u64],
) -> usize {
    let (ip, sp, bp): (u64, u64, u64);
    // SAFETY: reads three registers; no memory access.
    unsafe {
        std::arch::asm!(
            "lea {ip}, [rip]",
            "mov {sp}, rsp",
            "mov {bp}, rbp",
            ip = out(reg) ip,
            sp = out(reg) sp,
            bp = out(reg) bp,
            options(nomem, nostack, preserves_flags),
        );
    }
    let Some(top) = bounds.top_for(sp) else {
        return 0;
    };
    let mut read = |addr: u64| -> Result<u64, ()> {
        if addr >= sp && addr.checked_add(8).is_some_and(|end| end <= top) {
            // SAFETY: inside the mapping that holds this thread's stack, at or above the live
            // stack pointer, so mapped, readable and not reused while this function runs.
            Ok(unsafe { (addr as *const u64).read_unaligned() })
        } else {
            Err(())
        }
    };

    cache.memo.follow(&snapshot.cfi);
    let own = &snapshot.own;
    let mut regs = UnwindRegsX86_64::new(ip, sp, bp);
    let mut frame = FrameAddress::from_instruction_pointer(ip);
    let mut n = 0;
    // Frames inside this library do not count towards the depth; bound them anyway.
    let mut steps = out.len() + 64;
    while n < out.len() && steps > 0 {
        steps -= 1;
        let Some(ra) = step(snapshot, cache, frame, &mut regs, &mut read) else {
            break;
        };
        let Some(next) = FrameAddress::from_return_address(ra) else {
            break;
        };
        frame = next;
        let at = next.address_for_lookup();
        if n == 0 && own.contains(&at) {
            continue;
        }
        if stop.contains(&at) {
            break;
        }
        if let Some(slot) = out.get_mut(n) {
            *slot = at;
        }
        n += 1;
        if mode == Mode::FramePointer {
            return n + frame_pointer_walk(
                regs.bp(),
                &mut read,
                out.get_mut(n..).unwrap_or(&mut []),
            );
        }
    }
    n
}

/// Unwinds one frame: the caller's return address, with `regs` moved to the caller. A return
/// address whose rule framehop cannot cache takes the remembered rule ([`memo`]); the first
/// time framehop misses its cache at an address, the memo learns which rule it is.
#[inline]
fn step(
    snapshot: &Snapshot,
    cache: &mut Cache,
    frame: FrameAddress,
    regs: &mut UnwindRegsX86_64,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
) -> Option<u64> {
    let at = frame.address_for_lookup();
    let remembered = frame
        .is_return_address()
        .then(|| cache.memo.bp_rule(at))
        .flatten();
    if let Some(rule) = remembered {
        let (ra, sp, bp) = rule.exec(regs.sp(), regs.bp(), read)?;
        regs.set_ip(ra);
        regs.set_sp(sp);
        regs.set_bp(bp);
        return Some(ra);
    }
    let shard = cache.for_address(at)?;
    let hits = shard.stats().hit_count;
    let ra = snapshot.unwinder.unwind_frame(frame, regs, shard, read);
    let missed = shard.stats().hit_count == hits;
    if missed && frame.is_return_address() && !cache.memo.knows(at) {
        cache.memo.learn(&snapshot.cfi, at);
    }
    ra.ok().flatten()
}

/// Follows the `rbp` chain from `bp`: each frame stores the caller's `rbp` at `[bp]` and the
/// return address at `[bp + 8]`. Stops at the first frame that does not move up the stack.
fn frame_pointer_walk(
    mut bp: u64,
    read: &mut impl FnMut(u64) -> Result<u64, ()>,
    out: &mut [u64],
) -> usize {
    let mut n = 0;
    for slot in out.iter_mut() {
        let (Ok(next), Ok(ra)) = (read(bp), read(bp.wrapping_add(8))) else {
            break;
        };
        if ra == 0 {
            break;
        }
        *slot = ra - 1;
        n += 1;
        if next <= bp {
            break;
        }
        bp = next;
    }
    n
}

/// The readable mapping of this process that holds `address`, from `/proc/self/maps`.
///
/// Plain `open`/`read`/`close` into a buffer on the stack and a streaming parser: no
/// allocation, no lock, safe on any thread.
fn readable_mapping(address: u64) -> Option<(u64, u64)> {
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe {
        libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    let mut parser = MapsParser::default();
    let mut buf = [0u8; 4096];
    let mut found = None;
    'read: loop {
        // SAFETY: reads into a buffer of `buf.len()` bytes owned by this frame.
        let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if got <= 0 {
            break;
        }
        for &b in buf.get(..got as usize).unwrap_or(&[]) {
            if let Some((lo, hi, readable)) = parser.feed(b)
                && lo <= address
                && address < hi
            {
                found = readable.then_some((lo, hi));
                break 'read;
            }
        }
    }
    // SAFETY: closes the descriptor opened above.
    unsafe { libc::close(fd) };
    found
}

/// Parses `START-END PERMS ...` lines one byte at a time.
#[derive(Default)]
struct MapsParser {
    field: u8,
    lo: u64,
    hi: u64,
    readable: bool,
}

impl MapsParser {
    /// Takes one byte; returns `(start, end, readable)` when a line's permissions are known.
    fn feed(&mut self, b: u8) -> Option<(u64, u64, bool)> {
        let hex = |b: u8| (b as char).to_digit(16).map(u64::from);
        match (self.field, b) {
            (_, b'\n') => {
                *self = MapsParser::default();
                None
            }
            (0, b'-') => {
                self.field = 1;
                None
            }
            (0, _) => {
                self.lo = (self.lo << 4) | hex(b).unwrap_or(0);
                None
            }
            (1, b' ') => {
                self.field = 2;
                None
            }
            (1, _) => {
                self.hi = (self.hi << 4) | hex(b).unwrap_or(0);
                None
            }
            (2, _) => {
                self.readable = b == b'r';
                self.field = 3;
                Some((self.lo, self.hi, self.readable))
            }
            _ => None,
        }
    }
}
