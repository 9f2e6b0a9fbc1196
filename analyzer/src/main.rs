//! The `vramtrace` binary: parse the command line, dispatch, map errors to exit codes.
//!
//! Exit codes: 0 success, 1 failure (one line on stderr naming the file or argument), 2 bad
//! usage (clap's message).

mod cli;
mod cmd_device_replay;
mod cmd_diff;
mod cmd_export;
mod cmd_export_parquet;
mod cmd_fit;
mod cmd_import;
mod cmd_info;
mod cmd_record;
mod cmd_replay;
mod cmd_report;
mod cmd_summary;
mod find_preload;
mod load;
mod output;

use clap::Parser;
use cli::{Cli, Command, ExportFormat};
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    let result = match cli.command {
        Command::Info {
            trace,
            json,
            salvage,
        } => cmd_info::run(&trace, json, salvage),
        Command::Summary {
            trace,
            json,
            salvage,
        } => cmd_summary::run(&trace, json, salvage),
        Command::Diff { a, b, json } => cmd_diff::run(&a, &b, json),
        Command::Replay {
            trace,
            json,
            on_device: true,
            ..
        } => cmd_device_replay::run(trace.as_deref(), json),
        Command::Replay {
            trace,
            policy,
            capacity,
            json,
            csv,
            list_policies,
            on_device: false,
        } => cmd_replay::run(
            trace.as_deref(),
            &policy.0,
            capacity,
            json,
            csv,
            list_policies,
        ),
        Command::Fit {
            trace,
            policy,
            json,
        } => cmd_fit::run(&trace, &policy.0, json),
        Command::Import { snapshot, output } => cmd_import::run(&snapshot, &output),
        Command::Export {
            traces,
            to: ExportFormat::Parquet,
            output,
            salvage,
            policy,
            fit,
        } => cmd_export_parquet::run(&traces, &output, salvage, &policy.0, fit),
        Command::Export {
            traces,
            to,
            output,
            salvage,
            ..
        } => cmd_export::run(&traces, to, &output, salvage),
        Command::Record {
            output,
            requests,
            preload,
            stacks,
            max_depth,
            command,
        } => cmd_record::run(cmd_record::Options {
            output,
            requests,
            preload,
            stacks,
            max_depth,
            command,
        }),
        Command::Report {
            trace,
            out,
            policy,
            capacity,
            no_symbolize,
        } => cmd_report::run(&cmd_report::Options {
            trace,
            out,
            policies: policy.0,
            capacity,
            symbolize: !no_symbolize,
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One line: the context chain joined, most general first.
            let chain: Vec<String> = e.chain().map(ToString::to_string).collect();
            eprintln!("vramtrace: error: {}", chain.join(": "));
            ExitCode::from(1)
        }
    }
}
