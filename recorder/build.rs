//! Binds the library's references to its own functions to its own definitions
//! (`-Bsymbolic-functions`). The library exports `dlsym`, `dlvsym` and the driver's names; without
//! this, a second interposer preloaded before it (HAMi-core exports the same names) would
//! interpose the addresses the recorder takes of its own wrappers and trampolines, and the
//! recorder would hand out, and compare against, the other library's functions
//! (docs/interposition.md §6).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
}
