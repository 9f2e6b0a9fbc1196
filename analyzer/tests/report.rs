//! `vramtrace report` as users meet it: the files it writes render, hostile trace strings stay
//! text, the page is self-contained and opens in a browser, errors are one line.

use crate::util::{sample, vramtrace};
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
    let dir = report(&sample(), &[]);
    let files = svgs(dir.path());
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for expected in [
        "memory.svg",
        "policies.svg",
        "fragmentation.svg",
        "live-at-peak.svg",
        "timeline.svg",
        "sizes.svg",
        "lifetimes.svg",
        "address-map-pytorch.svg",
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
    // Every chart is also inline in the page.
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert_eq!(html.matches("<svg ").count(), files.len());
}

#[test]
fn the_page_is_self_contained() {
    let dir = report(&sample(), &[]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let lower = html.to_lowercase();
    for banned in [
        "<script",
        "src=\"http",
        "href=\"http",
        "@import",
        "url(",
        "<link",
    ] {
        assert!(!lower.contains(banned), "the page contains {banned}");
    }
    assert!(html.contains("capture level: <b>request"));
    assert!(html.contains("lower bound"));
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
    let dir = report(&trace, &[]);
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(!html.to_lowercase().contains("<script"));
    assert!(!html.contains("<b>.so") && !html.contains("<i>"));
    assert!(html.contains("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;q&#39;"));
    assert!(html.contains("lib\u{fffd}\u{fffd}&lt;b&gt;.so+0x100"));
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

#[test]
fn policies_can_be_chosen() {
    let dir = report(
        &sample(),
        &["--policy", "pytorch,cuda-malloc", "--capacity", "2GiB"],
    );
    let names: Vec<String> = svgs(dir.path())
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.contains(&"address-map-pytorch.svg".to_string()));
    assert!(names.contains(&"address-map-cuda-malloc.svg".to_string()));
    assert!(!names.iter().any(|n| n.contains("expandable")));
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("capacity 2.00 GiB") || html.contains("2.00 GiB"));
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

#[test]
fn the_page_renders_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!(
            "SKIPPED the_page_renders_in_headless_chromium: no chromium binary on PATH \
             (install Debian's `chromium`, or set CHROMIUM=/path/to/chrome)"
        );
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
    let dir = report(&path, &[]);
    for f in [
        "p1-gpu0-memory.svg",
        "p2-gpu1-memory.svg",
        "p1-gpu0-policies.svg",
    ] {
        assert!(dir.path().join(f).is_file(), "{f}");
    }
    let html = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    assert!(html.contains("href=\"#section-1\">process 2, GPU 1</a>"));
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
        let out = report(&sample, &[]);
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
