//! The hook set: one exported wrapper per tracked driver function (docs/interposition.md §7), plus
//! the resolvers and the context calls that tell which device is current. The list of them is
//! `table`'s; their addresses are [`resolvers::WRAPPERS`].
//!
//! Each wrapper has exactly the ABI of the exported driver symbol whose name it bears, and is
//! the pointer handed out wherever the program asks for that symbol (see [`resolvers`]).

pub mod array;
pub mod context;
pub mod device;
pub mod graph;
pub mod host;
pub mod import;
pub mod pool;
pub mod resolvers;
pub mod sync;
pub mod vmm;

/// Defines exported wrappers that call the real function, then record one event.
///
/// `|r, e| body` runs after the real call with `r` its result and `e` the journal record to
/// fill (api, times, pid, tid, device and result are already set). The body runs only when the
/// recorder is active and must not allocate, lock or panic.
macro_rules! hook {
    ($( $name:ident ),+ => fn $args:tt |$r:ident, $e:ident| $body:block) => {
        $( $crate::hooks::hook_one!($name $args |$r, $e| $body); )+
    };
}

macro_rules! hook_one {
    ($name:ident ($($arg:ident : $ty:ty),* $(,)?) |$r:ident, $e:ident| $body:block) => {
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> $crate::cuda::CUresult {
            type Real = unsafe extern "C" fn($($ty),*) -> $crate::cuda::CUresult;
            let hook = $crate::table::Hook::$name;
            let Some(real) = $crate::real::real(hook, $name as *const () as usize) else {
                return $crate::cuda::CUDA_ERROR_NOT_INITIALIZED;
            };
            // SAFETY: the slot holds the address of the exported driver function of exactly
            // this name, whose ABI this wrapper's signature copies from cuda.h.
            let real = unsafe { std::mem::transmute::<usize, Real>(real) };
            let wanted = $crate::ring::wanted();
            let t0 = if wanted { $crate::clock::now() } else { 0 };
            // SAFETY: the arguments are the caller's, passed through unchanged.
            let $r = unsafe { real($($arg),*) };
            if wanted {
                let t1 = $crate::clock::now();
                $crate::session::start_if_needed();
                let mut $e = $crate::ring::record(hook, t0, t1, $r);
                #[allow(unused_unsafe)]
                // SAFETY: the body reads out-parameters the driver filled (only on success)
                // and input structs the caller passed to the driver.
                unsafe { $body }
                $crate::ring::push(&mut $e);
            }
            $r
        }
    };
}
pub(crate) use hook;
pub(crate) use hook_one;

/// True when `ptr` may be read: non-null and the call succeeded.
#[inline]
pub fn ok<T>(r: u32, ptr: *const T) -> bool {
    r == 0 && !ptr.is_null()
}
