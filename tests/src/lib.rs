//! Helpers for the end-to-end tests: build the recorder, the `vramtrace` binary and the C
//! pieces (a fake `libcuda.so.1`, client programs) once, then run clients under the recorder
//! and read what it wrote.
//!
//! Everything is built from the tests themselves with `cargo` and `cc`, so plain
//! `cargo test --workspace` on a machine with Rust and a C compiler runs them.

pub mod layers;
pub mod torch_complete;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use vramtrace_format::{Event, ReadOptions, Trace};

/// Paths of everything the tests run.
pub struct Artifacts {
    /// `vramtrace`.
    pub vramtrace: PathBuf,
    /// `libvramtrace_preload.so`.
    pub preload: PathBuf,
    /// Directory holding the fake `libcuda.so.1` and its `libcuda.so` symlink.
    pub fake_lib_dir: PathBuf,
    /// A fake `libnvidia-ml.so.1` that counts what the fake driver holds (`c/fakenvml.c`), for
    /// `VRAMTRACE_NVML`.
    pub fake_nvml: PathBuf,
    /// The client reaching the driver through `dlopen`/`dlsym`/`cuGetProcAddress`.
    pub client: PathBuf,
    /// The same client linked with `-lcuda`.
    pub client_linked: PathBuf,
    /// A program whose library looks itself up with `dlsym(RTLD_NEXT, ...)`.
    pub rtld_next: PathBuf,
    /// The fault matrix's programs (`c/faults.c`), linked with `-lcuda`.
    pub faults: PathBuf,
    /// A PyTorch-shaped program: `torch_client LIBC10_CUDA`.
    pub torch_client: PathBuf,
    /// A fake `libc10_cuda.so` of PyTorch 2.11 (in `torch/lib/`, beside `torch/version.py`).
    pub fake_torch: PathBuf,
    /// The same library under a PyTorch version the recorder does not know (2.5.1).
    pub fake_torch_unknown: PathBuf,
    /// A second interposer shaped like HAMi-core (`c/hami_like.c`: its own `dlsym`).
    pub hami_like: PathBuf,
    /// A plain second interposer of `cuMemAlloc_v2` and `cuMemFree_v2` (`c/plain_wrapper.c`).
    pub plain_wrapper: PathBuf,
}

fn target_dir() -> PathBuf {
    // target/<profile>/deps/<test binary>
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test binary lives in target/<profile>/deps")
        .to_path_buf()
}

fn c_source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("c").join(name)
}

fn run_ok(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds everything once per test binary.
pub fn artifacts() -> &'static Artifacts {
    static ARTIFACTS: OnceLock<Artifacts> = OnceLock::new();
    ARTIFACTS.get_or_init(|| {
        let target = target_dir();
        let release = target.file_name().is_some_and(|n| n == "release");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut build = Command::new(cargo);
        build
            .args(["build", "-p", "vramtrace-recorder", "-p", "vramtrace"])
            .current_dir(env!("CARGO_MANIFEST_DIR"));
        if release {
            build.arg("--release");
        }
        run_ok(&mut build, "cargo build of the recorder and vramtrace");

        let c_dir = target.join("vramtrace-tests-c");
        std::fs::create_dir_all(&c_dir).expect("create C build directory");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let fake = c_dir.join("libcuda.so.1");
        run_ok(
            Command::new(&cc)
                .args(["-shared", "-fPIC", "-O1", "-fno-ipa-icf", "-Wl,-Bsymbolic"])
                .args(["-Wl,-soname,libcuda.so.1", "-o"])
                .arg(&fake)
                .arg(c_source("fakecuda.c"))
                .arg("-lpthread"),
            "cc fakecuda.c",
        );
        let fake_nvml = c_dir.join("fakenvml").join("libnvidia-ml.so.1");
        std::fs::create_dir_all(fake_nvml.parent().expect("fakenvml/")).expect("fakenvml dir");
        run_ok(
            Command::new(&cc)
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&fake_nvml)
                .arg(c_source("fakenvml.c"))
                .arg("-ldl"),
            "cc fakenvml.c",
        );
        let link = c_dir.join("libcuda.so");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink("libcuda.so.1", &link).expect("libcuda.so symlink");
        let client = c_dir.join("client");
        run_ok(
            Command::new(&cc)
                .args(["-O1", "-o"])
                .arg(&client)
                .arg(c_source("client.c"))
                .args(["-ldl", "-lpthread"]),
            "cc client.c",
        );
        let client_linked = c_dir.join("client_linked");
        run_ok(
            Command::new(&cc)
                .args(["-O1", "-DLINKED", "-o"])
                .arg(&client_linked)
                .arg(c_source("client.c"))
                .arg(format!("-L{}", c_dir.display()))
                .args(["-l:libcuda.so.1", "-ldl", "-lpthread"]),
            "cc -DLINKED client.c",
        );
        let probe = c_dir.join("libprobe.so");
        run_ok(
            Command::new(&cc)
                .args(["-shared", "-fPIC", "-O1", "-o"])
                .arg(&probe)
                .arg(c_source("probe.c"))
                .arg("-ldl"),
            "cc probe.c",
        );
        let rtld_next = c_dir.join("rtld_next");
        run_ok(
            Command::new(&cc)
                .args(["-O1", "-rdynamic", "-o"])
                .arg(&rtld_next)
                .arg(c_source("rtld_next.c"))
                .arg(format!("-L{}", c_dir.display()))
                .args(["-lprobe", "-ldl"])
                .arg(format!("-Wl,-rpath,{}", c_dir.display())),
            "cc rtld_next.c",
        );
        let faults = c_dir.join("faults");
        run_ok(
            Command::new(&cc)
                .args(["-O1", "-o"])
                .arg(&faults)
                .arg(c_source("faults.c"))
                .arg(format!("-L{}", c_dir.display()))
                .args(["-l:libcuda.so.1", "-lpthread"]),
            "cc faults.c",
        );
        let fake_c10 = |dir: &str, version: &str| {
            let lib_dir = c_dir.join(dir).join("torch").join("lib");
            std::fs::create_dir_all(&lib_dir).expect("create fake torch folder");
            std::fs::write(
                lib_dir.parent().expect("torch/").join("version.py"),
                format!("__version__ = '{version}'\ndebug = False\n"),
            )
            .expect("write version.py");
            let lib = lib_dir.join("libc10_cuda.so");
            run_ok(
                Command::new(&cc)
                    .args([
                        "-shared",
                        "-fPIC",
                        "-O1",
                        "-Wl,-soname,libc10_cuda.so",
                        "-o",
                    ])
                    .arg(&lib)
                    .arg(c_source("fake_c10_cuda.c"))
                    .arg("-ldl"),
                "cc fake_c10_cuda.c",
            );
            lib
        };
        let fake_torch = fake_c10("torch-2.11", "2.11.0+fake");
        let fake_torch_unknown = fake_c10("torch-2.5", "2.5.1+cu121");
        let torch_client = c_dir.join("torch_client");
        run_ok(
            Command::new(&cc)
                .args(["-O1", "-o"])
                .arg(&torch_client)
                .arg(c_source("torch_client.c"))
                .arg("-ldl"),
            "cc torch_client.c",
        );
        let interposer = |name: &str, libs: &[&str]| {
            let lib = c_dir.join(format!("lib{name}.so"));
            run_ok(
                Command::new(&cc)
                    .args(["-shared", "-fPIC", "-O1", "-o"])
                    .arg(&lib)
                    .arg(c_source(&format!("{name}.c")))
                    .args(libs),
                &format!("cc {name}.c"),
            );
            lib
        };
        let hami_like = interposer("hami_like", &["-ldl", "-lpthread"]);
        let plain_wrapper = interposer("plain_wrapper", &["-ldl"]);
        Artifacts {
            hami_like,
            plain_wrapper,
            torch_client,
            fake_torch,
            fake_torch_unknown,
            vramtrace: target.join("vramtrace"),
            preload: target.join("libvramtrace_preload.so"),
            fake_lib_dir: c_dir,
            fake_nvml,
            client,
            client_linked,
            rtld_next,
            faults,
        }
    })
}

/// A fresh empty directory under the target directory, named after the test.
pub fn scratch(name: &str) -> PathBuf {
    let dir = target_dir().join("vramtrace-tests-scratch").join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch directory");
    dir
}

/// A command for `program` with the fake driver on the library path and nothing of the
/// caller's recorder settings.
pub fn command(program: &Path) -> Command {
    let a = artifacts();
    let mut cmd = Command::new(program);
    cmd.env("LD_LIBRARY_PATH", &a.fake_lib_dir);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VRAMTRACE_") || k == "LD_PRELOAD" {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// `program args` run under the preload directly (no launcher), writing into `output`.
pub fn preloaded(program: &Path, output: &Path) -> Command {
    let mut cmd = command(program);
    cmd.env("LD_PRELOAD", &artifacts().preload);
    cmd.env("VRAMTRACE_OUTPUT", output);
    cmd
}

/// `vramtrace record -o output -- program args`.
pub fn recorded(output: &Path, program: &Path, args: &[&str]) -> Output {
    let a = artifacts();
    let mut cmd = command(&a.vramtrace);
    cmd.arg("record")
        .arg("-o")
        .arg(output)
        .arg("--")
        .arg(program)
        .args(args);
    cmd.output().expect("run vramtrace record")
}

/// The trace files in `dir`, sorted.
pub fn traces_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("read output directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "vramtrace"))
        .collect();
    v.sort();
    v
}

/// Opens a trace, insisting that it is complete.
pub fn open(path: &Path) -> Trace {
    let t = Trace::open(path, ReadOptions::default())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        t.layout.complete,
        "{}: {:?}",
        path.display(),
        t.layout.damage
    );
    t
}

/// Events per exported function name.
pub fn counts(events: &[Event]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in events {
        *m.entry(e.api.name().to_string()).or_insert(0) += 1;
    }
    m
}

/// The pid a client printed on its first line.
pub fn printed_pid(stdout: &[u8]) -> u32 {
    let text = String::from_utf8_lossy(stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("pid "))
        .and_then(|p| p.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid line in {text:?}"))
}

/// The highest `GLIBC_2.N` minor version that `objdump -T` lists for `lib`, and the undefined
/// symbols that carry no version and are not weak (those would fail to resolve where the C
/// library lacks them).
pub fn glibc_requirements(lib: &Path) -> (u32, Vec<String>) {
    let out = Command::new("objdump")
        .arg("-T")
        .arg(lib)
        .output()
        .expect("run objdump -T");
    let text = String::from_utf8_lossy(&out.stdout);
    let newest = text
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.strip_prefix("GLIBC_2."))
        .filter_map(|v| v.split('.').next()?.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    let unversioned = text
        .lines()
        .filter(|l| l.contains("*UND*") && !l.contains("GLIBC_"))
        .filter(|l| l.split_whitespace().nth(1) != Some("w"))
        .map(|l| l.split_whitespace().last().unwrap_or("").to_string())
        .collect();
    (newest, unversioned)
}
