//! The SQL of docs/fleet.md run by Spark: every view and query put into Spark's dialect by the
//! page's own table of replacements, run with PySpark in local mode (one session for them all)
//! on the export `fleet_sql.rs` checks against `info` and `replay`, and each answer checked to
//! be DuckDB's, row for row.
//!
//! It needs PySpark with a Java runtime, and DuckDB (`.ci/run` installs them, pinned). Without
//! them the test says so and passes, except under CI (`CI` set), where it fails.

use crate::fleet_sql::{answers, doc_sql, fleet};
use crate::util::{python_has, repo};
use std::collections::BTreeMap;

/// The header of docs/fleet.md's table of replacements.
const TABLE: &str = "| DuckDB | Spark SQL | why |\n|---|---|---|\n";

/// A table cell's code: `x` or ``` `` x `` ```.
fn code(cell: &str) -> String {
    let cell = cell.trim();
    let inner = match cell.strip_prefix("``") {
        Some(rest) => rest.strip_suffix("``").map(str::trim),
        None => cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')),
    };
    inner
        .unwrap_or_else(|| panic!("docs/fleet.md: not code: {cell}"))
        .to_string()
}

/// docs/fleet.md's replacements, DuckDB's text and Spark's, in the table's order.
fn spark_dialect() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(repo("docs/fleet.md")).unwrap();
    let (_, table) = doc
        .split_once(TABLE)
        .expect("docs/fleet.md has the table of Spark's dialect");
    table
        .lines()
        .take_while(|l| l.starts_with('|'))
        .map(|row| {
            let cells: Vec<&str> = row.split('|').collect();
            (code(cells[1]), code(cells[2]))
        })
        .collect()
}

/// `sql` with every replacement applied; `used` counts each one's matches. In a pattern `…`
/// stands for any text within one line, carried over to where the replacement has its `…`.
fn to_spark(sql: &str, rules: &[(String, String)], used: &mut [usize]) -> String {
    let mut sql = sql.to_string();
    for ((from, to), used) in rules.iter().zip(used.iter_mut()) {
        let (Some((head, tail)), Some((to_head, to_tail))) =
            (from.split_once('…'), to.split_once('…'))
        else {
            *used += sql.matches(from.as_str()).count();
            sql = sql.replace(from.as_str(), to);
            continue;
        };
        let mut out = String::new();
        let mut rest = sql.as_str();
        while let Some(at) = rest.find(head) {
            let after = &rest[at + head.len()..];
            let line = &after[..after.find('\n').unwrap_or(after.len())];
            let Some(end) = line.find(tail) else {
                out.push_str(&rest[..at + head.len()]);
                rest = after;
                continue;
            };
            out.push_str(&rest[..at]);
            out.push_str(&format!("{to_head}{}{to_tail}", &after[..end]));
            rest = &after[end + tail.len()..];
            *used += 1;
        }
        out.push_str(rest);
        sql = out;
    }
    sql
}

#[test]
fn the_dialect_table_replaces_what_it_says() {
    let rules = spark_dialect();
    let mut used = vec![0; rules.len()];
    let sql = "CREATE VIEW t AS SELECT * FROM '/x/t/*.parquet';\nSELECT s.frame_ids[1] FROM t";
    assert_eq!(
        to_spark(sql, &rules, &mut used),
        "CREATE TEMPORARY VIEW t AS SELECT * FROM parquet.`/x/t/*.parquet`;\n\
         SELECT s.frame_ids[0] FROM t"
    );
    assert_eq!(used, [1, 1, 1]);
}

#[test]
fn spark_answers_every_documented_query_as_duckdb_does() {
    if !python_has("pyspark", "pip install pyspark; it needs a Java runtime")
        || !python_has("duckdb", "pip install duckdb")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (_, export) = fleet(dir.path());
    let (views, queries) = doc_sql(&export);
    let rules = spark_dialect();
    let mut used = vec![0; rules.len()];
    let spark_views = to_spark(&views, &rules, &mut used);
    let spark_queries: BTreeMap<String, String> = queries
        .iter()
        .map(|(name, sql)| (name.clone(), to_spark(sql, &rules, &mut used)))
        .collect();
    for ((from, _), n) in rules.iter().zip(&used) {
        assert!(*n > 0, "docs/fleet.md: {from} appears in no SQL block");
    }
    let duckdb = answers("duckdb", &views, &queries);
    let spark = answers("spark", &spark_views, &spark_queries);
    assert_eq!(
        spark.keys().collect::<Vec<_>>(),
        duckdb.keys().collect::<Vec<_>>()
    );
    for (name, rows) in &duckdb {
        assert!(!rows.is_empty(), "{name}: no rows to compare");
        assert_eq!(&spark[name], rows, "{name}");
    }
}
