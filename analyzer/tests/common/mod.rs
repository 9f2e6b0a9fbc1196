//! Inputs several tests share.

use std::path::{Path, PathBuf};
use vramtrace_format::{TraceWriter, WriterOptions, synthetic};

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
