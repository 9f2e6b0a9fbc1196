//! `vramtrace record`: run a program under `libvramtrace_preload.so` and report its traces.
//!
//! The launcher only sets environment variables (`recorder/README.md` lists them), so every
//! child process of the program inherits the recording; it then takes the traces its own
//! processes named in its private heartbeat directory (never other files of the output
//! directory: another launcher may be writing there), merges any crash journal into its trace
//! (a process killed by `SIGKILL`, ended by `_exit` or replaced by `exec` leaves one), and
//! prints one line per trace on stderr. The program's stdout is untouched. Ctrl-C reaches the
//! program; the launcher waits for it and still merges.

use crate::find_preload::{PRELOAD_NAME, find_preload};
use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;
use vramtrace::model::live::recorded_device_peak;
use vramtrace::units::{bytes, count};
use vramtrace_format::chunk::MAGIC;
use vramtrace_format::conventions::{Heartbeat, env, heartbeat_name};
use vramtrace_format::{ReadOptions, Trace, journal};

/// Run a program and record every CUDA allocation it makes (one trace per process).
#[derive(Debug, clap::Args)]
#[command(after_help = "\
Examples:
  vramtrace record -- python train.py
  vramtrace record -o traces/ -- torchrun --nproc-per-node 2 train.py
  vramtrace record -o mlp.vramtrace -- python train.py     # PyTorch 2.11: every tensor
  vramtrace record --requests -o jax.vramtrace -- python jax_train.py
  vramtrace record --stacks mixed -- python train.py   # + native frames down to Python
  vramtrace record --stacks none -- ./my_cuda_app

Without the launcher (a job scheduler, a container entry point), set the variables it sets:
  LD_PRELOAD=/path/to/libvramtrace_preload.so VRAMTRACE_OUTPUT=traces/ python train.py
  VRAMTRACE_OUTPUT      a file, or a directory (existing, or ending in /) for PROGRAM-PID.vramtrace
  VRAMTRACE_STACKS      native (default), fp or none;  VRAMTRACE_MAX_DEPTH  frames kept (64)
  VRAMTRACE_REQUESTS=1  mark the trace request level (what --requests sets, besides the
                        PYTORCH_CUDA_ALLOC_CONF / XLA / TF variables that switch allocators)
  VRAMTRACE_DISABLE=1   load but record nothing
The library is found by --preload, else VRAMTRACE_PRELOAD, else beside this executable, else in
the `vramtrace` Python package that `pip install vramtrace` put it in
(python -c 'import vramtrace; print(vramtrace.preload_path())').")]
pub struct Args {
    /// Trace file, or a directory (existing, or ending in /) for one file per process.
    /// Default: the current directory.
    #[arg(short, long, value_name = "PATH|DIR")]
    output: Option<PathBuf>,
    /// Switch PyTorch, JAX and TensorFlow to pass-through allocators: one event per tensor,
    /// for JAX, TensorFlow and PyTorch versions other than 2.11 (PyTorch 2.11 programs get
    /// one event per tensor from their own allocator without it).
    #[arg(long)]
    requests: bool,
    /// Do not attach to PyTorch's caching allocator (no `torch.*` events: its segments only).
    #[arg(long, conflicts_with = "requests")]
    no_torch_tracker: bool,
    /// The recorder library (default: $VRAMTRACE_PRELOAD, else libvramtrace_preload.so
    /// beside vramtrace or in its installed Python package).
    #[arg(long, value_name = "PATH")]
    preload: Option<PathBuf>,
    /// How to capture the calling stack of each allocation: the Python frames (python; native
    /// in a process without Python), the native frames down to the interpreter then the
    /// Python frames (mixed), DWARF unwinding (native), frame-pointer walking for programs
    /// built with frame pointers (fp), or not at all. Default: VRAMTRACE_STACKS, else python.
    #[arg(long, value_name = "MODE", env = env::STACKS, default_value = "python",
          value_parser = ["python", "mixed", "native", "fp", "none"])]
    stacks: String,
    /// The most frames kept per stack (1 to 256).
    #[arg(long, value_name = "N", default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=256))]
    max_depth: u16,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

impl Args {
    pub fn run(self) -> Result<()> {
        record(self)
    }
}

/// Runs the program under the preload library and reports each trace it wrote.
fn record(opts: Args) -> Result<()> {
    let preload = find_preload(opts.preload.as_deref())?;
    let cwd = std::env::current_dir().context("current directory")?;
    let output = match &opts.output {
        Some(p) => absolute(&cwd, p),
        None => cwd.clone(),
    };
    let as_dir = output.as_os_str().to_string_lossy().ends_with('/') || output.is_dir();
    if as_dir {
        std::fs::create_dir_all(&output)
            .with_context(|| format!("creating output directory {}", output.display()))?;
        check_writable_dir(&output)?;
    } else {
        check_output_file(&output)?;
    }
    let heartbeat = std::env::temp_dir().join(format!(
        "vramtrace-record-{}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&heartbeat)
        .with_context(|| format!("creating {}", heartbeat.display()))?;
    let scratch = RemoveOnDrop(heartbeat.clone());

    let mut cmd = Command::new(&opts.command[0]);
    cmd.args(&opts.command[1..]);
    let mut ld_preload = preload.clone().into_os_string();
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        ld_preload.push(":");
        ld_preload.push(old);
    }
    cmd.env("LD_PRELOAD", ld_preload);
    let mut out_var = output.clone().into_os_string();
    if as_dir && !out_var.to_string_lossy().ends_with('/') {
        out_var.push("/");
    }
    cmd.env(env::OUTPUT, out_var);
    cmd.env(env::HEARTBEAT, &heartbeat);
    cmd.env(env::STACKS, &opts.stacks);
    cmd.env(env::MAX_DEPTH, opts.max_depth.to_string());
    if opts.no_torch_tracker {
        cmd.env(env::TORCH_TRACKER, "0");
    }
    if opts.requests {
        for (k, v) in request_level_env(|k| std::env::var(k).ok()) {
            cmd.env(k, v);
        }
    }
    // The terminal's Ctrl-C and Ctrl-\ go to the program (same process group), which decides
    // what they mean; the launcher outlives them to merge what the program's processes left.
    // Ignored from before the program starts (no window where they end the launcher first),
    // and given back to the program as the launcher found them.
    let ignoring = IgnoreTerminalSignals::new();
    let found = ignoring.0;
    // SAFETY: the closure runs in the child between fork and exec and only calls signal(2),
    // which is async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            for (s, old) in TERMINAL_SIGNALS.iter().zip(found) {
                libc::signal(*s, old);
            }
            Ok(())
        })
    };
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot run {}", opts.command[0].to_string_lossy()))?;
    // The launcher's own writes (merging a journal) under a file-size limit fail instead of
    // ending it; set only now, as an ignored signal would be inherited by the program.
    // SAFETY: setting a disposition to SIG_IGN has no preconditions.
    unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let status = child
        .wait()
        .with_context(|| format!("waiting for {}", opts.command[0].to_string_lossy()))?;

    let (traces, gone) = own_traces(&heartbeat);
    for t in &traces {
        report(t);
    }
    for path in &gone {
        eprintln!(
            "vramtrace: {}: removed while the program ran (its folder was deleted): the trace \
             is lost",
            path.display()
        );
    }
    if traces.is_empty() && gone.is_empty() {
        eprintln!(
            "vramtrace: no trace was written: {}",
            why_none(&heartbeat, &preload)
        );
    }
    let code = match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(sig)) => 128 + sig,
        _ => 1,
    };
    if code != 0 {
        // exit() runs no destructors.
        drop(scratch);
        std::process::exit(code);
    }
    Ok(())
}

/// `-o FILE` must be a regular file or a new name: never a link into someone else's file, a
/// FIFO (opening it would block the program) or a device; an existing file must be a trace (an
/// earlier run's, which is replaced) or empty, never another file; and its folder must take new
/// files (the program's other processes write `STEM-PID.vramtrace` beside it). Checked before
/// the program starts, so that a run is never lost to an output that cannot be written.
fn check_output_file(output: &Path) -> Result<()> {
    let folder = output.parent().unwrap_or(Path::new("/"));
    let Ok(meta) = std::fs::symlink_metadata(output) else {
        return check_writable_dir(folder);
    };
    let t = meta.file_type();
    if t.is_symlink() {
        bail!(
            "{} is a symbolic link; vramtrace does not write through links (name the file \
             itself, or a directory)",
            output.display()
        );
    }
    if !t.is_file() {
        bail!(
            "{} is not a regular file (a FIFO, a device or a socket); give a file or a \
             directory to write traces into",
            output.display()
        );
    }
    let mut head = [0u8; 8];
    let n = std::fs::File::open(output)
        .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
        .with_context(|| format!("reading {}", output.display()))?;
    if n > 0 && head[..n] != MAGIC[..n] {
        bail!(
            "{} exists and is not a vramtrace trace; it is left untouched (remove it, or give \
             another name)",
            output.display()
        );
    }
    std::fs::OpenOptions::new()
        .write(true)
        .open(output)
        .with_context(|| format!("cannot write the trace {}", output.display()))?;
    check_writable_dir(folder)
}

/// Fails unless a new file can be made in `dir` (makes one and removes it).
fn check_writable_dir(dir: &Path) -> Result<()> {
    let probe = dir.join(format!(".vramtrace-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .with_context(|| format!("cannot write traces into {}", dir.display()))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// `SIGINT` and `SIGQUIT` ignored in the launcher while it lives; holds the dispositions it
/// found.
struct IgnoreTerminalSignals([libc::sighandler_t; 2]);

const TERMINAL_SIGNALS: [libc::c_int; 2] = [libc::SIGINT, libc::SIGQUIT];

impl IgnoreTerminalSignals {
    fn new() -> Self {
        // SAFETY: setting a disposition to SIG_IGN has no preconditions.
        IgnoreTerminalSignals(TERMINAL_SIGNALS.map(|s| unsafe { libc::signal(s, libc::SIG_IGN) }))
    }
}

impl Drop for IgnoreTerminalSignals {
    fn drop(&mut self) {
        for (s, old) in TERMINAL_SIGNALS.iter().zip(self.0) {
            // SAFETY: restoring the disposition `new` found.
            unsafe { libc::signal(*s, old) };
        }
    }
}

/// A trace one of this launcher's processes wrote, and why its recording stopped early (what
/// the process left in `PID.failed`), if it did.
struct OwnTrace {
    path: PathBuf,
    stopped: Option<String>,
}

/// The traces this launcher's processes wrote, as they named them in the heartbeat directory
/// (`PID.NAME.trace` holding the path), sorted; those whose file and journal are both gone
/// are left out: a process with no memory call removes its empty trace, and one whose trace
/// was removed under it says so (`gone`).
fn own_traces(heartbeat: &Path) -> (Vec<OwnTrace>, Vec<PathBuf>) {
    let mut named: Vec<(PathBuf, Option<String>)> = std::fs::read_dir(heartbeat)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if Heartbeat::of_file(&name) != Some(Heartbeat::Trace) {
                return None;
            }
            let path = PathBuf::from(OsString::from_vec(std::fs::read(e.path()).ok()?));
            let pid: u32 = name.split('.').next()?.parse().ok()?;
            let failed = heartbeat.join(heartbeat_name(pid, Heartbeat::Failed));
            Some((path, std::fs::read_to_string(failed).ok()))
        })
        .collect();
    named.sort();
    named.dedup_by(|a, b| a.0 == b.0);
    let mut traces = Vec::new();
    let mut gone = Vec::new();
    for (path, stopped) in named {
        if path.exists() || journal::path_for(&path).exists() {
            traces.push(OwnTrace { path, stopped });
        } else if stopped.is_some() {
            gone.push(path);
        }
    }
    (traces, gone)
}

/// Removes the launcher's scratch directory however `run` ends.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    let keep_slash = p.as_os_str().to_string_lossy().ends_with('/');
    let mut abs = cwd.join(p).into_os_string();
    if keep_slash && !abs.to_string_lossy().ends_with('/') {
        abs.push("/");
    }
    PathBuf::from(abs)
}

/// The variables that switch the frameworks to their pass-through allocators, keeping any
/// other option the user set in them.
fn request_level_env(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    let mut env = vec![(env::REQUESTS.to_string(), "1".to_string())];
    // PyTorch reads PYTORCH_ALLOC_CONF (2.9+) before the older PYTORCH_CUDA_ALLOC_CONF.
    let torch_vars = ["PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"];
    let mut set_any = false;
    for var in torch_vars {
        if let Some(old) = get(var) {
            env.push((var.to_string(), with_backend(&old)));
            set_any = true;
        }
    }
    if !set_any {
        env.push((
            "PYTORCH_CUDA_ALLOC_CONF".into(),
            "backend:cudaMallocAsync".into(),
        ));
    }
    env.push(("XLA_PYTHON_CLIENT_ALLOCATOR".into(), "platform".into()));
    env.push(("TF_GPU_ALLOCATOR".into(), "cuda_malloc_async".into()));
    env
}

fn with_backend(conf: &str) -> String {
    let mut parts: Vec<&str> = conf
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty() && !p.starts_with("backend:"))
        .collect();
    parts.insert(0, "backend:cudaMallocAsync");
    parts.join(",")
}

fn report(own: &OwnTrace) {
    let path = own.path.as_path();
    let journal_bytes = journal::load(&journal::path_for(path)).ok().flatten();
    if journal_bytes.as_deref().is_some_and(journal::owner_running) {
        // A process the program left running in the background: its trace is still growing.
        eprintln!(
            "vramtrace: {}: still being written by a process that outlived the program",
            path.display()
        );
        return;
    }
    let recovered = match journal::recover(path) {
        Ok(Some(r)) => format!(
            ", {} recovered from the crash journal",
            count(r.from_journal)
        ),
        Ok(None) => String::new(),
        Err(e) => {
            eprintln!(
                "vramtrace: {}: cannot merge its crash journal: {e}",
                path.display()
            );
            String::new()
        }
    };
    match Trace::open(path, ReadOptions { salvage: true }) {
        Ok(trace) => {
            let failed = trace.events().filter(|e| !e.succeeded()).count() as u64;
            let cut = match (&own.stopped, trace.layout.complete) {
                (Some(why), _) => format!("; incomplete: recording stopped ({})", why.trim()),
                (None, false) => format!(
                    "; incomplete: {}",
                    trace
                        .layout
                        .damage
                        .as_deref()
                        .unwrap_or("the trace ends early")
                ),
                (None, true) => String::new(),
            };
            eprintln!(
                "vramtrace: {}: {} events ({} failed){recovered}, peak {} live device \
                 memory{cut}",
                path.display(),
                count(trace.event_count()),
                count(failed),
                bytes(recorded_device_peak(&trace)),
            );
        }
        Err(e) => eprintln!("vramtrace: {}: unreadable trace: {e}", path.display()),
    }
}

/// Why no trace appeared, from the marks the preload left in the heartbeat directory.
fn why_none(heartbeat: &Path, preload: &Path) -> String {
    let names: Vec<String> = std::fs::read_dir(heartbeat)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    let marked = |h: Heartbeat| {
        names
            .iter()
            .filter(move |n| Heartbeat::of_file(n) == Some(h))
    };
    let failed: Vec<String> = marked(Heartbeat::Failed)
        .filter_map(|n| std::fs::read_to_string(heartbeat.join(n)).ok())
        .collect();
    let loaded = marked(Heartbeat::Loaded).count();
    let traced = marked(Heartbeat::Trace).count();
    if !failed.is_empty() {
        format!("the recorder could not write: {}", failed.join("; "))
    } else if traced == 0 && !driver_installed() {
        "the CUDA driver (libcuda.so.1) is not installed on this machine or not on the library \
         path (LD_LIBRARY_PATH, ldconfig): the program could not reach a GPU"
            .to_string()
    } else if traced > 0 {
        format!(
            "{traced} process(es) used the CUDA driver but made no memory call (their empty \
             traces were removed)"
        )
    } else if loaded == 0 {
        match loader_refusal(preload) {
            Some(reason) => format!(
                "the dynamic loader refused to preload {} ({reason}); for \"version \
                 `GLIBC_2.N' not found\", use a library built for glibc 2.17 (the one \
                 `pip install vramtrace` installs, or `cargo zigbuild --release -p \
                 vramtrace-recorder --target x86_64-unknown-linux-gnu.2.17`)",
                preload.display()
            ),
            None => format!(
                "{PRELOAD_NAME} was never loaded (a static or setuid program, or a program that \
                 clears LD_PRELOAD)"
            ),
        }
    } else {
        format!(
            "{PRELOAD_NAME} was loaded in {loaded} process(es), but none looked up a CUDA driver \
             function: the program did not use CUDA, or reached the driver a way the recorder \
             cannot see (RTLD_DEEPBIND, dlmopen, a statically linked driver)"
        )
    }
}

/// True when the dynamic loader can find `libcuda.so.1`: in a folder of `LD_LIBRARY_PATH`, in
/// the `ldconfig` cache, or in the usual library folders. Nothing is loaded.
fn driver_installed() -> bool {
    const DRIVER: &str = "libcuda.so.1";
    let from_env = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    let mut folders: Vec<PathBuf> = std::env::split_paths(&from_env).collect();
    folders.extend(
        [
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib64",
            "/lib64",
            "/usr/lib",
            "/lib",
        ]
        .map(PathBuf::from),
    );
    if folders.iter().any(|d| d.join(DRIVER).exists()) {
        return true;
    }
    ["/sbin/ldconfig", "/usr/sbin/ldconfig", "ldconfig"]
        .iter()
        .find_map(|ldconfig| Command::new(ldconfig).arg("-p").output().ok())
        .is_some_and(|out| String::from_utf8_lossy(&out.stdout).contains(DRIVER))
}

/// Why the dynamic loader will not preload `lib` on this machine, from what ld.so prints when
/// `lib` is preloaded into `/bin/true`; `None` when it loads. A file it cannot open or map (a
/// damaged file, another architecture) is skipped with a "cannot be preloaded (REASON):
/// ignored." line and the program runs unrecorded; a symbol version that the C library lacks
/// (a glibc older than the build's: "version `GLIBC_2.34' not found") stops every program
/// before `main`.
fn loader_refusal(lib: &Path) -> Option<String> {
    let out = Command::new("/bin/true")
        .env("LD_PRELOAD", lib)
        .env_remove(env::HEARTBEAT)
        .output()
        .ok()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if let Some(line) = stderr.lines().find(|l| l.contains("cannot be preloaded")) {
        let reason = line
            .split_once("cannot be preloaded (")
            .and_then(|(_, r)| r.rsplit_once(')'))
            .map_or(line, |(r, _)| r);
        return Some(reason.to_string());
    }
    if out.status.success() {
        return None;
    }
    let line = stderr.lines().find(|l| !l.trim().is_empty())?;
    Some(line.strip_prefix("/bin/true: ").unwrap_or(line).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_keeps_the_users_other_pytorch_options() {
        let env = request_level_env(|k| {
            (k == "PYTORCH_CUDA_ALLOC_CONF")
                .then(|| "expandable_segments:True,backend:native".to_string())
        });
        assert!(env.contains(&(
            "PYTORCH_CUDA_ALLOC_CONF".into(),
            "backend:cudaMallocAsync,expandable_segments:True".into()
        )));
        assert!(env.contains(&("XLA_PYTHON_CLIENT_ALLOCATOR".into(), "platform".into())));
    }

    #[test]
    fn requests_sets_the_pytorch_backend_when_unset() {
        let env = request_level_env(|_| None);
        assert!(env.contains(&(
            "PYTORCH_CUDA_ALLOC_CONF".into(),
            "backend:cudaMallocAsync".into()
        )));
    }
}
