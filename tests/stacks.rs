//! End-to-end: the native stacks the recorder attaches to allocations name the call sites that
//! allocated, stay within their depth limit, follow libraries loaded late, and never crash the
//! program, whatever is on its stack.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use vramtrace_format::{Event, Module, NO_STACK, Trace};
use vramtrace_tests::*;

/// The stack client (`tests/c/stacks/stackclient.c`) and the library it loads late.
struct StackPrograms {
    client: PathBuf,
    late_lib: PathBuf,
}

fn programs() -> &'static StackPrograms {
    static PROGRAMS: OnceLock<StackPrograms> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let a = artifacts();
        let src = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("c")
            .join("stacks");
        let out = a.fake_lib_dir.join("stacks");
        std::fs::create_dir_all(&out).expect("create stacks build directory");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let cc = |args: &[&str], what: &str| {
            let status = Command::new(&cc)
                .args(args)
                .current_dir(&src)
                .status()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(status.success(), "{what} failed");
        };
        let nounwind = out.join("nounwind.o");
        cc(
            &[
                "-c",
                "-O1",
                "-fPIC",
                "-fno-asynchronous-unwind-tables",
                "-fno-unwind-tables",
                "-fomit-frame-pointer",
                "nounwind.c",
                "-o",
                nounwind.to_str().expect("utf-8 path"),
            ],
            "cc nounwind.c",
        );
        let client = out.join("stackclient");
        // Frame pointers kept, so that the frame-pointer mode can be compared with DWARF.
        cc(
            &[
                "-O1",
                "-fno-omit-frame-pointer",
                "-rdynamic",
                "stackclient.c",
                nounwind.to_str().expect("utf-8 path"),
                "-o",
                client.to_str().expect("utf-8 path"),
                "-ldl",
            ],
            "cc stackclient.c",
        );
        let late_lib = out.join("libstacklib.so");
        cc(
            &[
                "-O1",
                "-shared",
                "-fPIC",
                "stacklib.c",
                "-o",
                late_lib.to_str().expect("utf-8 path"),
            ],
            "cc stacklib.c",
        );
        StackPrograms { client, late_lib }
    })
}

/// The function symbols of an ELF file, by start address: `(size, name)`, from `nm`.
fn symbols(path: &str) -> BTreeMap<u64, (u64, String)> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only", path])
        .output()
        .unwrap_or_else(|e| panic!("nm {path}: {e}"));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let [addr, size, kind, name] = w[..] else {
                return None;
            };
            if !kind.eq_ignore_ascii_case("t") {
                return None;
            }
            let hex = |s: &str| u64::from_str_radix(s, 16).ok();
            Some((hex(addr)?, (hex(size)?, name.to_string())))
        })
        .collect()
}

/// What one run of the client left: its trace and the symbols of the modules it names.
struct Run {
    trace: Trace,
    events: Vec<Event>,
    symbols: BTreeMap<String, BTreeMap<u64, (u64, String)>>,
}

impl Run {
    /// Runs `stackclient args` under the preload with `env` set.
    fn new(name: &str, args: &[&str], env: &[(&str, &str)]) -> Run {
        let dir = scratch(&format!("stacks-{name}"));
        let mut cmd = preloaded(&programs().client, &dir.join(""));
        cmd.args(args).envs(env.iter().copied());
        let out = cmd.output().expect("run the stack client");
        assert!(
            out.status.success(),
            "stackclient {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let traces = traces_in(&dir);
        assert_eq!(traces.len(), 1, "one trace in {}", dir.display());
        let trace = open(&traces[0]);
        let events = trace.events().collect();
        let symbols = [&programs().client, &programs().late_lib]
            .iter()
            .map(|p| {
                let p = p.to_str().expect("utf-8 path");
                (p.to_string(), symbols(p))
            })
            .collect();
        Run {
            trace,
            events,
            symbols,
        }
    }

    /// The allocation of `size` bytes (the client makes exactly one per size and call).
    fn allocs(&self, size: u64) -> Vec<Event> {
        let v: Vec<Event> = self
            .events
            .iter()
            .filter(|e| e.api.name() == "cuMemAlloc_v2" && e.size == size)
            .copied()
            .collect();
        assert!(!v.is_empty(), "no allocation of {size} bytes");
        v
    }

    /// The frames of the stack of the one allocation of `size` bytes.
    fn stack(&self, size: u64) -> Vec<u64> {
        let e = self.allocs(size)[0];
        assert_ne!(e.stack, NO_STACK, "the {size}-byte allocation has a stack");
        self.trace
            .tables
            .stack_addresses(e.stack)
            .unwrap_or_else(|| panic!("stack {} is in the table", e.stack))
    }

    /// The function of the client or of the late library that `address` lies in (the
    /// files are position-independent: a symbol's value is its offset from the load address).
    fn function(&self, address: u64) -> Option<&str> {
        let module = self.module(address)?;
        let offset = address - module.load_address;
        let (start, (size, name)) = self
            .symbols
            .get(&module.path)?
            .range(..=offset)
            .next_back()?;
        (offset - start < *size).then_some(name.as_str())
    }

    /// The names of the test's functions along a stack, innermost first (`?` elsewhere).
    fn names(&self, frames: &[u64]) -> Vec<&str> {
        frames
            .iter()
            .map(|&a| self.function(a).unwrap_or("?"))
            .collect()
    }

    fn module(&self, address: u64) -> Option<&Module> {
        self.trace
            .tables
            .modules
            .iter()
            .find(|m| m.load_address <= address && address - m.load_address < m.size)
    }
}

#[test]
fn distinct_call_sites_get_distinct_stacks_and_the_same_site_the_same_stack() {
    let run = Run::new("sites", &["sites"], &[]);
    let a = run.allocs(1001);
    let b = run.allocs(2002);
    assert_eq!(a.len(), 2);
    assert_ne!(a[0].stack, NO_STACK);
    assert_eq!(a[0].stack, a[1].stack, "one call site, one stack id");
    assert_ne!(a[0].stack, b[0].stack, "two call sites, two stack ids");

    // Innermost first, starting at the program's own caller of the driver: the recorder's
    // frames are left out.
    assert_eq!(
        run.names(&run.stack(1001))[..3],
        ["alloc_bytes", "site_a", "main"]
    );
    assert_eq!(
        run.names(&run.stack(2002))[..3],
        ["alloc_bytes", "site_b", "main"]
    );

    // Frees carry no stack: the allocation they end already names its site.
    let frees: Vec<&Event> = run
        .events
        .iter()
        .filter(|e| e.api.name() == "cuMemFree_v2")
        .collect();
    assert_eq!(frees.len(), 3);
    assert!(frees.iter().all(|e| e.stack == NO_STACK));

    // The module table places the frames in the client, with its build-id, for symbolization.
    let frame = run.stack(1001)[0];
    let client = run
        .module(frame)
        .expect("a module holds the client's frame");
    assert_eq!(Path::new(&client.path), programs().client.as_path());
    assert_eq!(client.build_id.len(), 20, "gcc's default SHA-1 build-id");
    let libc = run
        .trace
        .tables
        .modules
        .iter()
        .find(|m| m.path.contains("libc.so"));
    assert!(libc.is_some(), "shared libraries are listed too");
}

#[test]
fn frame_pointer_mode_finds_the_same_frames_in_a_program_built_with_frame_pointers() {
    let native = Run::new("fp-native", &["sites"], &[]);
    let fp = Run::new("fp", &["sites"], &[("VRAMTRACE_STACKS", "fp")]);
    let native_names = native.names(&native.stack(1001));
    let fp_names = fp.names(&fp.stack(1001));
    assert_eq!(fp_names[..3], ["alloc_bytes", "site_a", "main"]);
    assert_eq!(fp_names[..3], native_names[..3]);
}

#[test]
fn recursion_500_deep_is_cut_at_the_depth_limit() {
    let run = Run::new("deep", &["deep"], &[]);
    let frames = run.stack(3003);
    assert_eq!(frames.len(), 64, "the default limit");
    let names = run.names(&frames);
    assert_eq!(names[0], "alloc_bytes");
    assert!(names[1..].iter().all(|&n| n == "recurse"));

    let run = Run::new("deep-10", &["deep"], &[("VRAMTRACE_MAX_DEPTH", "10")]);
    assert_eq!(run.stack(3003).len(), 10);
}

#[test]
fn a_library_loaded_after_the_first_allocation_gets_its_frames_attributed() {
    let lib = programs()
        .late_lib
        .to_str()
        .expect("utf-8 path")
        .to_string();
    let run = Run::new("dlopen", &["dlopen", &lib], &[]);
    assert_eq!(run.names(&run.stack(4004))[..2], ["alloc_bytes", "main"]);

    // Right after dlopen: the library's frame is there and attributed to it.
    let [first, later] = run.allocs(5005)[..] else {
        panic!("two allocations from the late library");
    };
    let stack = |e: Event| run.trace.tables.stack_addresses(e.stack).expect("a stack");
    let frames = stack(first);
    assert_eq!(run.names(&frames)[..2], ["alloc_bytes", "lib_alloc"]);
    let module = run.module(frames[1]).expect("a module holds lib_alloc");
    assert_eq!(module.path, lib);
    assert!(!module.build_id.is_empty());
    // Once the writer thread has seen the library (it checks every few milliseconds), its
    // unwind tables are used too: the stack goes on through it down to main. Right after the
    // dlopen, it may stop there instead (recorder/README.md, "Stacks").
    assert_eq!(
        run.names(&stack(later))[..3],
        ["alloc_bytes", "lib_alloc", "main"]
    );
}

#[test]
fn unwinding_through_signal_handlers_and_code_without_unwind_info_does_not_crash() {
    for mode in ["native", "fp"] {
        let run = Run::new(
            &format!("signal-{mode}"),
            &["signal"],
            &[("VRAMTRACE_STACKS", mode)],
        );
        assert_eq!(run.names(&run.stack(6006))[..2], ["alloc_bytes", "on_usr1"]);
        assert_eq!(run.names(&run.stack(7007))[..2], ["alloc_bytes", "on_usr2"]);

        let run = Run::new(
            &format!("nounwind-{mode}"),
            &["nounwind"],
            &[("VRAMTRACE_STACKS", mode)],
        );
        let frames = run.stack(8008);
        assert_eq!(run.names(&frames)[..2], ["alloc_bytes", "no_unwind_info"]);
    }
}

#[test]
fn threads_started_in_a_burst_all_get_stacks() {
    // 32 threads start at once and allocate at once: more than the spare capture blocks the
    // writer keeps, so most of them wait for it to make more (once) rather than lose stacks.
    let dir = scratch("stacks-threads");
    let out = preloaded(&artifacts().client, &dir.join(""))
        .args(["gpa", "threads", "32", "200"])
        .output()
        .expect("run the threads client");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("without a stack"), "{stderr}");
    let traces = traces_in(&dir);
    let trace = open(&traces[0]);
    let allocs: Vec<Event> = trace
        .events()
        .filter(|e| e.api.name().starts_with("cuMemAllocAsync"))
        .collect();
    assert_eq!(allocs.len(), 32 * 200);
    assert!(allocs.iter().all(|e| e.stack != NO_STACK));
}

#[test]
fn stacks_none_records_no_stack() {
    let dir = scratch("stacks-none");
    let a = artifacts();
    let out = command(&a.vramtrace)
        .args(["record", "--stacks", "none", "-o"])
        .arg(dir.join(""))
        .arg("--")
        .arg(&programs().client)
        .arg("sites")
        .output()
        .expect("run vramtrace record");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let traces = traces_in(&dir);
    assert_eq!(traces.len(), 1);
    let trace = open(&traces[0]);
    assert_eq!(trace.event_count(), 6);
    assert!(trace.events().all(|e| e.stack == NO_STACK));
    assert!(trace.tables.stacks.is_empty());
}

/// The old-glibc build (`recorder/README.md`, "Old C libraries"): cargo-zigbuild against
/// glibc 2.17's symbol versions. It needs `pip install ziglang cargo-zigbuild` and takes a
/// minute or two cold, so it runs on request: `cargo test -p vramtrace-tests --test end_to_end
/// stacks:: -- --ignored`.
#[test]
#[ignore = "builds the recorder with cargo-zigbuild (pip install ziglang cargo-zigbuild)"]
fn the_glibc_2_17_build_needs_nothing_newer_and_records_stacks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let target = "x86_64-unknown-linux-gnu.2.17";
    let status = Command::new(&cargo)
        .args([
            "zigbuild",
            "--release",
            "-p",
            "vramtrace-recorder",
            "--target",
            target,
        ])
        .current_dir(&root)
        .status()
        .expect("run cargo zigbuild");
    assert!(status.success(), "cargo zigbuild --target {target}");
    let lib = root.join("target/x86_64-unknown-linux-gnu/release/libvramtrace_preload.so");

    let (newest, unversioned) = glibc_requirements(&lib);
    assert!(newest <= 17, "requires GLIBC_2.{newest}");
    assert!(
        unversioned.is_empty(),
        "strong unversioned: {unversioned:?}"
    );
    // The build from this machine's own toolchain, for contrast, requires far newer.
    assert!(glibc_requirements(&artifacts().preload).0 > 17);

    let preload = lib.to_str().expect("utf-8 path");
    let run = Run::new("glibc-2.17", &["sites"], &[("LD_PRELOAD", preload)]);
    assert_eq!(
        run.names(&run.stack(1001))[..3],
        ["alloc_bytes", "site_a", "main"]
    );
}

/// `vramtrace record --preload LIB -- stackclient sites`: its exit code and stderr.
fn record_with_preload(dir: &Path, lib: &Path) -> (Option<i32>, String) {
    let out = command(&artifacts().vramtrace)
        .arg("record")
        .arg("--preload")
        .arg(lib)
        .arg("-o")
        .arg(dir.join("out/"))
        .arg("--")
        .arg(&programs().client)
        .arg("sites")
        .output()
        .expect("run vramtrace record");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The launcher's last word when no trace was written.
fn verdict(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.starts_with("vramtrace: no trace was written"))
        .unwrap_or_else(|| panic!("no verdict in {stderr}"))
}

#[test]
fn the_launcher_says_why_the_dynamic_loader_refused_the_preload() {
    // What an old C library does to a library built on a new one, ld.so does to any file it
    // cannot load: it prints one line, ignores the entry and runs the program unrecorded.
    let dir = scratch("stacks-refused");
    let bad = dir.join("libvramtrace_preload.so");
    std::fs::write(&bad, [b'x'; 256]).expect("write a file that is no ELF object");
    let (code, stderr) = record_with_preload(&dir, &bad);
    assert_eq!(code, Some(0), "the program itself ran, unrecorded");
    let line = verdict(&stderr);
    assert!(
        line.contains("the dynamic loader refused to preload")
            && line.contains("(invalid ELF header)"),
        "{line}"
    );
}

#[test]
fn the_launcher_says_which_symbol_version_the_c_library_lacks() {
    // A glibc older than the library's build lacks the symbol versions it needs; then ld.so
    // stops every program before main. The same with a library of our own: the preload needs
    // `foo@VERS_2` of libdep.so, whose copy on the library path only has VERS_1.
    let dir = scratch("stacks-version");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let build = |args: &[&str]| {
        let status = Command::new(&cc)
            .args(args)
            .current_dir(&dir)
            .status()
            .expect("run cc");
        assert!(status.success(), "cc {args:?}");
    };
    std::fs::write(dir.join("v1.map"), "VERS_1 { global: foo; local: *; };\n").unwrap();
    std::fs::write(
        dir.join("v2.map"),
        "VERS_1 { global: foo; local: *; };\nVERS_2 { global: foo; } VERS_1;\n",
    )
    .unwrap();
    std::fs::write(dir.join("dep1.c"), "int foo(void) { return 1; }\n").unwrap();
    std::fs::write(
        dir.join("dep2.c"),
        "__asm__(\".symver foo2, foo@@VERS_2\");\nint foo2(void) { return 2; }\nint foo(void) { return 1; }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("pre.c"),
        "int foo(void);\nint bar(void) { return foo(); }\n",
    )
    .unwrap();
    let rpath = format!("-Wl,-rpath,{}", dir.display());
    build(&[
        "-shared",
        "-fPIC",
        "-o",
        "libdep.so",
        "dep2.c",
        "-Wl,--version-script=v2.map",
    ]);
    build(&[
        "-shared",
        "-fPIC",
        "-o",
        "libpre.so",
        "pre.c",
        "-L.",
        "-ldep",
        &rpath,
    ]);
    build(&[
        "-shared",
        "-fPIC",
        "-o",
        "libdep.so",
        "dep1.c",
        "-Wl,--version-script=v1.map",
    ]);

    let (code, stderr) = record_with_preload(&dir, &dir.join("libpre.so"));
    assert_eq!(code, Some(1), "ld.so stops the program: {stderr}");
    let line = verdict(&stderr);
    assert!(
        line.contains("the dynamic loader refused to preload")
            && line.contains("version `VERS_2' not found"),
        "{line}"
    );
}
