//! The DuckDB queries of `docs/fleet.md`, run as written on a Parquet export of two generated
//! multi-rank jobs and the bundled samples, their answers checked against `vramtrace info
//! --json`, `vramtrace replay --json` and the library's own stack naming.
//!
//! It needs DuckDB's Python package (`pip install duckdb`; `.ci/run` installs it). Without it
//! the test says so and passes, except under CI (`CI` set), where it fails.

use crate::util::{SPARK_SESSION, python_has, write_job};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use vramtrace::interop::parquet::trace_id;
use vramtrace::job::rank_of;
use vramtrace::symbolize::NoFiles;
use vramtrace::symbolize::StackNames;
use vramtrace_format::{Op, ReadOptions, Trace};

const POLICIES: &str = "pytorch,pytorch-expandable,pytorch:max_split_size_mb=128,cuda-malloc";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `vramtrace ARGS`'s JSON output; fails the test when it fails.
pub(crate) fn vramtrace(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_vramtrace"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "vramtrace {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

/// The SQL blocks of docs/fleet.md: the views, and the queries by their `-- query:` name.
pub(crate) fn doc_sql(export: &Path) -> (String, BTreeMap<String, String>) {
    let doc = std::fs::read_to_string(root().join("docs/fleet.md")).unwrap();
    let mut views = String::new();
    let mut queries = BTreeMap::new();
    for block in doc.split("```sql\n").skip(1) {
        let sql = block.split("```").next().unwrap();
        match sql.strip_prefix("-- query: ") {
            Some(rest) => {
                let (name, body) = rest.split_once('\n').unwrap();
                queries.insert(name.trim().to_string(), body.to_string());
            }
            None => views.push_str(&sql.replace("'fleet/", &format!("'{}/", export.display()))),
        }
    }
    (views, queries)
}

/// Runs the queries with `engine`, `duckdb` or `spark` (PySpark in local mode, the views and
/// queries already in Spark's dialect); each answer is a list of rows (column name → value).
pub(crate) fn answers(
    engine: &str,
    views: &str,
    queries: &BTreeMap<String, String>,
) -> BTreeMap<String, Vec<Value>> {
    let script = r#"
import json, sys
req = json.load(sys.stdin)
if sys.argv[1] == "duckdb":
    import duckdb
    con = duckdb.connect()
    con.execute(req["views"])
    def query(sql):
        cur = con.execute(sql)
        return [d[0] for d in cur.description], cur.fetchall()
else:
    spark = spark_session()
    for view in req["views"].split(";"):
        if view.strip():
            spark.sql(view)
    def query(sql):
        df = spark.sql(sql.strip().rstrip(";"))
        return df.columns, [tuple(r) for r in df.collect()]
out = {}
for name, sql in req["queries"].items():
    cols, rows = query(sql)
    out[name] = [dict(zip(cols, row)) for row in rows]
json.dump(out, sys.stdout, default=str)
"#;
    let mut child = Command::new("python3")
        .args(["-c", &[SPARK_SESSION, script].concat(), engine])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let request = json!({ "views": views, "queries": queries });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{engine}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The traces of the fleet the queries run on (two generated multi-rank jobs, job-a with rank 2
/// twice as large, and every bundled sample) exported to Parquet under `dir` with
/// [`POLICIES`]: the traces, and the export's directory.
pub(crate) fn fleet(dir: &Path) -> (Vec<PathBuf>, PathBuf) {
    let mut files = write_job(&dir.join("job-a"), "job-a", 4, &[2], 2);
    files.extend(write_job(&dir.join("job-b"), "job-b", 2, &[], 1));
    let samples = root().join("samples/traces");
    let mut sample_files: Vec<PathBuf> = std::fs::read_dir(&samples)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "vramtrace"))
        .collect();
    sample_files.sort();
    files.extend(sample_files.iter().cloned());

    let export = dir.join("fleet");
    let mut args: Vec<String> = vec!["export".into()];
    args.push(dir.join("job-a").display().to_string());
    args.push(dir.join("job-b").display().to_string());
    args.extend(sample_files.iter().map(|p| p.display().to_string()));
    args.extend(
        ["--to", "parquet", "--policy", POLICIES, "-o"]
            .map(String::from)
            .into_iter()
            .chain([export.display().to_string()]),
    );
    crate::util::vramtrace().args(&args).assert().success();
    (files, export)
}

struct Input {
    path: PathBuf,
    trace_id: String,
    /// `job_id`, else the trace id.
    job: String,
    rank: Option<u32>,
    trace: Trace,
}

fn input(path: &Path) -> Input {
    let bytes = std::fs::read(path).unwrap();
    let trace = Trace::from_bytes(&bytes, ReadOptions::default()).unwrap();
    let id = trace_id(&bytes);
    let job = vramtrace::job::job_id_of(&trace.metadata).unwrap_or_else(|| id.clone());
    Input {
        path: path.to_path_buf(),
        trace_id: id,
        job,
        rank: rank_of(&trace.metadata),
        trace,
    }
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| panic!("not an integer: {v}"))
}

#[test]
fn the_documented_queries_answer_what_info_and_replay_say() {
    if !python_has("duckdb", "pip install duckdb") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (files, export) = fleet(dir.path());
    let (views, queries) = doc_sql(&export);
    assert_eq!(
        queries.keys().map(String::as_str).collect::<Vec<_>>(),
        [
            "calls_per_api",
            "outside_by_library",
            "rank_outliers",
            "reserved_over_allocated",
            "setting_per_job",
            "top_sites"
        ]
    );
    let answers = answers("duckdb", &views, &queries);
    let inputs: Vec<Input> = files.iter().map(|p| input(p)).collect();

    // calls_per_api = info --json's by_api, trace by trace.
    for i in &inputs {
        let path = i.path.display().to_string();
        let info = vramtrace(&["info", "--json", &path]);
        let from_sql: BTreeMap<String, u64> = answers["calls_per_api"]
            .iter()
            .filter(|r| r["path"] == path.as_str())
            .map(|r| (r["api"].as_str().unwrap().to_string(), u(&r["calls"])))
            .collect();
        let from_info: BTreeMap<String, u64> = info["by_api"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), u(v)))
            .collect();
        assert_eq!(from_sql, from_info, "{path}");
    }

    // outside_by_library = summary --json's, group by group (the bundled requests-level
    // samples hold the six cuBLAS workspaces; nvcc-static its own plain allocations).
    let mut expected = Vec::new();
    for i in &inputs {
        let path = i.path.display().to_string();
        let summary = vramtrace(&["summary", "--json", &path]);
        for g in summary["groups"].as_array().unwrap() {
            let rows: Vec<(String, u64, i64, String, u64, u64)> = g["outside_by_library"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| {
                    (
                        path.clone(),
                        u(&g["pid"]),
                        g["device"].as_i64().unwrap(),
                        m["library"].as_str().unwrap().to_string(),
                        u(&m["allocations"]),
                        u(&m["bytes"]),
                    )
                })
                .collect();
            expected.extend(rows);
        }
    }
    expected.sort_by(|a, b| {
        (&a.0, a.1, a.2)
            .cmp(&(&b.0, b.1, b.2))
            .then(b.5.cmp(&a.5))
            .then(a.3.cmp(&b.3))
    });
    let got: Vec<(String, u64, i64, String, u64, u64)> = answers["outside_by_library"]
        .iter()
        .map(|r| {
            (
                r["path"].as_str().unwrap().to_string(),
                u(&r["pid"]),
                r["device"].as_i64().unwrap(),
                r["library"].as_str().unwrap().to_string(),
                u(&r["allocations"]),
                u(&r["bytes"]),
            )
        })
        .collect();
    assert!(expected.len() >= 3, "{expected:?}");
    assert_eq!(got, expected);

    // Per trace and policy, replay --json's totals.
    let mut replays: HashMap<String, Vec<Value>> = HashMap::new();
    for i in &inputs {
        let path = i.path.display().to_string();
        let r = vramtrace(&["replay", "--json", "--policy", POLICIES, &path]);
        replays.insert(
            i.trace_id.clone(),
            r["policies"].as_array().unwrap().clone(),
        );
    }
    let jobs: BTreeSet<&str> = inputs.iter().map(|i| i.job.as_str()).collect();
    fn of_job<'a>(inputs: &'a [Input], job: &'a str) -> impl Iterator<Item = &'a Input> {
        inputs.iter().filter(move |i| i.job == job)
    }

    // reserved_over_allocated: jobs whose summed pytorch reserved is > 1.3x allocated.
    let mut expected = Vec::new();
    for &job in &jobs {
        let (mut reserved, mut allocated) = (0, 0);
        for i in of_job(&inputs, job) {
            let p = &replays[&i.trace_id][0];
            assert_eq!(p["name"], "pytorch");
            reserved += u(&p["peak_reserved"]);
            allocated += u(&p["peak_allocated"]);
        }
        if allocated > 0 && reserved as f64 > 1.3 * allocated as f64 {
            expected.push((job.to_string(), reserved, allocated));
        }
    }
    expected.sort_by(|a, b| {
        let o = |x: &(String, u64, u64)| x.1 as f64 / x.2 as f64;
        o(b).total_cmp(&o(a)).then(a.0.cmp(&b.0))
    });
    let got: Vec<(String, u64, u64)> = answers["reserved_over_allocated"]
        .iter()
        .map(|r| {
            (
                r["job"].as_str().unwrap().to_string(),
                u(&r["reserved"]),
                u(&r["allocated"]),
            )
        })
        .collect();
    assert!(!expected.is_empty(), "the samples include wasteful jobs");
    assert_eq!(got, expected);

    // setting_per_job: least max-over-ranks reserved without OOM, then fewest driver calls.
    let mut expected = Vec::new();
    for &job in &jobs {
        let mut best: Option<(u64, u64, String)> = None;
        for (p, spec) in POLICIES.split(',').enumerate() {
            if !spec.starts_with("pytorch") {
                continue;
            }
            let rows: Vec<&Value> = of_job(&inputs, job)
                .map(|i| &replays[&i.trace_id][p])
                .collect();
            if rows.iter().any(|r| !r["oom"].is_null()) {
                continue;
            }
            let peak = rows.iter().map(|r| u(&r["peak_reserved"])).max().unwrap();
            let calls = rows
                .iter()
                .map(|r| u(&r["device_allocs"]) + u(&r["device_frees"]))
                .sum();
            let candidate = (peak, calls, spec.to_string());
            if best.as_ref().is_none_or(|b| candidate < *b) {
                best = Some(candidate);
            }
        }
        if let Some((peak, _, spec)) = best {
            expected.push((job.to_string(), spec, peak));
        }
    }
    let got: Vec<(String, String, u64)> = answers["setting_per_job"]
        .iter()
        .map(|r| {
            (
                r["job"].as_str().unwrap().to_string(),
                r["policy"].as_str().unwrap().to_string(),
                u(&r["peak_reserved"]),
            )
        })
        .collect();
    assert_eq!(got, expected);

    // rank_outliers: the rank whose buffers were doubled, its peak as replay's requested peak.
    let outliers = &answers["rank_outliers"];
    assert_eq!(outliers.len(), 1, "{outliers:?}");
    assert_eq!(
        (outliers[0]["job"].as_str(), u(&outliers[0]["rank"])),
        (Some("job-a"), 2)
    );
    let rank2 = inputs
        .iter()
        .find(|i| i.job == "job-a" && i.rank == Some(2))
        .unwrap();
    assert_eq!(
        u(&outliers[0]["peak"]),
        u(&replays[&rank2.trace_id][0]["peak_requested"])
    );

    // top_sites: bytes allocated per innermost frame, named as `summary` names frames.
    let mut sites: BTreeMap<String, (BTreeSet<String>, u64, u64)> = BTreeMap::new();
    for i in &inputs {
        let mut files = NoFiles;
        let names = StackNames::new(&i.trace.tables, &mut files);
        let mut first: HashMap<u32, Option<String>> = HashMap::new();
        for e in i.trace.events() {
            if e.api.op() != Op::Alloc || !e.succeeded() {
                continue;
            }
            let name = first
                .entry(e.stack)
                .or_insert_with(|| names.frames(e.stack).into_iter().next());
            let Some(name) = name.clone() else {
                continue;
            };
            let site = sites.entry(name).or_default();
            site.0.insert(i.job.clone());
            site.1 += 1;
            site.2 += e.size;
        }
    }
    let mut expected: Vec<(String, u64, u64, u64)> = sites
        .into_iter()
        .map(|(name, (jobs, n, b))| (name, jobs.len() as u64, n, b))
        .collect();
    expected.sort_by(|a, b| b.3.cmp(&a.3).then(a.0.cmp(&b.0)));
    expected.truncate(20);
    let got: Vec<(String, u64, u64, u64)> = answers["top_sites"]
        .iter()
        .map(|r| {
            (
                r["site"].as_str().unwrap().to_string(),
                u(&r["jobs"]),
                u(&r["allocations"]),
                u(&r["bytes"]),
            )
        })
        .collect();
    assert_eq!(got.len(), 20);
    assert_eq!(got, expected);
}
