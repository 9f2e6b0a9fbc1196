//! What the integration tests share: where the repository's samples are, the binary, traces
//! read into request streams.

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use vramtrace::model::{Model, RequestStream};
use vramtrace_format::{
    Api, Event, Metadata, ReadOptions, Trace, TraceWriter, WriterOptions, synthetic,
};

/// `path` inside the repository.
pub fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path)
}

/// `vramtrace tune`'s search of the trace at `path` (the default context), and the answers of it.
pub fn answers_of(path: &Path) -> (vramtrace::tune::Tune, vramtrace::answers::Answers) {
    let trace = Trace::open(path, ReadOptions::default()).unwrap();
    let tune = vramtrace::tune::tune_trace(
        &trace,
        None,
        None,
        vramtrace::model::device::CUDA_CONTEXT_BYTES,
    )
    .unwrap()
    .unwrap();
    let answers = vramtrace::answers::Answers::of(&vramtrace::summary::Summary::of(&trace), &tune);
    (tune, answers)
}

/// The synthetic sample trace of the README.
pub fn sample() -> PathBuf {
    repo("samples/traces/synthetic-mlp.vramtrace")
}

/// The binary, run in the analyzer's folder (cargo's default for tests).
pub fn vramtrace() -> Command {
    Command::cargo_bin("vramtrace").unwrap()
}

/// The binary, run from the repository root so that sample paths read as in the README.
pub fn vramtrace_in_repo() -> Command {
    let mut c = vramtrace();
    c.current_dir(repo("."));
    c
}

/// The one request stream of a trace with a single process and device.
pub fn only_stream(path: &Path) -> RequestStream {
    let trace = Trace::open(path, ReadOptions::default()).unwrap();
    let mut model = Model::from_events(trace.events(), &trace.metadata);
    assert_eq!(model.streams.len(), 1, "{}", path.display());
    model.streams.remove(0)
}

/// A job of `ranks` ranks: the same training loop everywhere, `scaled` ranks with every buffer
/// `factor` times larger.
pub fn write_job(dir: &Path, job: &str, ranks: u32, scaled: &[u32], factor: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    (0..ranks)
        .map(|rank| {
            let mut s = synthetic::pytorch_like(30, 7);
            for (k, v) in [
                ("RANK", rank.to_string()),
                ("WORLD_SIZE", ranks.to_string()),
                ("TORCHELASTIC_RUN_ID", job.to_string()),
            ] {
                s.metadata.environment.push((k.to_string(), v));
            }
            let path = dir.join(format!("python3-{}.vramtrace", 1000 + rank));
            let file = std::fs::File::create(&path).unwrap();
            let mut w = TraceWriter::new(file, &s.metadata, WriterOptions::default()).unwrap();
            *w.tables_mut() = s.tables;
            for e in &mut s.events {
                if scaled.contains(&rank) {
                    e.size *= factor;
                }
                w.push(e).unwrap();
            }
            w.finish().unwrap();
            path
        })
        .collect()
}

/// A trace at `path` of `events` (API, address, size), each of process 1, 1 µs apart.
pub fn write_calls(path: &Path, metadata: &Metadata, events: &[(Api, u64, u64)]) {
    let file = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(file, metadata, WriterOptions::default()).unwrap();
    for (seq, &(api, address, size)) in (1..).zip(events) {
        let event = Event {
            seq,
            time_ns: seq * 1_000,
            pid: 1,
            address,
            size,
            ..Event::new(api)
        };
        w.push(&event).unwrap();
    }
    w.finish().unwrap();
}

/// Runs a `vramtrace` command and checks that it answered (exit 0) or refused in its own
/// words (exit 1): never a panic (101), a signal or a usage error.
pub fn assert_answers_or_refuses(command: &mut Command) {
    let out = command.output().unwrap();
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(1),
        "{command:?} exited {code:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Writes the trace at `path` again in chunks of 16 events and cuts the file at two thirds: an
/// incomplete trace whose first chunks are read.
pub fn cut_short(path: &Path) {
    let trace =
        vramtrace_format::Trace::open(path, vramtrace_format::ReadOptions::default()).unwrap();
    let options = WriterOptions {
        chunk_events: 16,
        ..WriterOptions::default()
    };
    let file = std::fs::File::create(path).unwrap();
    let mut w = TraceWriter::new(file, &trace.metadata, options).unwrap();
    *w.tables_mut() = trace.tables.clone();
    for e in trace.events() {
        w.push(&e).unwrap();
    }
    w.finish().unwrap();
    let whole = std::fs::read(path).unwrap();
    std::fs::write(path, &whole[..whole.len() * 2 / 3]).unwrap();
}

/// Whether Python can import `module`, for a test that needs it: without it the test is to say
/// so and pass (this prints the line), except under CI (`CI` set), where this fails the test.
pub fn python_has(module: &str, install: &str) -> bool {
    let found = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var_os("CI").is_none(),
            "{module} is missing ({install})"
        );
        eprintln!("skipped: {module} is missing ({install})");
    }
    found
}

/// A Python function `spark_session()`, for scripts to start with: PySpark in local mode on one
/// core, no web UI, one shuffle partition (the tables of the tests are small, and Spark's 200
/// default partitions cost more than the queries), the JVM's quick compiler alone and its
/// serial collector (a short run spends its time starting: the Spark test of `fleet_spark.rs`
/// took 22-32 s so against 39-42 s without, alternated on the loaded 2-core machine), errors
/// only in the log.
pub const SPARK_SESSION: &str = r#"
def spark_session():
    from pyspark.sql import SparkSession
    spark = (SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "1")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark
"#;
