//! What a process holds on a device besides its allocator's pool, and the boards it may run on
//! (docs/definitions.md, "process peak").
//!
//! A process's device memory is its allocator's pool (the policy's *reserved*), the plain
//! driver allocations libraries make beside it (cuBLAS and cuDNN workspaces, NCCL: the stream's
//! [`super::Outside`] bytes, recorded in the trace), and the CUDA context, which no trace
//! records: the driver creates it before the first allocation, and only the device's free
//! memory shows it.

/// The CUDA context's share of the device per process, when the user gives none
/// (`--context`): measured on the H200 this project validates on (driver 580, CUDA 13,
/// PyTorch 2.11 with lazy module loading): the device memory in use
/// (`torch.cuda.mem_get_info()`) after a process's first one-element tensor, less PyTorch's
/// reserved memory (one 2 MiB segment): 648,871,936 bytes (618.8 MiB;
/// `samples/workloads/programs/tune_validate.py context`, docs/validation.md). Other drivers, GPUs and
/// sets of loaded kernels differ by tens to hundreds of MiB.
pub const CUDA_CONTEXT_BYTES: u64 = 648_871_936;

/// Nominal board sizes the `fit` table answers for, in GB as boards are sold
/// ([`crate::units::gpu_bytes`]).
pub const GPU_SIZES_GB: [u64; 9] = [16, 24, 32, 40, 48, 80, 94, 141, 192];

/// What the allocator's pool may take on a device of `device` bytes once the context and the
/// memory outside the pool are there.
pub fn pool_capacity(device: u64, context: u64, outside: u64) -> u64 {
    if device == u64::MAX {
        return device;
    }
    device.saturating_sub(context.saturating_add(outside))
}

/// The process peak: the pool's peak, the most bytes outside it, and the context. The two
/// peaks may fall at different moments, so this is at most that much above the true peak of
/// their sum (docs/definitions.md).
pub fn process_peak(pool_peak: u64, outside_peak: u64, context: u64) -> u64 {
    pool_peak
        .saturating_add(outside_peak)
        .saturating_add(context)
}
