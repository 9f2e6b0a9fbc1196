//! End-to-end: the driver's own count of the process's memory (`driver.process_memory`,
//! recorder/src/nvml.rs and driver_count.rs) from a fake NVML that counts what the fake driver
//! holds, then checked by `vramtrace summary --json` against the memory the trace names.

use vramtrace_format::Api;
use vramtrace_format::conventions::driver_count::{AFTER_CONTEXT, BEFORE_CONTEXT, NEW_HIGH};
use vramtrace_tests::{artifacts, command, open, scratch, traces_in};

const MIB: u64 = 1 << 20;

/// Records `client gpa hold 1 GiB 1000 ms` with a context of 300 MiB and the fake NVML; `env`
/// is set on the program. The trace's `driver.process_memory` events (flags, size) and the
/// `summary --json` group of device 1.
fn record(name: &str, env: &[(&str, &str)]) -> (Vec<(u64, u64)>, serde_json::Value, String) {
    let a = artifacts();
    let dir = scratch(name);
    let mut cmd = command(&a.vramtrace);
    cmd.args(["record", "-o"])
        .arg(dir.join(""))
        .arg("--")
        .arg(&a.client)
        .args(["gpa", "hold", &(1u64 << 30).to_string(), "1000"])
        .env("VRAMTRACE_NVML", &a.fake_nvml)
        .env("FAKECUDA_CONTEXT_BYTES", (300 * MIB).to_string())
        .envs(env.iter().copied());
    let out = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let trace = traces_in(&dir).pop().expect("one trace");
    let counts = open(&trace)
        .events()
        .filter(|e| e.api == Api::DriverProcessMemory)
        .map(|e| {
            assert_eq!(e.device, 1);
            (e.flags, e.size)
        })
        .collect();
    let out = command(&a.vramtrace)
        .args(["summary", "--json"])
        .arg(&trace)
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let group = json["groups"]
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["device"] == 1)
        .expect("a group of device 1")
        .clone();
    (counts, group, stderr)
}

#[test]
fn the_driver_s_count_is_recorded_around_the_context_and_at_its_high_and_named_in_full() {
    for (name, env) in [
        ("driver-count", vec![]),
        // A container: NVML lists the host's pid, and the process is the only one listed.
        ("driver-count-other-pid", vec![("FAKENVML_PID", "1")]),
    ] {
        let (counts, group, stderr) = record(name, &env);
        assert!(!stderr.contains("NVML"), "{stderr}");
        assert_eq!(
            counts[..2],
            [(BEFORE_CONTEXT, 0), (AFTER_CONTEXT, 300 * MIB)],
            "{name}"
        );
        assert!(
            counts.contains(&(NEW_HIGH, 1324 * MIB)),
            "{name}: {counts:?}"
        );
        let d = &group["driver_count"];
        assert_eq!(d["driver_bytes"], 1324 * MIB, "{name}: {d}");
        assert_eq!(d["named_bytes"], 1324 * MIB, "{name}: {d}");
        assert_eq!(d["named_fraction"], 1.0);
        assert_eq!(
            (&d["context_bytes"], &d["contexts"]),
            (&(300 * MIB).into(), &1.into())
        );
        let context = group["outside_by_library"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["library"] == "CUDA context")
            .expect("the context is a library row");
        assert_eq!(context["peak_bytes"], 300 * MIB);
    }
}

#[test]
fn without_nvml_nothing_is_counted_and_a_named_library_that_fails_says_so_once() {
    let (counts, group, stderr) = record("driver-count-none", &[("VRAMTRACE_NVML", "off")]);
    assert!(counts.is_empty(), "{counts:?}");
    assert!(group["driver_count"].is_null());
    assert!(!stderr.contains("NVML"), "{stderr}");
    let (counts, group, stderr) = record("driver-count-fails", &[("FAKENVML_FAIL", "1")]);
    assert!(counts.is_empty() && group["driver_count"].is_null());
    assert_eq!(
        stderr.matches("NVML").count(),
        1,
        "one line says why: {stderr}"
    );
    assert!(stderr.contains("does not initialise"), "{stderr}");
}
