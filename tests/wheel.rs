//! The wheel as a user gets it: `packaging/build-wheel.sh` (unoptimized, to share the debug
//! build's time), installed with `pip install --no-index` into a fresh virtual environment of
//! every Python 3.10-3.13 found, and into a `--target` directory; the installed `vramtrace`
//! must find the library inside its package and record the fake driver through it.
//!
//! It needs `pip install maturin ziglang cargo-zigbuild` (`.ci/run` installs them). Without
//! them it says so and passes, except under CI (`CI` set), where it fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use vramtrace_tests::*;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

fn run(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).into_owned() + &stderr
}

/// Python interpreters 3.10 to 3.13: on `PATH` as `python3.N`, and pyenv's when present.
fn pythons() -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = Vec::new();
    let pyenv = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".pyenv")));
    for minor in 10..=13 {
        let mut options = vec![PathBuf::from(format!("python3.{minor}"))];
        if let Some(root) = &pyenv {
            let versions = std::fs::read_dir(root.join("versions"))
                .into_iter()
                .flatten();
            options.extend(
                versions
                    .flatten()
                    .filter(|e| {
                        e.file_name()
                            .to_string_lossy()
                            .starts_with(&format!("3.{minor}."))
                    })
                    .map(|e| e.path().join("bin/python3")),
            );
        }
        if let Some(p) = options.into_iter().find(|p| {
            Command::new(p)
                .args(["-c", "import venv, ensurepip"])
                .output()
                .is_ok_and(|o| o.status.success())
        }) {
            found.push((minor, p));
        }
    }
    found.into_iter().map(|(_, p)| p).collect()
}

/// Builds the wheel once into `dir`; returns its path.
fn build_wheel(dir: &Path) -> PathBuf {
    let out = dir.join("dist");
    run(
        Command::new(root().join("packaging/build-wheel.sh"))
            .env("PROFILE", "dev")
            .env("OUT", &out),
        "packaging/build-wheel.sh",
    );
    let wheels: Vec<PathBuf> = std::fs::read_dir(&out)
        .expect("wheel directory")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "{wheels:?}");
    wheels.into_iter().next().unwrap()
}

/// Records the fake driver with the installed `vramtrace` and checks the trace.
fn records_with(vramtrace: &Path, dir: &Path) {
    let out_dir = dir.join("traces/");
    let mut cmd = command(vramtrace);
    let printed = run(
        cmd.arg("record")
            .arg("-o")
            .arg(&out_dir)
            .arg("--")
            .arg(&artifacts().client)
            .args(["dlsym", "all"]),
        "installed vramtrace record",
    );
    assert!(printed.contains("55 events (3 failed)"), "{printed}");
    let traces = traces_in(&out_dir);
    assert_eq!(traces.len(), 1, "{traces:?}");
    assert_eq!(open(&traces[0]).event_count(), 55);
    let info = run(
        command(vramtrace).arg("info").arg(&traces[0]),
        "installed vramtrace info",
    );
    assert!(info.contains("cuMemAlloc_v2"), "{info}");
}

#[test]
fn the_wheel_installs_into_fresh_environments_and_records_the_fake_driver() {
    let tools = ["maturin", "cargo-zigbuild"];
    if let Some(missing) = tools.iter().find(|t| !have(t)) {
        assert!(
            std::env::var_os("CI").is_none(),
            "{missing} is missing (pip install maturin ziglang cargo-zigbuild)"
        );
        eprintln!("skipped: {missing} is missing (pip install maturin ziglang cargo-zigbuild)");
        return;
    }
    let dir = scratch("wheel");
    let wheel = build_wheel(&dir);
    let name = wheel.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.ends_with("-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"),
        "{name}"
    );

    let pythons = pythons();
    assert!(!pythons.is_empty(), "no Python 3.10-3.13 with venv found");
    for python in &pythons {
        let version = run(Command::new(python).arg("--version"), "python --version");
        eprintln!("wheel on {}", version.trim());
        let env = dir.join(format!("venv-{}", version.trim().replace(' ', "-")));
        run(
            Command::new(python).arg("-m").arg("venv").arg(&env),
            "python -m venv",
        );
        run(
            Command::new(env.join("bin/python"))
                .args(["-m", "pip", "install", "--quiet", "--no-index"])
                .arg(&wheel),
            "pip install --no-index",
        );
        let vramtrace = env.join("bin/vramtrace");
        records_with(&vramtrace, &env);
        // Both files need nothing newer than glibc 2.17 (manylinux2014).
        let lib = run(
            Command::new(env.join("bin/python"))
                .args(["-c", "import vramtrace; print(vramtrace.preload_path())"]),
            "import vramtrace",
        );
        let lib = PathBuf::from(lib.trim());
        for file in [&vramtrace, &lib] {
            let (newest, unversioned) = glibc_requirements(file);
            assert!(newest <= 17, "{}: GLIBC_2.{newest}", file.display());
            assert!(
                unversioned.is_empty(),
                "{}: {unversioned:?}",
                file.display()
            );
        }
    }

    // `pip install --target DIR`: the executable in DIR/bin, the package in DIR/vramtrace.
    let target = dir.join("target-install");
    run(
        Command::new(&pythons[0])
            .args(["-m", "pip", "install", "--quiet", "--no-index", "--target"])
            .arg(&target)
            .arg(&wheel),
        "pip install --target",
    );
    records_with(&target.join("bin/vramtrace"), &target);

    // A copied executable alone says where it looked and how to fix it.
    let alone = dir.join("alone");
    std::fs::create_dir_all(&alone).unwrap();
    std::fs::copy(target.join("bin/vramtrace"), alone.join("vramtrace")).unwrap();
    let out = command(&alone.join("vramtrace"))
        .args(["record", "--", "true"])
        .output()
        .expect("run the copied vramtrace");
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("libvramtrace_preload.so not found") && stderr.contains("--preload"),
        "{stderr}"
    );
}
