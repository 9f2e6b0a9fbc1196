//! Where CPython keeps what the frame walk reads, per version (x86-64, default builds).
//!
//! 3.11 and 3.12 publish no offsets: the figures below are `offsetof` of the structs in each
//! version's headers (`Include/cpython/pystate.h` `PyThreadState.cframe`,
//! `Include/internal/pycore_frame.h` `_PyCFrame.current_frame` and `_PyInterpreterFrame`,
//! `Include/cpython/code.h` `PyCodeObject`, `Include/cpython/unicodeobject.h`
//! `PyASCIIObject`/`PyCompactUnicodeObject`), printed by a C program compiled against 3.11.7's
//! and 3.12.1's internal headers; py-spy's generated bindings (`src/python_bindings/v3_11_0.rs`,
//! `v3_12_0.rs`) agree. Internal layouts do not change within a minor version.
//!
//! 3.13 and later publish them in `_Py_DebugOffsets`, the struct at the very start of
//! `_PyRuntime` (cookie `xdebugpy`; `Include/internal/pycore_runtime.h` in 3.13,
//! `pycore_debug_offsets.h` later): [`from_debug_offsets`] reads the 3.13 form of that struct
//! and checks its version and build. 3.14 reorders the struct and tags `f_executable`; it is
//! refused until that layout is verified. See `docs/python-frames.md`.

/// Offsets the frame walk (hook path) and the resolver (writer thread) use; all in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// 3.11/3.12: `PyThreadState.cframe`; 3.13: `PyThreadState.current_frame`.
    pub tstate_frame: usize,
    /// 3.11/3.12: `_PyCFrame.current_frame` (one more hop); `None` on 3.13.
    pub cframe_frame: Option<usize>,
    pub frame_code: usize,
    pub frame_previous: usize,
    /// `prev_instr` (3.11/3.12: the instruction executing) or `instr_ptr` (3.13).
    pub frame_instr: usize,
    pub frame_owner: usize,
    /// `_co_firsttraceable` for skipping frames still being set up (3.11/3.12), as CPython's
    /// own `_PyFrame_IsIncomplete` does; `None` where only the shim check applies.
    pub code_firsttraceable: Option<usize>,
    pub code_filename: usize,
    pub code_qualname: usize,
    pub code_linetable: usize,
    pub code_firstlineno: usize,
    pub code_adaptive: usize,
    pub unicode_length: usize,
    pub unicode_state: usize,
    pub ascii_size: usize,
    pub bytes_size: usize,
    pub bytes_sval: usize,
}

/// `FRAME_OWNED_BY_GENERATOR`, the same in 3.11 to 3.13.
pub const OWNED_BY_GENERATOR: u8 = 1;
/// `FRAME_OWNED_BY_CSTACK` (3.12, 3.13): the shim frame at each entry into the interpreter.
pub const OWNED_BY_CSTACK: u8 = 3;

/// The offsets of a CPython 3.11 or 3.12 (`minor`), or `None` for another.
pub fn hard_coded(minor: u32) -> Option<Layout> {
    let common = Layout {
        tstate_frame: 56,
        cframe_frame: None,
        frame_code: 0,
        frame_previous: 0,
        frame_instr: 56,
        frame_owner: 0,
        code_firsttraceable: None,
        code_filename: 112,
        code_qualname: 128,
        code_linetable: 136,
        code_firstlineno: 0,
        code_adaptive: 0,
        unicode_length: 16,
        unicode_state: 32,
        ascii_size: 0,
        bytes_size: 16,
        bytes_sval: 32,
    };
    match minor {
        11 => Some(Layout {
            cframe_frame: Some(8),
            frame_code: 32,
            frame_previous: 48,
            frame_owner: 69,
            code_firsttraceable: Some(168),
            code_firstlineno: 72,
            code_adaptive: 184,
            // 3.11 strings still carry `wstr`.
            ascii_size: 48,
            ..common
        }),
        12 => Some(Layout {
            cframe_frame: Some(0),
            frame_code: 0,
            frame_previous: 8,
            frame_owner: 70,
            code_firsttraceable: Some(176),
            code_firstlineno: 68,
            code_adaptive: 192,
            ascii_size: 40,
            ..common
        }),
        _ => None,
    }
}

/// Why a `_Py_DebugOffsets` cannot be used.
#[derive(Debug)]
pub enum Refusal {
    NoCookie,
    FreeThreaded,
    Unverified,
}

/// The offsets from a 3.13 `_Py_DebugOffsets` (`words`: the struct as 64-bit words, from the
/// start of `_PyRuntime`; the cookie is word 0).
pub fn from_debug_offsets(words: &[u64]) -> Result<Layout, Refusal> {
    let w = |i: usize| words.get(i).copied().unwrap_or(0) as usize;
    if words.first().map(|c| c.to_le_bytes()) != Some(*b"xdebugpy") {
        return Err(Refusal::NoCookie);
    }
    let version = (w(1) >> 16) as u32;
    if version != 0x030d {
        return Err(Refusal::Unverified);
    }
    if w(2) != 0 {
        return Err(Refusal::FreeThreaded);
    }
    // Word indices of the 3.13 struct: cookie, version, free_threaded, runtime_state (3 words:
    // 3..6), interpreter_state (13: 6..19), thread_state (9: 19..28), interpreter_frame
    // (6: 28..34), code_object (10: 34..44), pyobject (2), type_object (4), tuple_object (3),
    // list_object (3), dict_object (3), float_object (2), long_object (3), bytes_object
    // (3: 64..67), unicode_object (4: 67..71), gc (2); checked with `offsetof` against 3.13.0.
    let (thread, frame, code, bytes, unicode) = (19, 28, 34, 64, 67);
    Ok(Layout {
        tstate_frame: w(thread + 4),
        cframe_frame: None,
        frame_previous: w(frame + 1),
        frame_code: w(frame + 2),
        frame_instr: w(frame + 3),
        frame_owner: w(frame + 5),
        code_firsttraceable: None,
        code_filename: w(code + 1),
        code_qualname: w(code + 3),
        code_linetable: w(code + 4),
        code_firstlineno: w(code + 5),
        code_adaptive: w(code + 9),
        unicode_length: w(unicode + 2),
        unicode_state: w(unicode + 1),
        ascii_size: w(unicode + 3),
        bytes_size: w(bytes + 1),
        bytes_sval: w(bytes + 2),
    })
}
