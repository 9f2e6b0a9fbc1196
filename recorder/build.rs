//! Binds the library's references to its own symbols to its own definitions (`-Bsymbolic`; the
//! library exports functions only, so this is `-Bsymbolic-functions`, which zig's linker, used
//! for the wheel's glibc 2.17 build, does not take). The library exports `dlsym`, `dlvsym` and
//! the driver's names; without this, a second interposer preloaded before it (HAMi-core exports
//! the same names) would interpose the addresses the recorder takes of its own wrappers and
//! trampolines, and the recorder would hand out, and compare against, the other library's
//! functions (docs/interposition.md §6).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
}
