//! `libvramtrace_preload.so`: records every CUDA memory call of an unmodified program.
//!
//! # How calls are caught
//!
//! Programs reach the driver through `dlsym(libcuda, name)` or through `cuGetProcAddress*`, so
//! plain symbol interposition catches almost nothing (`docs/interposition.md`). This
//! library exports a `dlsym` trampoline that tail-jumps to the next one (another interposer's,
//! else glibc's) with the caller's identity intact, and a `dlvsym` trampoline through which an
//! interposer loaded before it finds it ([`dlsym`], `docs/interposition.md` §6), and substitutes
//! a wrapper for every tracked function it is asked for by name, either there or in what
//! `cuGetProcAddress`, `cuGetProcAddress_v2` and the runtime's `cudaGetDriverEntryPoint*`
//! return ([`hooks::resolvers`]). Each wrapper is also exported
//! under the driver's exact name, which serves programs linked with `-lcuda`.
//!
//! # The hook path
//!
//! A wrapper calls the real function, then copies one fixed-size record into a shared file
//! mapping (the crash journal, [`ring`]): no allocation, no lock, no system call beyond the
//! vDSO clock (and `sched_yield` while the ring is full), no environment read. The only driver
//! call is `cuCtxGetCurrent` (plus `cuCtxGetDevice` once per context) to learn the event's
//! device ([`context`]). A writer thread ([`writer`]) drains the journal into
//! `.vramtrace` chunks. Everything that allocates (opening files, starting the thread) happens
//! once per process in [`session`], on the first CUDA lookup or call.
//!
//! # Never harm the program
//!
//! Every wrapper returns exactly what the real function returned. If the trace cannot be
//! written, one warning goes to stderr and the wrappers keep forwarding. Code that runs on the
//! program's threads does not panic (no indexing, no unwrap); the writer thread's work runs
//! under `catch_unwind`.

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
compile_error!("the recorder supports x86-64 Linux only (the dlsym trampoline is x86-64 code)");

mod autograd;
mod bench;
mod clock;
mod config;
mod context;
mod cuda;
mod dlsym;
mod driver_count;
mod elfsym;
mod exit;
mod filesize;
mod heartbeat;
mod held;
mod hooks;
mod hot;
mod lifecycle;
mod memo;
mod modules;
mod nvml;
mod pause;
mod python;
mod real;
mod ring;
mod session;
mod stacks;
mod stamps;
mod table;
mod thread;
mod threadnames;
mod torch;
mod torch_limits;
mod tracefile;
mod unwind;
mod writer;
