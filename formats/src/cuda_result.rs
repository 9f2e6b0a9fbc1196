//! `CUresult` codes by name (the CUDA driver API's `cuda.h`, `enum cudaError_enum`): what a
//! failed call's [`crate::Event::result`] means. Only `CUDA_ERROR_OUT_OF_MEMORY` is an
//! out-of-memory failure; every other code (an invalid context, a call not permitted, a
//! handle that does not exist) is some other failure and is never called an OOM.

/// `CUDA_ERROR_OUT_OF_MEMORY`.
pub const CUDA_ERROR_OUT_OF_MEMORY: u32 = 2;

const NAMES: &[(u32, &str)] = &[
    (0, "CUDA_SUCCESS"),
    (1, "CUDA_ERROR_INVALID_VALUE"),
    (2, "CUDA_ERROR_OUT_OF_MEMORY"),
    (3, "CUDA_ERROR_NOT_INITIALIZED"),
    (4, "CUDA_ERROR_DEINITIALIZED"),
    (5, "CUDA_ERROR_PROFILER_DISABLED"),
    (34, "CUDA_ERROR_STUB_LIBRARY"),
    (46, "CUDA_ERROR_DEVICE_UNAVAILABLE"),
    (100, "CUDA_ERROR_NO_DEVICE"),
    (101, "CUDA_ERROR_INVALID_DEVICE"),
    (102, "CUDA_ERROR_DEVICE_NOT_LICENSED"),
    (200, "CUDA_ERROR_INVALID_IMAGE"),
    (201, "CUDA_ERROR_INVALID_CONTEXT"),
    (202, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT"),
    (205, "CUDA_ERROR_MAP_FAILED"),
    (206, "CUDA_ERROR_UNMAP_FAILED"),
    (207, "CUDA_ERROR_ARRAY_IS_MAPPED"),
    (208, "CUDA_ERROR_ALREADY_MAPPED"),
    (209, "CUDA_ERROR_NO_BINARY_FOR_GPU"),
    (210, "CUDA_ERROR_ALREADY_ACQUIRED"),
    (211, "CUDA_ERROR_NOT_MAPPED"),
    (214, "CUDA_ERROR_ECC_UNCORRECTABLE"),
    (216, "CUDA_ERROR_CONTEXT_ALREADY_IN_USE"),
    (217, "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"),
    (300, "CUDA_ERROR_INVALID_SOURCE"),
    (301, "CUDA_ERROR_FILE_NOT_FOUND"),
    (304, "CUDA_ERROR_OPERATING_SYSTEM"),
    (400, "CUDA_ERROR_INVALID_HANDLE"),
    (401, "CUDA_ERROR_ILLEGAL_STATE"),
    (500, "CUDA_ERROR_NOT_FOUND"),
    (600, "CUDA_ERROR_NOT_READY"),
    (700, "CUDA_ERROR_ILLEGAL_ADDRESS"),
    (701, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES"),
    (702, "CUDA_ERROR_LAUNCH_TIMEOUT"),
    (704, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"),
    (705, "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED"),
    (708, "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE"),
    (709, "CUDA_ERROR_CONTEXT_IS_DESTROYED"),
    (710, "CUDA_ERROR_ASSERT"),
    (712, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"),
    (713, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED"),
    (719, "CUDA_ERROR_LAUNCH_FAILED"),
    (800, "CUDA_ERROR_NOT_PERMITTED"),
    (801, "CUDA_ERROR_NOT_SUPPORTED"),
    (802, "CUDA_ERROR_SYSTEM_NOT_READY"),
    (803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"),
    (900, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED"),
    (901, "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"),
    (999, "CUDA_ERROR_UNKNOWN"),
];

/// The name of a `CUresult`, or `None` for a code this table does not know.
pub fn result_name(code: u32) -> Option<&'static str> {
    NAMES
        .binary_search_by_key(&code, |&(c, _)| c)
        .ok()
        .map(|i| NAMES[i].1)
}

/// `CUDA_ERROR_NAME (code)`, or `CUresult code` for an unknown one.
pub fn describe_result(code: u32) -> String {
    match result_name(code) {
        Some(name) => format!("{name} ({code})"),
        None => format!("CUresult {code}"),
    }
}

/// Whether a result is an out-of-memory failure.
pub fn is_out_of_memory(code: u32) -> bool {
    code == CUDA_ERROR_OUT_OF_MEMORY
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_named_and_only_2_is_out_of_memory() {
        assert!(NAMES.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(result_name(201), Some("CUDA_ERROR_INVALID_CONTEXT"));
        assert_eq!(describe_result(800), "CUDA_ERROR_NOT_PERMITTED (800)");
        assert_eq!(describe_result(12345), "CUresult 12345");
        assert!(is_out_of_memory(2) && !is_out_of_memory(201));
    }
}
