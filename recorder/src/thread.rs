//! The calling thread's own state on the hook path (its id, its stack-capture block, the
//! tracker's held record, whether it is an autograd engine thread; in a bench build, its part
//! timing's cursor), in one static TLS block read with the initial-exec model: one
//! `%fs`-relative address computation and no call.
//!
//! Rust's `thread_local!` in a `cdylib` compiles to the general-dynamic model: every access
//! calls `__tls_get_addr`, which reads the thread's dtv and the loader's generation counter.
//! After a training step's work those are cache misses on every allocator entry (8 of the 35
//! last-level misses of a cold tensor, recorder/BENCHMARKS.md). This library is loaded at
//! start-up (`LD_PRELOAD`), so its TLS block sits in the static TLS area at an offset from the
//! thread pointer fixed at load time (a `R_X86_64_TPOFF64` relocation in its GOT): the
//! initial-exec access that C gets with `__attribute__((tls_model("initial-exec")))`
//! (Drepper, "ELF Handling For Thread-Local Storage", the initial-exec model's x86-64 code
//! sequence, <https://www.akkadia.org/drepper/tls.pdf>). `dlopen` of such a
//! library still works while glibc's static TLS surplus has room (it refuses with an error, it
//! does not crash, when it has not).
//!
//! The block is in `.tbss`: zero in every new thread, which is each field's initial value. It
//! holds only `Cell`s of plain data and has no destructor.

use std::cell::Cell;
use vramtrace_format::journal::Record;

/// One thread's state. All-zero bytes are its initial value (a `.tbss` block).
#[repr(C, align(64))]
pub struct PerThread {
    /// The thread's kernel id, 0 until read (`clock::tid`).
    pub tid: Cell<u32>,
    /// Whether `held` holds a record (`torch`).
    pub has_held: Cell<bool>,
    /// Whether the thread is one of PyTorch's autograd engine threads: 0 not asked yet, then
    /// `autograd::ENGINE` or `autograd::OTHER` (`autograd`).
    pub engine: Cell<u8>,
    /// The thread's stack-capture block, null until it claimed one (`stacks`, which alone
    /// knows its type).
    pub stack_block: Cell<*const u8>,
    /// The tracker's held `free_requested` record (`torch`).
    pub held: Cell<Record>,
    /// Bench builds: the time-stamp counter at the running part's start (`stamps`).
    #[cfg(feature = "bench")]
    pub stamp_at: Cell<u64>,
    /// Bench builds: the thread's sums, null until it claimed a slot (`stamps`, which alone
    /// knows their type).
    #[cfg(feature = "bench")]
    pub stamp_slot: Cell<*const u8>,
    /// Bench builds: the part running, 0 outside a stamped path (`stamps`).
    #[cfg(feature = "bench")]
    pub stamp_part: Cell<u8>,
}

const _: () = assert!(std::mem::size_of::<PerThread>() == 192);

std::arch::global_asm!(
    ".pushsection .tbss,\"awT\",@nobits",
    ".balign 64",
    ".globl vramtrace_per_thread",
    ".hidden vramtrace_per_thread",
    ".type vramtrace_per_thread, @object",
    ".size vramtrace_per_thread, 192",
    "vramtrace_per_thread:",
    ".zero 192",
    ".popsection",
);

/// The calling thread's state.
#[inline(always)]
pub fn this() -> &'static PerThread {
    let p: *const PerThread;
    // SAFETY: `%fs:0` is the thread pointer (x86-64 TLS ABI: the TCB starts with a pointer to
    // itself), and the GOT slot holds the block's offset from it, set by the loader for this
    // static TLS block; the result is this thread's 192-byte `.tbss` block, 64-byte aligned.
    unsafe {
        std::arch::asm!(
            "mov {p}, qword ptr fs:[0]",
            "add {p}, qword ptr [rip + vramtrace_per_thread@GOTTPOFF]",
            p = out(reg) p,
            options(pure, readonly, nostack),
        );
    }
    // SAFETY: the block lives as long as the thread, is only touched by it (every field is a
    // `Cell`, so `PerThread` is not `Sync` and the reference cannot be sent to another thread
    // usefully: callers use it at once), and all-zero bytes are a valid `PerThread`. The
    // `'static` is the thread's lifetime; no caller keeps the reference.
    unsafe { &*p }
}
