//! `vramtrace report` as users meet it: the files it writes render, hostile trace strings stay
//! text, the page is self-contained and works in a real browser (headless Chromium driven through
//! the DevTools protocol by `tests/support/cdp.py`), errors are one line.

use crate::util::{repo, sample, vramtrace};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};
use vramtrace_format::{
    Api, Device, Event, Frame, Metadata, Module, Process, Stack, Tables, TraceWriter, WriterOptions,
};

/// Runs `report` on `trace` into a new temporary directory, which it returns.
fn report(trace: &Path, extra: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = vramtrace()
        .arg("report")
        .arg(trace)
        .arg("-o")
        .arg(dir.path())
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir
}

fn svgs(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "svg"))
        .collect();
    v.sort();
    v
}

/// Share of pixels that are not (nearly) white.
fn ink(pixmap: &resvg::tiny_skia::Pixmap) -> f64 {
    let px = pixmap.pixels();
    let inked = px
        .iter()
        .filter(|p| p.alpha() > 0 && (p.red() < 230 || p.green() < 230 || p.blue() < 230))
        .count();
    inked as f64 / px.len().max(1) as f64
}

/// Parses an SVG with usvg (the validator) and rasterizes it with resvg.
fn rasterize(svg: &str) -> resvg::tiny_skia::Pixmap {
    let tree = usvg::Tree::from_str(svg, &usvg::Options::default()).expect("valid SVG");
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height()).unwrap();
    resvg::render(&tree, usvg::Transform::default(), &mut pixmap.as_mut());
    pixmap
}

#[test]
fn every_chart_of_the_sample_parses_renders_and_is_small() {
    let dir = report(&sample(), &["--svg"]);
    let files = svgs(dir.path());
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "memory-over-time.svg",
        "policy-peaks.svg",
        "fragmentation-over-time.svg",
        "live-at-peak.svg",
        "allocation-timeline.svg",
        "request-sizes.svg",
        "request-lifetimes.svg",
        "address-space-at-peak-pytorch.svg",
    ] {
        assert!(
            names.iter().any(|n| n == expected),
            "{expected} in {names:?}"
        );
    }
    for f in &files {
        let svg = std::fs::read_to_string(f).unwrap();
        assert!(
            svg.len() < 2 << 20,
            "{} is {} bytes",
            f.display(),
            svg.len()
        );
        let ink = ink(&rasterize(&svg));
        assert!(ink > 0.01, "{} renders almost blank ({ink})", f.display());
    }
    // The page links every chart, with its caption.
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    for f in &names {
        assert!(html.contains(&format!("<a href=\"{f}\">")), "{f}");
    }
    assert!(html.contains("the dashed grey line is the lower bound"));
}

#[test]
fn without_svg_only_the_page_is_written() {
    let dir = report(&sample(), &[]);
    assert!(svgs(dir.path()).is_empty());
    assert!(dir.path().join("index.html").is_file());
}

#[test]
fn the_page_is_self_contained() {
    let dir = report(&sample(), &[]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let lower = html.to_lowercase();
    for banned in [
        "src=",
        "href=\"http",
        "@import",
        "url(",
        "<link",
        "fetch(",
        "xmlhttprequest",
        "import(",
    ] {
        assert!(!lower.contains(banned), "the page contains {banned}");
    }
    // Two inline scripts: the data and the code.
    assert_eq!(lower.matches("<script").count(), 2);
    assert!(html.contains("<script type=\"application/json\" id=\"vramtrace-data\">"));
    assert!(html.contains("capture level: <b>request"));
    assert!(html.contains("lower bound"));
}

#[test]
fn the_header_gives_the_library_answers_as_tune_does() {
    let path = repo("samples/traces/h200-tune/multires_cnn.recorded.vramtrace");
    let (tune, a) = crate::util::answers_of(&path);
    let best = a.best.unwrap();
    let dir = report(&path, &["--policy", "pytorch"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let boxed = |id: &str| {
        let at = html
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("{id}"));
        html[at..at + html[at..].find("</div>").unwrap()].to_string()
    };
    let b = boxed("best-setting");
    assert!(b.contains(&format!("<b>{}</b>", best.setting)), "{b}");
    assert!(
        b.contains(&format!("<code class=\"paste\">{}</code>", best.select)),
        "{b}"
    );
    // The settings tune counts as tried (the bounds are counted apart).
    assert!(
        b.contains(&format!("of the {} settings", tune.tried)),
        "{b}"
    );
    let g = boxed("smallest-gpu");
    assert!(
        g.contains(&format!("<b>{} GB</b>", a.smallest_gpu_gb.unwrap())),
        "{g}"
    );
}

/// Strings a hostile or unlucky trace can carry: markup, quotes, ampersands, what invalid
/// UTF-8 becomes when decoded, and characters XML cannot hold.
const HOSTILE: &str = "<script>alert(\"x\")</script> & 'q' \u{0}\u{1b}[31m";

pub(crate) fn hostile_trace(dir: &Path) -> PathBuf {
    let lossy = String::from_utf8_lossy(b"lib\xff\xfe<b>.so").into_owned();
    let metadata = Metadata {
        writer: HOSTILE.into(),
        host: "h&st\"<i>".into(),
        capture_level: "request".into(),
        ..Metadata::default()
    };
    let path = dir.join("hostile.vramtrace");
    let file = std::fs::File::create(&path).unwrap();
    let mut w = TraceWriter::new(file, &metadata, WriterOptions::default()).unwrap();
    *w.tables_mut() = Tables {
        processes: vec![Process {
            pid: 9,
            parent_pid: 1,
            command_line: vec!["python".into(), HOSTILE.into(), lossy.clone()],
            start_unix_ns: 0,
            start_monotonic_ns: 0,
        }],
        devices: vec![Device {
            ordinal: 0,
            name: HOSTILE.into(),
            uuid: [0; 16],
            total_memory: 1 << 30,
            compute_capability: (9, 0),
        }],
        stacks: vec![Stack {
            id: 1,
            frames: vec![1, 2],
        }],
        frames: vec![
            Frame {
                id: 1,
                address: 0x7000_0100,
            },
            Frame {
                id: 2,
                address: 0x8000_0200,
            },
        ],
        modules: vec![
            Module {
                id: 1,
                pid: 9,
                path: format!("/nonexistent/{lossy}"),
                build_id: vec![1; 20],
                load_address: 0x7000_0000,
                size: 1 << 20,
                loaded_ns: 0,
                unloaded_ns: None,
            },
            Module {
                id: 2,
                pid: 9,
                path: format!("/nonexistent/{HOSTILE}"),
                build_id: Vec::new(),
                load_address: 0x8000_0000,
                size: 1 << 20,
                loaded_ns: 0,
                unloaded_ns: None,
            },
        ],
        ..Tables::default()
    };
    let mut seq = 0;
    let mut push = |api, t: u64, address: u64, size: u64| {
        seq += 1;
        w.push(&Event {
            seq,
            time_ns: t,
            pid: 9,
            device: 0,
            address,
            size,
            stack: 1,
            ..Event::new(api)
        })
        .unwrap();
    };
    push(Api::CuMemAllocAsync, 1_000, 0x10_0000, 3 << 20);
    push(Api::CuMemAllocAsync, 2_000, 0x40_0000, 1 << 20);
    push(Api::CuMemFreeAsync, 3_000, 0x10_0000, 0);
    push(Api::CuMemAllocAsync, 4_000, 0x80_0000, 5 << 20);
    push(Api::CuMemFreeAsync, 5_000, 0x40_0000, 0);
    w.finish().unwrap();
    path
}

#[test]
fn hostile_names_stay_text_in_svg_and_html() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = hostile_trace(tmp.path());
    let dir = report(&trace, &["--svg"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    // Only the page's own two scripts; the trace's strings are escaped in the JSON too.
    assert_eq!(html.to_lowercase().matches("<script").count(), 2);
    assert!(!html.contains("<b>.so") && !html.contains("<i>"));
    assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;"));
    // Frame names travel in the page's JSON, with `<` escaped there too.
    assert!(html.contains("lib\u{fffd}\u{fffd}\\u003cb>.so+0x100"));
    assert!(!html.contains('\u{0}') && !html.contains('\u{1b}'));
    for f in svgs(dir.path()) {
        let svg = std::fs::read_to_string(&f).unwrap();
        assert!(!svg.contains("<script"), "{}", f.display());
        rasterize(&svg);
    }
    let live = std::fs::read_to_string(dir.path().join("live-at-peak.svg")).unwrap();
    assert!(
        live.contains("&lt;b&gt;.so+0x100"),
        "frames are named in the chart"
    );
    // Kept for a person to open.
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-hostile");
    let _ = std::fs::remove_dir_all(&keep);
    let _ = std::fs::create_dir_all(&keep);
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let f = f.unwrap().path();
        let _ = std::fs::copy(&f, keep.join(f.file_name().unwrap()));
    }
}

/// The page's out-of-memory column says what `replay`'s text says of the recorded run's own
/// refused allocations (`refused_as_recorded`): refused again under the room the run had, served
/// on the whole device.
#[test]
fn the_pages_oom_column_says_the_recorded_refusals_as_replay_does() {
    let capped = repo("samples/traces/h200-torch/resnet.cap5_6g.vramtrace");
    let page = |extra: &[&str]| {
        let dir = report(&capped, &[&["--policy", "pytorch"][..], extra].concat());
        std::fs::read_to_string(dir.path().join("index.html")).unwrap()
    };
    let html = page(&["--capacity", "5.6GiB"]);
    assert!(
        html.contains("<td><span class=\"oom\">36 refused as in the recorded run</span></td>"),
        "the capped replay"
    );
    let html = page(&[]);
    assert!(
        html.contains(
            "<td>no (served the 36 allocations the recorded run was refused: it had more room)</td>"
        ),
        "the whole device"
    );
}

/// The page splits the memory outside the pool by library as `summary` does: the six cuBLAS
/// workspaces of an H200 PyTorch run (134,481,920 bytes, samples/README.md).
#[test]
fn the_page_names_the_library_of_the_memory_outside_the_pool() {
    let page = |trace: &str| {
        let dir = report(&repo(trace), &["--policy", "pytorch"]);
        std::fs::read_to_string(dir.path().join("index.html")).unwrap()
    };
    let html = page("samples/traces/h200-validation/side_stream.async.vramtrace");
    assert!(
        html.contains(
            "<tr><td>cuBLAS</td><td>128.25 MiB</td><td>6</td><td>128.25 MiB</td>\
             <td><code></code></td></tr>"
        ),
        "the cuBLAS row"
    );
    // Recorded with Python frames only: no library, but the line.
    let html = page("samples/traces/torch-mlp-requests.vramtrace");
    assert!(
        html.contains("<tr><td>no native stack</td><td>128.25 MiB</td>"),
        "the row without native frames"
    );
    assert!(
        html.contains("torch_train.py:31 mlp_steps</code></td></tr>"),
        "its line"
    );
}

/// The page shows the driver's count of an H200 NCCL run and the measured CUDA context as a
/// library outside the pool (docs/validation.md "Outside the pool, named").
#[test]
fn the_page_shows_the_driver_s_count_and_the_cuda_context() {
    let trace = repo("samples/workloads/h200/outside/traces/python3.12-514.vramtrace");
    let dir = report(&trace, &["--policy", "pytorch"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(
        html.contains(
            "driver's count 3.01 GiB at its highest; the trace names 2.74 GiB of it (90.9%"
        ),
        "the driver's count"
    );
    assert!(
        html.contains("<tr><td>CUDA context</td><td>518.00 MiB</td><td>1</td>"),
        "the context row"
    );
    assert!(
        html.contains("<tr><td>NCCL</td><td>388.00 MiB</td><td>194</td>"),
        "NCCL"
    );
}

#[test]
fn policies_can_be_chosen() {
    let dir = report(
        &sample(),
        &[
            "--policy",
            "pytorch,cuda-malloc",
            "--capacity",
            "2GiB",
            "--svg",
        ],
    );
    let names: Vec<String> = svgs(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&"address-space-at-peak-pytorch.svg".to_string()));
    assert!(names.contains(&"address-space-at-peak-cuda-malloc.svg".to_string()));
    assert!(!names.iter().any(|n| n.contains("expandable")));
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("replayed under a capacity of 2.00 GiB"));
}

#[test]
fn symbolization_can_be_skipped() {
    let dir = report(&sample(), &["--no-symbolize"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("libtorch_cuda.so+0x"));
    assert!(html.contains("without symbolization"));
}

#[test]
fn an_unwritable_output_directory_is_one_line_and_exit_1() {
    // A directory cannot be made inside a regular file, even by root.
    let out = vramtrace()
        .arg("report")
        .arg(sample())
        .arg("-o")
        .arg(sample().join("inside"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("cannot create the output directory"), "{err}");
    assert!(err.contains("synthetic-mlp.vramtrace/inside"), "{err}");
}

#[test]
fn a_missing_trace_is_one_line_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let out = vramtrace()
        .args(["report", "no-such.vramtrace", "-o"])
        .arg(tmp.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no-such.vramtrace"), "{err}");
}

#[test]
fn an_unknown_policy_is_a_usage_error() {
    let out = vramtrace()
        .arg("report")
        .arg(sample())
        .args(["--policy", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn a_trace_without_allocations_still_gives_a_page() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("empty.vramtrace");
    let w = TraceWriter::new(
        std::fs::File::create(&path).unwrap(),
        &Metadata::default(),
        WriterOptions::default(),
    )
    .unwrap();
    w.finish().unwrap();
    let dir = report(&path, &[]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("nothing to chart"));
    for f in svgs(dir.path()) {
        rasterize(&std::fs::read_to_string(f).unwrap());
    }
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| {
            ["chromium", "chromium-browser", "google-chrome"]
                .into_iter()
                .map(move |n| d.join(n))
        })
        .find(|p| p.is_file())
}

/// Says that `test` was skipped and why, on the real stderr: libtest captures only the print
/// macros, so this shows in `cargo test` output without `--nocapture`.
fn skipped(test: &str, why: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

const NO_CHROMIUM: &str = "no chromium binary on PATH (install Debian's `chromium`, or set \
                           CHROMIUM=/path/to/chrome)";

#[test]
fn the_page_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        skipped("the_page_renders_in_headless_chromium", NO_CHROMIUM);
        return;
    };
    let dir = report(&sample(), &[]);
    let profile = tempfile::tempdir().unwrap();
    let shot = dir.path().join("screenshot.png");
    let mut child = std::process::Command::new(&browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1100,2400",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(format!(
            "file://{}",
            dir.path().join("index.html").display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            panic!("chromium did not finish the screenshot in 90 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let png = resvg::tiny_skia::Pixmap::load_png(&shot).expect("chromium wrote a PNG");
    assert_eq!((png.width(), png.height()), (1100, 2400));
    let ink = ink(&png);
    assert!(ink > 0.03, "the screenshot is nearly blank ({ink})");
    // Kept for a person to look at.
    let keep = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report-screenshot.png");
    let _ = std::fs::copy(&shot, &keep);
}

#[test]
fn each_process_and_device_gets_its_own_section_and_files() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("two.vramtrace");
    let mut w = TraceWriter::new(
        std::fs::File::create(&path).unwrap(),
        &Metadata {
            capture_level: "request".into(),
            ..Metadata::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    let mut seq = 0;
    for (pid, device, size) in [(1u32, 0i32, 8u64 << 20), (2, 1, 3 << 20)] {
        for k in 0..4u64 {
            seq += 1;
            w.push(&Event {
                seq,
                time_ns: seq * 1000,
                pid,
                device,
                address: 0x1000_0000 * u64::from(pid) + k * size,
                size,
                ..Event::new(Api::CuMemAlloc_v2)
            })
            .unwrap();
        }
    }
    w.finish().unwrap();
    let dir = report(&path, &["--svg"]);
    for f in [
        "p1-gpu0-memory-over-time.svg",
        "p2-gpu1-memory-over-time.svg",
        "p1-gpu0-policy-peaks.svg",
    ] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("<h3>process 2, GPU 1</h3>"));
    // The larger peak comes first.
    assert!(html.find("process 1, GPU 0").unwrap() < html.find("process 2, GPU 1").unwrap());
}

#[test]
fn every_bundled_sample_gives_a_page_with_valid_charts() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/traces");
    let mut samples: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "vramtrace"))
        .collect();
    samples.sort();
    assert!(!samples.is_empty());
    for sample in samples {
        let out = report(&sample, &["--svg"]);
        let html = std::fs::read_to_string(out.path().join("index.html")).unwrap();
        assert!(html.contains("</html>"), "{}", sample.display());
        for f in svgs(out.path()) {
            let svg = std::fs::read_to_string(&f).unwrap();
            usvg::Tree::from_str(&svg, &usvg::Options::default())
                .unwrap_or_else(|e| panic!("{} of {}: {e}", f.display(), sample.display()));
        }
        // Traces recorded under a caching allocator are not request level: the page says so.
        let name = sample.file_name().unwrap().to_string_lossy();
        if name.ends_with("-native.vramtrace") || name.ends_with("-expandable.vramtrace") {
            assert!(!html.contains("capture level: <b>request"), "{name}");
            assert!(html.contains("<div class=\"warn\"><b>Note:</b>"), "{name}");
        }
    }
}

/// Runs `commands` (one JSON object each, see `tests/support/cdp.py`) against `page` in headless
/// Chromium; the results in order, then the page's console errors and exceptions. `None` (the
/// test says it skipped) without chromium or python3.
fn browse(test: &str, page: &Path, commands: &[serde_json::Value]) -> Option<Browsed> {
    let Some(browser) = chromium() else {
        skipped(test, NO_CHROMIUM);
        return None;
    };
    let helper = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/cdp.py");
    let mut child = match std::process::Command::new("python3")
        .arg(&helper)
        .arg(&browser)
        .arg(page)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            skipped(
                test,
                &format!("cannot run python3 for the DevTools helper: {e}"),
            );
            return None;
        }
    };
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().unwrap();
        for c in commands {
            writeln!(stdin, "{c}").unwrap();
        }
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the DevTools helper failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let end = lines
        .pop()
        .expect("the helper ends with the console report");
    let loaded = lines.remove(0);
    assert!(loaded.get("loaded_s").is_some(), "{loaded}");
    for (c, r) in commands.iter().zip(&lines) {
        assert!(r.get("error").is_none(), "{c} failed: {r}");
    }
    Some(Browsed {
        values: lines.into_iter().map(|r| r["value"].clone()).collect(),
        console_errors: end["console_errors"].as_array().unwrap().clone(),
        exceptions: end["exceptions"].as_array().unwrap().clone(),
    })
}

struct Browsed {
    values: Vec<serde_json::Value>,
    console_errors: Vec<serde_json::Value>,
    exceptions: Vec<serde_json::Value>,
}

impl Browsed {
    fn assert_clean(&self) {
        assert!(
            self.console_errors.is_empty() && self.exceptions.is_empty(),
            "console errors {:?}, exceptions {:?}",
            self.console_errors,
            self.exceptions
        );
    }
}

fn eval(expr: &str) -> serde_json::Value {
    serde_json::json!({"op": "eval", "expr": expr})
}

fn wait(expr: &str) -> serde_json::Value {
    serde_json::json!({"op": "wait", "expr": expr, "timeout": 20})
}

/// A trace whose frames are Python lines (as an imported snapshot's are): a 512 MiB weight made
/// in `load_weights` live from 1 ms to 9 ms, a 64 MiB activation from `forward` live 2–3 ms, and
/// 1 MiB scratch buffers from `scratch` between. `hostile` names one frame with markup.
fn python_trace(dir: &Path, hostile: bool) -> PathBuf {
    use vramtrace_format::conventions::python_module_path;
    let names: [(&str, &str); 4] = [
        ("/src/train.py", "main"),
        ("/src/model.py", "load_weights"),
        ("/src/model.py", "forward"),
        (
            "/src/util.py",
            if hostile {
                "</script><script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=2\">"
            } else {
                "scratch"
            },
        ),
    ];
    let modules: Vec<Module> = names
        .iter()
        .enumerate()
        .map(|(i, (file, name))| Module {
            id: i as u32 + 1,
            pid: 5,
            path: python_module_path(file, name),
            build_id: Vec::new(),
            load_address: 0x7f00_0000_0000 + (i as u64) * 0x1_0000_0000,
            size: 1 << 20,
            loaded_ns: 0,
            unloaded_ns: None,
        })
        .collect();
    let frames: Vec<Frame> = modules
        .iter()
        .map(|m| Frame {
            id: m.id,
            address: m.load_address + 10 * u64::from(m.id),
        })
        .collect();
    // Innermost first, as the recorder writes stacks.
    let stacks = vec![
        Stack {
            id: 1,
            frames: vec![2, 1],
        },
        Stack {
            id: 2,
            frames: vec![3, 1],
        },
        Stack {
            id: 3,
            frames: vec![4, 3, 1],
        },
    ];
    let path = dir.join(if hostile {
        "hostile-py.vramtrace"
    } else {
        "py.vramtrace"
    });
    let mut w = TraceWriter::new(
        std::fs::File::create(&path).unwrap(),
        &Metadata {
            capture_level: "request".into(),
            ..Metadata::default()
        },
        WriterOptions::default(),
    )
    .unwrap();
    *w.tables_mut() = Tables {
        processes: vec![Process {
            pid: 5,
            parent_pid: 1,
            command_line: vec!["python".into(), "train.py".into()],
            start_unix_ns: 0,
            start_monotonic_ns: 0,
        }],
        devices: vec![Device {
            ordinal: 0,
            name: "test GPU".into(),
            uuid: [0; 16],
            total_memory: 80 << 30,
            compute_capability: (9, 0),
        }],
        stacks,
        frames,
        modules,
        ..Tables::default()
    };
    let mut seq = 0;
    let mut push = |api, t: u64, address: u64, size: u64, stack: u32| {
        seq += 1;
        w.push(&Event {
            seq,
            time_ns: t,
            pid: 5,
            device: 0,
            address,
            size,
            stack,
            ..Event::new(api)
        })
        .unwrap();
    };
    const MS: u64 = 1_000_000;
    push(Api::CuMemAllocAsync, MS, 0x1000_0000, 512 << 20, 1);
    push(Api::CuMemAllocAsync, 2 * MS, 0x4000_0000, 64 << 20, 2);
    push(Api::CuMemFreeAsync, 3 * MS, 0x4000_0000, 0, 2);
    for k in 0..40u64 {
        let t = 3 * MS + k * 100_000;
        push(
            Api::CuMemAllocAsync,
            t,
            0x6000_0000 + k * 0x10_0000,
            1 << 20,
            3,
        );
        push(
            Api::CuMemFreeAsync,
            t + 50_000,
            0x6000_0000 + k * 0x10_0000,
            0,
            3,
        );
    }
    push(Api::CuMemFreeAsync, 9 * MS, 0x1000_0000, 0, 1);
    push(Api::CuMemAllocAsync, 10 * MS, 0x1000_0000, 1 << 20, 3);
    w.finish().unwrap();
    path
}

/// JS: page coordinates of the middle of allocation `size` at time `t_ns` in the timeline, from
/// the page's own axis mapping.
fn point_in_band(t_ns: u64, size: u64) -> String {
    format!(
        "(() => {{ const {{S, T}} = window.vramtraceView; const c = document.getElementById('timeline'); \
         c.scrollIntoView({{block: 'center'}}); const r = c.getBoundingClientRect(); \
         const x = r.left + T.left + ({t_ns} - S.v0) / (S.v1 - S.v0) * T.pw; \
         const j = Math.floor((x - r.left - T.left) / T.colW); const a = window.vramtraceData.runs[0].sections[0].allocs; \
         let off = null; for (let k = 0; k < T.cols[j].length; k += 2) if (a.size[T.cols[j][k]] === {size}) off = T.cols[j][k + 1]; \
         const y = r.top + T.top + T.ph - (off + {size} / 2) / T.yMax * T.ph; return [x, y]; }})()"
    )
}

fn mouse_at(xy: &serde_json::Value) -> serde_json::Value {
    serde_json::json!({"op": "mouse", "type": "mouseMoved", "x": xy[0], "y": xy[1]})
}

#[test]
fn in_the_browser_the_page_hovers_zooms_toggles_and_searches() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = python_trace(tmp.path(), false);
    let dir = report(&trace, &["--policy", "pytorch,cuda-malloc"]);
    let page = dir.path().join("index.html");
    // First: where the 512 MiB band is at 5 ms.
    let Some(first) = browse(
        "in_the_browser_the_page_hovers_zooms_toggles_and_searches",
        &page,
        &[
            wait("document.body.dataset.ready"),
            eval(&point_in_band(5_000_000, 512 << 20)),
        ],
    ) else {
        return;
    };
    first.assert_clean();
    let xy = first.values[1].clone();
    let timeline = "document.getElementById('timeline').dataset";
    let b = browse(
        "in_the_browser_the_page_hovers_zooms_toggles_and_searches",
        &page,
        &[
            wait("document.body.dataset.ready"),
            eval(&point_in_band(5_000_000, 512 << 20)),
            mouse_at(&xy),
            eval("document.getElementById('tooltip').style.display + '|' + document.getElementById('tooltip').textContent"),
            eval(&format!("{timeline}.range")),
            serde_json::json!({"op": "wheel", "x": xy[0], "y": xy[1], "deltaY": -300}),
            eval(&format!("{timeline}.range")),
            eval(&format!("{timeline}.lines")),
            eval("document.querySelector('input.policy-toggle[data-policy=\"pytorch\"]').click()"),
            eval(&format!("{timeline}.lines")),
            eval("(() => { const s = document.getElementById('search'); s.value = 'load_weights'; s.dispatchEvent(new Event('input')); })()"),
            wait("document.getElementById('search-count').textContent"),
            eval(&format!("{timeline}.highlighted")),
            eval("document.getElementById('icicle').dataset.matches"),
            eval(&format!("{timeline}.axis")),
        ],
    )
    .unwrap();
    b.assert_clean();
    let v = &b.values;
    let tip = v[3].as_str().unwrap();
    assert!(
        tip.starts_with("block|/src/model.py:20 load_weights"),
        "{tip}"
    );
    assert!(tip.contains("512.00 MiB on stream 0"), "{tip}");
    let range = |x: &serde_json::Value| -> (f64, f64) {
        let (a, b) = x.as_str().unwrap().split_once(',').unwrap();
        (a.parse().unwrap(), b.parse().unwrap())
    };
    let (a0, a1) = range(&v[4]);
    let (b0, b1) = range(&v[6]);
    assert!(
        b1 - b0 < 0.9 * (a1 - a0),
        "zoom in: {a0}..{a1} -> {b0}..{b1}"
    );
    assert!(v[7].as_str().unwrap().split('|').any(|l| l == "pytorch"));
    assert!(
        !v[9].as_str().unwrap().split('|').any(|l| l == "pytorch"),
        "{}",
        v[9]
    );
    assert!(
        v[9].as_str()
            .unwrap()
            .split('|')
            .any(|l| l == "cuda-malloc")
    );
    assert_eq!(
        v[12].as_str().unwrap(),
        "1",
        "the 512 MiB weight from load_weights"
    );
    assert!(v[13].as_str().unwrap().parse::<u32>().unwrap() >= 1);
    let axis: Vec<&str> = v[14].as_str().unwrap().split('|').collect();
    let mut unique = axis.clone();
    unique.dedup();
    assert_eq!(axis, unique, "axis labels repeat");
}

/// JS: the state view as drawn: the event it is after (empty at the peak), and each segment's
/// address and size with its blocks' offset, size and allocation.
const STATE_SHOWN: &str = "(() => { const b = document.getElementById('state'); return {event: b.dataset.event, \
     segments: [...b.querySelectorAll('.segment')].map(e => [+e.dataset.address, +e.dataset.size, \
     [...e.querySelectorAll('.block')].map(k => [+k.dataset.offset, +k.dataset.size, +k.dataset.owner])])}; })()";

/// A layout as [`STATE_SHOWN`] gives it (unknown owners as -1).
fn state_json(l: &vramtrace::report::data::AddressLayout) -> serde_json::Value {
    let mut segments: Vec<_> = l.segments.iter().collect();
    segments.sort_by_key(|s| s.address);
    serde_json::json!(
        segments
            .iter()
            .map(|s| {
                let blocks: Vec<serde_json::Value> = s
                    .allocated
                    .iter()
                    .zip(&s.owners)
                    .map(|(&(off, size), &o)| {
                        serde_json::json!([
                            off,
                            size,
                            if o == u32::MAX { -1 } else { i64::from(o) }
                        ])
                    })
                    .collect();
                serde_json::json!([s.address, s.size, blocks])
            })
            .collect::<Vec<_>>()
    )
}

#[test]
fn in_the_browser_a_segment_an_eighth_of_the_largest_still_draws_its_share() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = python_trace(tmp.path(), false);
    let dir = report(&trace, &["--policy", "pytorch"]);
    let Some(r) = browse(
        "in_the_browser_a_segment_an_eighth_of_the_largest_still_draws_its_share",
        &dir.path().join("index.html"),
        &[
            wait("document.body.dataset.ready"),
            eval(
                "[...document.querySelectorAll('#state .segment')]\
                 .map(e => [+e.dataset.size, e.getBoundingClientRect().width])",
            ),
        ],
    ) else {
        return;
    };
    r.assert_clean();
    let rows: Vec<(f64, f64)> = r.values[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v[0].as_f64().unwrap(), v[1].as_f64().unwrap()))
        .collect();
    // The 512 MiB weight's segment and the 64 MiB activation's: one an eighth of the other.
    assert!(rows.len() >= 2, "{rows:?}");
    let (size, width) = rows
        .iter()
        .copied()
        .fold((0.0, 0.0), |m, r| if r.0 > m.0 { r } else { m });
    for (s, w) in &rows {
        let share = (s / size).max(0.02);
        assert!(
            (w - width * share).abs() <= 2.0,
            "a {s}-byte segment draws {w} px of the largest's {width} px"
        );
    }
}

#[test]
fn in_the_browser_the_state_view_steps_event_by_event_as_the_replay_does() {
    use vramtrace::model::Model;
    use vramtrace::policy::{AddressOrder, BuildContext, build, parse_specs};
    use vramtrace::replay::{address_map_at, driver};
    use vramtrace::report::data::Buckets;
    use vramtrace::report::from_replay::{layout, owners_at, replay_policies, windows};
    let tmp = tempfile::tempdir().unwrap();
    let trace = python_trace(tmp.path(), false);
    // The replay, through the library.
    let t = vramtrace_format::Trace::open(&trace, Default::default()).unwrap();
    let model = Model::from_events(t.events(), &t.metadata);
    let stream = &model.streams[0];
    let b = Buckets::new(0, 20_000_000, 10);
    let specs = parse_specs("pytorch").unwrap();
    let ws = windows(stream, b, 0, 1000);
    let results = replay_policies(stream, &specs, u64::MAX, (b, b), &ws).unwrap();
    let mut expected: Vec<u64> = results[0]
        .address_map
        .segments
        .iter()
        .map(|s| s.size)
        .collect();
    expected.sort_unstable();
    assert!(!expected.is_empty());
    let dir = report(&trace, &["--policy", "pytorch"]);
    let key = |k: &str| serde_json::json!({"op": "key", "key": k});
    let Some(r) = browse(
        "in_the_browser_the_state_view_steps_event_by_event_as_the_replay_does",
        &dir.path().join("index.html"),
        &[
            wait("document.body.dataset.ready"),
            eval("[...document.querySelectorAll('#state .segment')].map(e => +e.dataset.size)"),
            eval("document.querySelectorAll('#state .block').length"),
            eval("document.getElementById('state-note').textContent"),
            key("ArrowRight"),
            eval(STATE_SHOWN),
            key("ArrowRight"),
            eval(STATE_SHOWN),
            eval("document.getElementById('state-note').textContent"),
            key("ArrowLeft"),
            key("ArrowLeft"),
            eval(STATE_SHOWN),
            eval("document.getElementById('moment').textContent"),
        ],
    ) else {
        return;
    };
    r.assert_clean();
    let mut shown: Vec<u64> = r.values[1]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    shown.sort_unstable();
    assert_eq!(shown, expected);
    // At the peak the 512 MiB weight and the 64 MiB activation are live.
    assert!(r.values[2].as_u64().unwrap() >= 2, "{}", r.values[2]);
    assert!(
        r.values[3]
            .as_str()
            .unwrap()
            .starts_with("pytorch at its peak")
    );
    // Each step shows the next event's state, the one a replay stopped there leaves.
    let ctx = BuildContext {
        stream,
        capacity: u64::MAX,
    };
    let at = |i: usize| {
        let mut fresh = build(&specs[0], &ctx).unwrap();
        let start = driver(stream, u64::MAX, AddressOrder::Rising);
        let map = address_map_at(fresh.as_mut(), &stream.requests, i, start);
        state_json(&layout(&map, &owners_at(stream, i)))
    };
    let event = |v: &serde_json::Value| -> usize { v["event"].as_str().unwrap().parse().unwrap() };
    let (e1, e2, e0) = (
        event(&r.values[5]),
        event(&r.values[7]),
        event(&r.values[11]),
    );
    // The first step goes to the event at the moment (the peak, the 64 MiB allocation).
    assert_eq!(e1, 1);
    assert_eq!(e2, e1 + 1);
    assert_eq!(e0 + 1, e1, "two steps back from the second");
    for (e, v) in [(e1, &r.values[5]), (e2, &r.values[7]), (e0, &r.values[11])] {
        assert_eq!(v["segments"], at(e), "the state after event {e}");
    }
    assert!(
        r.values[8]
            .as_str()
            .unwrap()
            .contains(&format!("after event #{e2} (")),
        "{}",
        r.values[8]
    );
    assert!(r.values[12].as_str().unwrap().starts_with("moment: "));
}

/// The flame graph's figures of a range `[a, b]` (ns since the trace's start) computed from the
/// trace's request stream: per trace stack, the bytes live at the range's high-water mark (all
/// events of an instant taken together, the first highest instant) or, with `leaked`, those
/// allocated in the range and still live at its end.
fn range_figures(
    stream: &vramtrace::model::RequestStream,
    start: u64,
    (a, b): (f64, f64),
    leaked: bool,
) -> std::collections::BTreeMap<u32, u64> {
    use vramtrace::model::RequestKind;
    // (birth, death, size, stack), ns since the start.
    let mut allocs: Vec<(f64, f64, u64, u32)> = Vec::new();
    let mut by_slot = std::collections::HashMap::new();
    for r in &stream.requests {
        let t = (r.time_ns - start) as f64;
        match r.kind {
            RequestKind::Alloc => {
                by_slot.insert(r.slot, allocs.len());
                allocs.push((t, f64::INFINITY, r.size, r.stack));
            }
            RequestKind::Free => allocs[by_slot.remove(&r.slot).unwrap()].1 = t,
            RequestKind::Attempt
            | RequestKind::EmptyCache
            | RequestKind::MemoryFraction
            | RequestKind::Order(_) => {}
        }
    }
    let alive = |x: &(f64, f64, u64, u32), t: f64| x.0 <= t && x.1 > t;
    let mut at = b;
    if !leaked {
        let live = |t: f64| {
            allocs
                .iter()
                .filter(|x| alive(x, t))
                .map(|x| x.2)
                .sum::<u64>()
        };
        let mut instants: Vec<f64> = allocs
            .iter()
            .flat_map(|x| [x.0, x.1])
            .filter(|&t| t > a && t <= b)
            .collect();
        instants.sort_by(f64::total_cmp);
        at = a;
        let mut best = live(a);
        for t in instants {
            if live(t) > best {
                (best, at) = (live(t), t);
            }
        }
    }
    let mut out = std::collections::BTreeMap::new();
    for x in &allocs {
        let counted = if leaked {
            x.0 >= a && x.0 <= b && alive(x, b)
        } else {
            alive(x, at)
        };
        if counted {
            *out.entry(x.3).or_insert(0) += x.2;
        }
    }
    out
}

#[test]
fn in_the_browser_a_range_drives_the_flame_graph() {
    use vramtrace::model::Model;
    let tmp = tempfile::tempdir().unwrap();
    let trace = python_trace(tmp.path(), false);
    let dir = report(&trace, &["--policy", "pytorch"]);
    let page = dir.path().join("index.html");
    let test = "in_the_browser_a_range_drives_the_flame_graph";
    // Page coordinates of 3.5 ms and 5.925 ms after the start (the first event) on the timeline:
    // after the activation is freed, and within the life of the last scratch buffer.
    let xy = "(() => { const {S, T} = window.vramtraceView; const c = document.getElementById('timeline'); \
              c.scrollIntoView({block: 'center'}); const r = c.getBoundingClientRect(); \
              const x = (t) => r.left + T.left + (t - S.v0) / (S.v1 - S.v0) * T.pw; \
              return [x(3.5e6), x(5.925e6), r.top + T.top + T.ph / 2]; })()";
    let Some(first) = browse(
        test,
        &page,
        &[wait("document.body.dataset.ready"), eval(xy)],
    ) else {
        return;
    };
    let p = first.values[1].clone();
    let mouse = |kind: &str, x: &serde_json::Value| serde_json::json!({"op": "mouse", "type": kind, "x": x, "y": p[2], "button": "left", "modifiers": 8});
    let figures = "(() => { const b = document.getElementById('icicle'); return [b.dataset.total, b.dataset.sites, document.getElementById('icicle-note').textContent]; })()";
    let r = browse(
        test,
        &page,
        &[
            wait("document.body.dataset.ready"),
            eval(xy),
            eval(figures),
            mouse("mousePressed", &p[0]),
            mouse("mouseMoved", &p[1]),
            mouse("mouseReleased", &p[1]),
            eval("document.getElementById('timeline').dataset.brush"),
            eval(figures),
            eval("(() => { const s = document.getElementById('range-mode'); s.value = 'leaked'; s.dispatchEvent(new Event('change')); })()"),
            eval(figures),
            eval("document.getElementById('range-clear').click()"),
            eval(figures),
        ],
    )
    .unwrap();
    r.assert_clean();
    let v = &r.values;
    let (a, b) = v[6].as_str().unwrap().split_once(',').unwrap();
    let range: (f64, f64) = (a.parse().unwrap(), b.parse().unwrap());
    assert!(
        (3.4e6..3.6e6).contains(&range.0) && (5.905e6..5.945e6).contains(&range.1),
        "{range:?}"
    );
    let t = vramtrace_format::Trace::open(&trace, Default::default()).unwrap();
    let start = t.events().next().unwrap().time_ns;
    let model = Model::from_events(t.events(), &t.metadata);
    // Trace stacks 1, 2, 3 are load_weights, forward and scratch (python_trace).
    let names = [(1u32, "load_weights"), (2, "forward"), (3, "scratch")];
    let check = |shown: &serde_json::Value, leaked: bool| {
        let expected = range_figures(&model.streams[0], start, range, leaked);
        let total: u64 = expected.values().sum();
        assert_eq!(shown[0].as_str().unwrap(), total.to_string(), "{shown}");
        let sites: std::collections::BTreeMap<String, u64> =
            serde_json::from_str(shown[1].as_str().unwrap()).unwrap();
        let by_name: std::collections::BTreeMap<u32, u64> = sites
            .iter()
            .map(|(k, &b)| {
                let id = names.iter().find(|(_, n)| k.ends_with(n)).unwrap().0;
                (id, b)
            })
            .collect();
        assert_eq!(by_name, expected, "{shown}");
        total
    };
    // The high-water mark of the range: the weight and one scratch buffer.
    assert_eq!(check(&v[7], false), 513 << 20);
    assert!(
        v[7][2]
            .as_str()
            .unwrap()
            .starts_with("The high-water mark of")
    );
    // Allocated in the range and live at its end: the last scratch buffer.
    assert_eq!(check(&v[9], true), 1 << 20);
    assert!(v[9][2].as_str().unwrap().starts_with("Allocated in"));
    // Back to the moment (the peak): the figures before the range.
    assert_eq!(v[11], v[2]);
    assert_ne!(v[7], v[2]);
}

#[test]
fn in_the_browser_hostile_frame_names_stay_text() {
    let tmp = tempfile::tempdir().unwrap();
    let trace = python_trace(tmp.path(), true);
    let dir = report(&trace, &["--policy", "pytorch"]);
    let Some(r) = browse(
        "in_the_browser_hostile_frame_names_stay_text",
        &dir.path().join("index.html"),
        &[
            wait("document.body.dataset.ready"),
            eval(
                "(() => { const s = document.getElementById('search'); s.value = 'script'; s.dispatchEvent(new Event('input')); })()",
            ),
            wait("document.getElementById('search-count').textContent"),
            eval("typeof window.__pwned"),
            eval(
                "document.querySelectorAll('script').length + document.querySelectorAll('img').length",
            ),
            eval("document.getElementById('sites').textContent"),
        ],
    ) else {
        return;
    };
    r.assert_clean();
    assert_eq!(r.values[3], "undefined");
    assert_eq!(r.values[4], 2, "only the page's two scripts, no image");
    assert!(
        r.values[5]
            .as_str()
            .unwrap()
            .contains("</script><script>window.__pwned=1</script>"),
        "the name shows as text: {}",
        r.values[5]
    );
}

#[test]
fn a_pytorch_snapshot_is_read_directly() {
    let snapshot = Path::new(env!("CARGO_MANIFEST_DIR")).join("../samples/snapshots/fp32.pickle");
    let dir = report(&snapshot, &["--policy", "pytorch"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("fp32.pickle"));
    // Its Python frames are on the page, named as the importer names them.
    assert!(
        html.contains("interop_snapshot.py:44 \\u003cmodule>"),
        "Python frames"
    );
    assert!(html.contains("\"mode\":\"single\""));
}

#[test]
fn timings_put_every_stage_on_stderr_in_milliseconds_in_order() {
    let snapshot = repo("samples/snapshots/fp32.pickle");
    let dir = tempfile::tempdir().unwrap();
    let out = vramtrace()
        .arg("report")
        .arg(&snapshot)
        .arg("-o")
        .arg(dir.path())
        .arg("--timings")
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    // Each line is `vramtrace: [  12.3 ms] stage`, its time never before the line above's
    // (the search's lines come from its own thread, printed as they happen).
    let stages: Vec<(f64, &str)> = err
        .lines()
        .map(|l| {
            let (at, stage) = l
                .strip_prefix("vramtrace: [")
                .and_then(|l| l.split_once(" ms] "))
                .unwrap_or_else(|| panic!("not a timing line: {l}"));
            (at.trim().parse().unwrap(), stage)
        })
        .collect();
    assert!(stages.windows(2).all(|w| w[0].0 <= w[1].0), "{err}");
    let at = |stage: &str| {
        stages
            .iter()
            .position(|(_, s)| *s == stage)
            .unwrap_or_else(|| panic!("no {stage:?} in {err}"))
    };
    assert!(at("unpickling the snapshot") < at("importing the snapshot"));
    assert!(at("importing the snapshot") < at("reading events"));
    assert!(at("reading events") < at("the header's search: started"));
    assert!(at("the header's search: started") < at("the header's search: done"));
    assert!(at("the header's search: done") < at("writing files"));
    assert_eq!(stages.last().unwrap().1, "done");
}

#[test]
fn two_traces_compare_on_one_page() {
    let tmp = tempfile::tempdir().unwrap();
    let other = python_trace(tmp.path(), false);
    let dir = report(&sample(), &["--compare", other.to_str().unwrap()]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("\"mode\":\"compare\""));
    assert!(html.contains("The two traces compared"));
    assert!(html.contains("py.vramtrace") && html.contains("synthetic-mlp.vramtrace"));
}

#[test]
fn a_directory_of_ranks_is_one_page_with_a_rank_selector() {
    let tmp = tempfile::tempdir().unwrap();
    let ranks = tmp.path().join("job");
    std::fs::create_dir(&ranks).unwrap();
    let one = python_trace(tmp.path(), false);
    for r in [0, 1, 10] {
        std::fs::copy(&one, ranks.join(format!("rank-{r}.vramtrace"))).unwrap();
    }
    let dir = report(&ranks, &["--policy", "pytorch"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("\"mode\":\"ranks\""));
    let (a, b, c) = (
        html.find("rank 0: <code>").unwrap(),
        html.find("rank 1: <code>").unwrap(),
        html.find("rank 2: <code>").unwrap(),
    );
    assert!(a < b && b < c);
    assert!(html[c..].starts_with("rank 2: <code>") && html.contains("rank-10.vramtrace"));
    // Equal ranks: the lowest sets the peak, the middle one is the median rank.
    assert!(
        html.contains("<p>Rank 0 sets the job's recorded peak (")
            && html.contains("imbalance 1.00x, the largest rank over the median rank, rank 1 ("),
        "the job's peak rank and imbalance"
    );
}

#[test]
fn an_empty_directory_is_one_line_and_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let out = vramtrace()
        .arg("report")
        .arg(tmp.path())
        .arg("-o")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("no .vramtrace, .pickle or .pkl file"), "{err}");
}

/// The report has one card per recorded out-of-memory error, with the story `summary` tells,
/// ending with the line to paste; a trace without one has none.
#[test]
fn the_report_tells_the_oom_story_summary_tells() {
    let capped = repo("samples/traces/h200-pressure/grow-native.vramtrace");
    let dir = report(&capped, &["--policy", "pytorch"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let at = html
        .find("<div class=\"oom-story\">")
        .expect("the story's card");
    let card = &html[at..at + html[at..].find("</div>").unwrap()];
    assert!(card.contains("not fragmentation"), "{card}");
    assert!(card.contains("under the same cap (4.00 GiB)"), "{card}");
    assert!(
        card.contains("paste      torch.cuda.set_per_process_memory_fraction(0.0290"),
        "{card}"
    );
    let dir = report(&sample(), &["--policy", "pytorch"]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(!html.contains("<div class=\"oom-story\">"));
}
