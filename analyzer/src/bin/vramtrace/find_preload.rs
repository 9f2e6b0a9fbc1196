//! Where `vramtrace record` finds `libvramtrace_preload.so`.
//!
//! In order: `--preload PATH`; the `VRAMTRACE_PRELOAD` environment variable; the file beside the
//! `vramtrace` executable (a source build: `cargo build --release` puts both in
//! `target/release/`); the `vramtrace` Python package that a wheel installed the executable
//! with. pip puts the executable in the scheme's scripts directory and the package in its
//! `purelib`/`platlib` directory, so from `PREFIX/bin/vramtrace` the package is
//! `PREFIX/lib/pythonX.Y/site-packages/vramtrace/` (a virtual environment, `--user`, `--prefix`,
//! conda, pipx and `uv tool`, which link to a virtual environment's executable), or
//! `PREFIX/vramtrace/` for `pip install --target PREFIX` (see the install schemes in
//! <https://docs.python.org/3/library/sysconfig.html#installation-paths>). No Python runs.

use anyhow::{Context, Result, bail};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The preload library's file name.
pub const PRELOAD_NAME: &str = "libvramtrace_preload.so";

use vramtrace_format::conventions::env::PRELOAD as PRELOAD_VAR;

/// The Python package of the wheel, which holds the library.
const PACKAGE: &str = "vramtrace";

/// The library to preload, as an absolute path.
pub fn find_preload(given: Option<&Path>) -> Result<PathBuf> {
    let named = given
        .map(|p| (p.to_path_buf(), "--preload"))
        .or_else(|| env_path(std::env::var_os(PRELOAD_VAR)).map(|p| (p, PRELOAD_VAR)));
    if let Some((path, from)) = named {
        if !path.is_file() {
            bail!("{}: no such library (given by {from})", path.display());
        }
        return Ok(absolute(path));
    }
    let exe = std::env::current_exe().context("locating the vramtrace executable")?;
    let tried = candidates(&exe);
    match tried.iter().find(|p| p.is_file()) {
        Some(path) => Ok(absolute(path.clone())),
        None => bail!(
            "{PRELOAD_NAME} not found beside {} nor in an installed `{PACKAGE}` Python package \
             (pass --preload PATH or set {PRELOAD_VAR}; a source build makes it with `cargo build \
             --release`)",
            exe.display()
        ),
    }
}

fn env_path(value: Option<OsString>) -> Option<PathBuf> {
    value.filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// The dynamic loader needs an absolute path once the program changes directory.
fn absolute(path: PathBuf) -> PathBuf {
    std::fs::canonicalize(&path).unwrap_or(path)
}

/// The places a library may be for the executable at `exe`, most specific first.
pub fn candidates(exe: &Path) -> Vec<PathBuf> {
    let bin = exe.parent().unwrap_or(Path::new("."));
    let mut out = vec![bin.join(PRELOAD_NAME)];
    let Some(prefix) = bin.parent() else {
        return out;
    };
    out.push(prefix.join(PACKAGE).join(PRELOAD_NAME));
    for lib in ["lib", "lib64"] {
        let mut versions: Vec<PathBuf> = std::fs::read_dir(prefix.join(lib))
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("python3"))
            })
            .collect();
        // The newest Python first, when several are installed side by side.
        versions.sort_by_key(|p| std::cmp::Reverse(minor_version(p)));
        for dir in versions {
            for site in ["site-packages", "dist-packages"] {
                out.push(dir.join(site).join(PACKAGE).join(PRELOAD_NAME));
            }
        }
    }
    out
}

/// `12` for `.../python3.12`; 0 when the name has no number.
fn minor_version(dir: &Path) -> u32 {
    dir.file_name()
        .and_then(|n| n.to_str()?.strip_prefix("python3.")?.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_virtual_environment_layout_is_found_after_the_file_beside_the_binary() {
        let dir = tempfile::tempdir().unwrap();
        let site = dir.path().join("lib/python3.12/site-packages/vramtrace");
        std::fs::create_dir_all(&site).unwrap();
        std::fs::create_dir_all(dir.path().join("lib/python3.9")).unwrap();
        let exe = dir.path().join("bin/vramtrace");
        let got = candidates(&exe);
        assert_eq!(got[0], dir.path().join("bin").join(PRELOAD_NAME));
        assert_eq!(got[1], dir.path().join("vramtrace").join(PRELOAD_NAME));
        assert_eq!(got[2], site.join(PRELOAD_NAME));
        assert!(
            got.iter().position(|p| p.starts_with(&site)) < {
                got.iter()
                    .position(|p| p.to_string_lossy().contains("python3.9"))
            }
        );
    }
}
