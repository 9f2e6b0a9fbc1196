//! The Parquet export read by each reader docs/fleet.md names: pyarrow, pandas, Polars, DuckDB
//! and Spark. Each reads every table of an
//! export of a generated three-rank job and two bundled samples; the row counts and a few
//! values per trace are checked against `vramtrace info --json` of the trace itself.
//!
//! The readers are Python packages (`.ci/run` installs them, pinned; PySpark with a Java
//! runtime). Without one its test says so and passes, except under CI (`CI` set), where it
//! fails.

use crate::fleet_sql::vramtrace;
use crate::util::{SPARK_SESSION, python_has, repo, write_job};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Reads each table with the reader named by argv[1] (after [`SPARK_SESSION`]) into rows of plain Python values, then
/// prints per table its row count and, per trace, what is compared with `info --json`.
const SCRIPT: &str = r#"
import json, sys
reader, export = sys.argv[1], sys.argv[2]
COLUMNS = {
    "traces": ["trace_id", "path", "events", "stacks", "rank"],
    "events": ["trace_id", "seq", "api", "size"],
    "stacks": ["trace_id", "stack_id", "depth"],
    "frames": ["trace_id", "frame_id", "kind"],
    "modules": ["trace_id", "mapping_id", "filename"],
    "policy_results": ["trace_id", "policy", "peak_reserved"],
}
def glob(table):
    return f"{export}/{table}/*.parquet"
if reader == "pyarrow":
    import pyarrow.parquet as pq
    def read(table, cols):
        return pq.read_table(f"{export}/{table}", columns=cols).to_pylist()
elif reader == "pandas":
    import pandas as pd
    def read(table, cols):
        df = pd.read_parquet(f"{export}/{table}", columns=cols)
        return [{c: (None if pd.isna(v) else v) if not isinstance(v, list) else v
                 for c, v in zip(cols, row)} for row in df.itertuples(index=False)]
elif reader == "polars":
    import polars as pl
    def read(table, cols):
        return pl.read_parquet(glob(table), columns=cols).to_dicts()
elif reader == "duckdb":
    import duckdb
    con = duckdb.connect()
    def read(table, cols):
        rows = con.sql(f"SELECT {', '.join(cols)} FROM read_parquet('{glob(table)}')").fetchall()
        return [dict(zip(cols, r)) for r in rows]
elif reader == "spark":
    spark = spark_session()
    def read(table, cols):
        return [r.asDict() for r in spark.read.parquet(f"{export}/{table}").select(*cols).collect()]
out = {}
for table, cols in COLUMNS.items():
    rows = read(table, cols)
    per = {}
    for r in rows:
        p = per.setdefault(str(r["trace_id"]), {"rows": 0})
        p["rows"] += 1
        if table == "traces":
            p.update(path=r["path"], events=int(r["events"]), stacks=int(r["stacks"]),
                     rank=None if r["rank"] is None else int(r["rank"]))
        elif table == "events":
            api = p.setdefault("by_api", {})
            api[str(r["api"])] = api.get(str(r["api"]), 0) + 1
            p["bytes"] = p.get("bytes", 0) + int(r["size"])
    out[table] = {"rows": len(rows), "per_trace": per}
print(json.dumps(out))
"#;

/// The traces exported: a job of three ranks and two samples (one with native stacks and
/// modules), and the export's directory.
fn export(dir: &Path) -> (Vec<PathBuf>, PathBuf) {
    let mut traces = write_job(&dir.join("job"), "job-r", 3, &[1], 2);
    traces.push(repo("samples/traces/synthetic-mlp.vramtrace"));
    traces.push(repo("samples/traces/torch-mlp-native.vramtrace"));
    let export = dir.join("fleet");
    let mut args: Vec<String> = vec!["export".into(), dir.join("job").display().to_string()];
    args.extend(traces[3..].iter().map(|p| p.display().to_string()));
    args.extend(["--to", "parquet", "--policy", "pytorch,cuda-malloc", "-o"].map(String::from));
    args.push(export.display().to_string());
    crate::util::vramtrace().args(&args).assert().success();
    (traces, export)
}

/// Every table of an export read by `reader`, checked against `info --json` of each trace.
fn reads_every_table(reader: &str, module: &str) {
    if !python_has(module, &format!("pip install {module}")) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (traces, export) = export(dir.path());
    let out = Command::new("python3")
        .args(["-c", &[SPARK_SESSION, SCRIPT].concat(), reader])
        .arg(&export)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{reader}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let per = |table: &str| got[table]["per_trace"].as_object().unwrap().clone();
    let by_path: BTreeMap<String, String> = per("traces")
        .iter()
        .map(|(id, t)| (t["path"].as_str().unwrap().to_string(), id.clone()))
        .collect();
    assert_eq!(by_path.len(), traces.len(), "{reader}: {by_path:?}");
    let mut events = 0;
    for (k, path) in traces.iter().enumerate() {
        let p = path.display().to_string();
        let info = vramtrace(&["info", "--json", &p]);
        let id = &by_path[&p];
        let trace = &per("traces")[id];
        let ev = &per("events")[id];
        assert_eq!(trace["events"], info["events"], "{reader}: {p}");
        assert_eq!(ev["rows"], info["events"], "{reader}: {p}");
        assert_eq!(ev["by_api"], info["by_api"], "{reader}: {p}");
        assert_eq!(per("stacks")[id]["rows"], info["stacks"], "{reader}: {p}");
        assert_eq!(trace["stacks"], info["stacks"], "{reader}: {p}");
        let modules = per("modules")
            .get(id)
            .map_or(0, |m| m["rows"].as_u64().unwrap());
        assert_eq!(modules, info["modules"].as_u64().unwrap(), "{reader}: {p}");
        assert_eq!(per("policy_results")[id]["rows"], 2, "{reader}: {p}");
        let rank = if k < 3 { Value::from(k) } else { Value::Null };
        assert_eq!(trace["rank"], rank, "{reader}: {p}");
        events += info["events"].as_u64().unwrap();
    }
    assert_eq!(got["events"]["rows"], events, "{reader}");
    // Rank 1 of the job has every buffer twice the size of rank 0's.
    let bytes = |k: usize| {
        per("events")[&by_path[&traces[k].display().to_string()]]["bytes"]
            .as_u64()
            .unwrap()
    };
    assert_eq!(bytes(1), 2 * bytes(0), "{reader}");
    assert!(got["frames"]["rows"].as_u64().unwrap() > 0, "{reader}");
}

#[test]
fn pyarrow_reads_every_table() {
    reads_every_table("pyarrow", "pyarrow");
}

#[test]
fn pandas_reads_every_table() {
    reads_every_table("pandas", "pandas");
}

#[test]
fn polars_reads_every_table() {
    reads_every_table("polars", "polars");
}

#[test]
fn duckdb_reads_every_table() {
    reads_every_table("duckdb", "duckdb");
}

/// PySpark also needs a Java runtime, which `.ci/run` installs with it.
#[test]
fn spark_reads_every_table() {
    reads_every_table("spark", "pyspark");
}
