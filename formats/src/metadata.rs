//! The metadata that describes a whole trace.

use serde::{Deserialize, Serialize};

/// What wrote the trace, where, and under which allocator settings.
///
/// A file holds one or more metadata chunks; a later one replaces an earlier one (a recorder
/// learns the driver version only after `cuInit`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// Name and version of the program that wrote the file, e.g. `vramtrace-recorder 0.1.0`.
    pub writer: String,
    /// Host name of the machine the program ran on.
    pub host: String,
    /// `cuDriverGetVersion`, 1000·major + 10·minor, or 0 when unknown.
    pub driver_version: u32,
    /// The allocator-related environment variables, as `(name, value)` pairs, for example
    /// `PYTORCH_CUDA_ALLOC_CONF`, `XLA_PYTHON_CLIENT_*`, `TF_GPU_ALLOCATOR`.
    pub environment: Vec<(String, String)>,
    /// `request` when every event is one program-level buffer (pass-through allocators,
    /// snapshot imports), `segment` when a caching allocator sits between the program and the
    /// driver, empty when the writer does not know.
    pub capture_level: String,
}

/// The environment variables a recorder copies into [`Metadata::environment`].
pub const ALLOCATOR_ENV_VARS: &[&str] = &[
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
    "PYTORCH_NO_CUDA_MEMORY_CACHING",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "XLA_PYTHON_CLIENT_MEM_FRACTION",
    "XLA_PYTHON_CLIENT_ALLOCATOR",
    "TF_GPU_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "CUPY_GPU_MEMORY_LIMIT",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_MODULE_LOADING",
    "NCCL_CUMEM_ENABLE",
    // Not allocator settings: the launcher variables that name the job and the process's rank
    // in it (torchrun / torch.distributed, Slurm, Open MPI), for analysing one job's traces.
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_SIZE",
];
