//! The HTML page: one self-contained file that opens from disk (inline CSS, inline script, the
//! data embedded as JSON; no network, no CDN).
//!
//! The facts, the answers and the policy table are written here as HTML, every trace string
//! escaped with [`html`]; the interactive views (timeline with minimap, flame graph, allocator
//! state, sortable tables) are drawn by `assets/page.js` from [`super::page_data`].
//!
//! Why hand-written canvas and DOM code rather than a charting library: the views need a
//! stacked per-allocation polygon chart with hit testing, an icicle with click-to-zoom and a
//! segment map, which no small library provides as a whole (memory_viz itself is d3 plus its own
//! drawing code); d3 alone would add some 280 KB to every page and still leave the drawing to
//! us. About 700 lines of plain canvas and DOM code do what is needed and keep the page free of
//! third-party code.

use super::charts::Rendered;
use super::charts::style;
use super::data::{ReportData, Section};
use super::escape::html;
use super::job::{JobRank, ranks_table};
use super::page_data::{Run, script_json};
use crate::replay::recorded_refusals_note;
use crate::symbolize::short_frame;
use crate::tune::Grid;
use crate::units::{bytes, count, duration};
use serde::Serialize;
use std::fmt::Write as _;

const CSS: &str = include_str!("assets/page.css");
const SCRIPT: &str = include_str!("assets/page.js");

/// How the page's traces relate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// One trace.
    Single,
    /// `--compare`: the first trace against the second.
    Compare,
    /// The per-rank traces of one job.
    Ranks,
}

/// One trace on the page: its aggregated data and what the script draws from.
pub struct PageRun<'a> {
    pub data: &'a ReportData,
    pub run: &'a Run,
}

#[derive(Serialize)]
struct Embedded<'a> {
    mode: Mode,
    runs: Vec<&'a Run>,
}

/// The whole page; `charts` are the SVG files written beside it, if any. With [`Mode::Ranks`],
/// `job` lists every rank of the job, and `runs` are the reports of those it marks detailed,
/// in the same order.
pub fn html_page(runs: &[PageRun], mode: Mode, charts: &[Rendered], job: &[JobRank]) -> String {
    let first = runs
        .first()
        .map(|r| r.data.trace.file.as_str())
        .unwrap_or("");
    let mut s = String::with_capacity(1 << 20);
    let title = match mode {
        Mode::Compare if runs.len() > 1 => format!("{first} against {}", runs[1].data.trace.file),
        Mode::Ranks => format!("{} ranks, {first} …", job.len().max(runs.len())),
        _ => first.to_string(),
    };
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>vramtrace report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        html(&title)
    );
    let _ = writeln!(
        s,
        "<h1>GPU memory report: <code>{}</code></h1>",
        html(&title)
    );
    if mode == Mode::Ranks && !job.is_empty() {
        ranks_table(&mut s, job);
    }
    let mut detailed = job.iter().filter(|r| r.detailed);
    for (i, r) in runs.iter().enumerate() {
        // Ranks of one job: the first one's facts open, the others folded.
        let fold = mode == Mode::Ranks || (mode == Mode::Compare && i > 0);
        if fold {
            let _ = writeln!(
                s,
                "<details{}><summary>{}<code>{}</code></summary>",
                if i == 0 { " open" } else { "" },
                if mode == Mode::Ranks {
                    format!("rank {}: ", detailed.next().map_or(i as u32, |r| r.rank))
                } else {
                    String::new()
                },
                html(&r.data.trace.file)
            );
        } else if mode == Mode::Compare {
            let _ = writeln!(s, "<h2>{}</h2>", html(&r.data.trace.file));
        }
        trace_facts(&mut s, r.data);
        if fold {
            s.push_str("</details>\n");
        }
    }
    s.push_str(GLOSSARY);
    s.push_str(VIEWS);
    s.push_str("<h2>Policy comparison</h2>\n");
    for r in runs {
        let start_ns = r.data.buckets.map_or(0, |b| b.start_ns);
        for x in &r.data.sections {
            if runs.len() > 1 || r.data.sections.len() > 1 {
                let _ = writeln!(
                    s,
                    "<h3><code>{}</code>, {}</h3>",
                    html(&r.data.trace.file),
                    html(&x.label())
                );
            }
            summary_table(&mut s, x, start_ns);
        }
    }
    if mode == Mode::Compare && runs.len() > 1 {
        s.push_str(COMPARE);
    }
    let _ = write!(
        s,
        "<footer>Made by vramtrace {} from <code>{}</code>{}.",
        env!("CARGO_PKG_VERSION"),
        html(first),
        if runs.iter().all(|r| r.data.trace.symbolized) {
            ""
        } else {
            ", without symbolization"
        }
    );
    if !charts.is_empty() {
        s.push_str(" The charts as SVG, beside this page:<ul>");
        for c in charts {
            let _ = write!(
                s,
                "<li><a href=\"{}\">{}</a>: {}</li>",
                html(&c.file),
                html(&c.file),
                html(c.caption)
            );
        }
        s.push_str("</ul>");
    }
    s.push_str("</footer>\n</main>\n<div id=\"tooltip\"></div>\n");
    let embedded = Embedded {
        mode,
        runs: runs.iter().map(|r| r.run).collect(),
    };
    let _ = write!(
        s,
        "<script type=\"application/json\" id=\"vramtrace-data\">{}</script>\n<script>{SCRIPT}</script>\n",
        script_json(&embedded)
    );
    s.push_str("</body>\n</html>\n");
    s
}

/// The interactive part, filled by the script.
const VIEWS: &str = r#"<div class="controls">
<label>trace <select id="run-select"></select></label>
<label>process and device <select id="section-select"></select></label>
<label>search frames <input id="search" type="search" placeholder="function, file or module"></label>
<span id="search-count" class="hint"></span>
</div>
<div id="views">
<h2>Memory over time</h2>
<div class="toggles" id="policy-toggles"></div>
<div class="controls"><button id="zoom-in">zoom in</button><button id="zoom-out">zoom out</button>
<button id="zoom-focus">where memory moves</button><button id="zoom-all">whole trace</button>
<label>allocations drawn one by one <input id="detail-n" type="number" min="0" step="500" value="2000" style="width:6em"></label>
<span id="moment" class="hint">moment: the peak</span></div>
<div class="chart"><canvas id="timeline"></canvas><canvas id="minimap"></canvas></div>
<p id="range" class="hint"></p>
<p class="hint">Each coloured band is one allocation, stacked in allocation order and coloured by the
site that made it; grey is everything smaller, summarized. Black: live requested bytes; coloured
lines: the bytes each allocator policy would reserve (tick a policy above to show or hide it).
Wheel or buttons to zoom, drag to pan, drag on the strip below to choose a range. Hover for an
allocation's size, stream, lifetime and stack; click to choose it and its moment (and the
allocator state there); shift-drag to choose a range for the flame graph below; ← and → step
through the events one by one.</p>
<div id="detail"></div>
<h2>What is live at the moment</h2>
<div class="controls"><label><input id="plumbing" type="checkbox"> hide allocator and interpreter plumbing frames</label>
<label><input id="flame" type="checkbox"> flame (root at the bottom)</label></div>
<div class="controls"><label>for a range (shift-drag on the timeline) show
<select id="range-mode"><option value="hwm">its high-water mark</option><option value="leaked">what it allocated and still held at its end</option></select></label>
<button id="range-visible">range: the visible part of the timeline</button><button id="range-clear">back to the moment</button></div>
<p id="icicle-note" class="hint"></p>
<div id="icicle"></div>
<div id="icicle-label"></div>
<p class="hint">The outermost frame on top; click a frame to zoom into it, click the top bar to go back up.</p>
<h2>Allocator state</h2>
<nav class="tabs" id="state-tabs"></nav>
<p id="state-note" class="hint"></p>
<div id="state"></div>
<div id="state-detail" class="hint"></div>
<p class="hint">One row per segment the policy holds from the driver (addresses in order); each block
coloured by the site that allocated it; hatched orange is held but free. Click a block for its
allocation. The state shown is the policy's at its peak, or right after the event chosen: the
last one at or before the moment clicked in the timeline; ← and → step one event, [ and ] jump
between the stretches of events the page holds (the whole trace when it is short; around the
peak and at moments spread over where memory moves otherwise).</p>
<h2>Sites</h2>
<p class="hint">Allocations grouped by their user frame (the innermost frame that is not allocator
or interpreter machinery). Click a column to sort; hover a row for the whole stack.</p>
<table id="sites"></table>
<h3>Failures</h3>
<ul id="failures"></ul>
</div>
"#;

const COMPARE: &str = r#"<div id="compare">
<h2>The two traces compared</h2>
<table id="compare-peaks"></table>
<h3>Sites that grew or shrank (bytes live at the peak)</h3>
<table id="compare-sites"></table>
</div>
"#;

/// The header of one trace: what it is, the answers, the policy table.
fn trace_facts(s: &mut String, data: &ReportData) {
    let t = &data.trace;
    let state = if t.complete {
        ""
    } else {
        " <span class=\"oom\">(incomplete trace: recovered from a damaged or truncated file)</span>"
    };
    let _ = writeln!(
        s,
        "<p class=\"facts\">{} events ({} failed) over {}, {} device allocations; \
         capture level: <b>{}</b>{state}</p>",
        count(t.events),
        count(t.failed_calls),
        duration(t.duration_ns),
        count(t.allocations),
        html(&t.level)
    );
    for p in &t.processes {
        let _ = writeln!(
            s,
            "<p class=\"facts\">process {}: <code>{}</code></p>",
            p.pid,
            html(&p.command_line)
        );
    }
    if !t.devices.is_empty() {
        let list: Vec<String> = t.devices.iter().map(|d| html(d)).collect();
        let _ = writeln!(s, "<p class=\"facts\">devices: {}</p>", list.join("; "));
    }
    match (t.writer.is_empty(), t.host.is_empty()) {
        (true, true) => {}
        (false, true) => {
            let _ = writeln!(s, "<p class=\"facts\">written by {}</p>", html(&t.writer));
        }
        (true, false) => {
            let _ = writeln!(s, "<p class=\"facts\">recorded on {}</p>", html(&t.host));
        }
        (false, false) => {
            let _ = writeln!(
                s,
                "<p class=\"facts\">written by {} on {}</p>",
                html(&t.writer),
                html(&t.host)
            );
        }
    }
    if let Some(w) = &t.level_warning {
        let _ = writeln!(s, "<div class=\"warn\"><b>Note:</b> {}</div>", html(w));
    }
    if t.unmatched_frees > 0 {
        let _ = writeln!(
            s,
            "<div class=\"warn\">{} frees of memory allocated before recording began were \
             ignored.</div>",
            count(t.unmatched_frees)
        );
    }
    if data.sections.is_empty() {
        s.push_str(
            "<p>The trace holds no device memory allocation, so there is nothing to chart.</p>\n",
        );
    }
    if data.policy_names.is_empty() && !data.sections.is_empty() {
        s.push_str(
            "<div class=\"warn\">No allocator policy was replayed: the charts show what the \
             program itself requested. Run with <code>--policy all</code> to compare \
             allocators.</div>\n",
        );
    }
    let start_ns = data.buckets.map_or(0, |b| b.start_ns);
    let segments = t.level.starts_with("segment");
    answers(s, data);
    for story in &data.oom_stories {
        // One card per recorded failure, the text `summary` prints.
        let _ = writeln!(
            s,
            "<div class=\"oom-story\"><h3>Out of memory: what happened and what would have \
             served it</h3><pre>{}</pre></div>",
            html(crate::oom_story::render(story).trim_start())
        );
    }
    for x in &data.sections {
        if data.sections.len() > 1 {
            let _ = writeln!(s, "<h3>{}</h3>", html(&x.label()));
        }
        let _ = writeln!(s, "<p>{}</p>", headline(x, start_ns, segments));
        outside_table(s, x);
    }
    if data.sections_omitted > 0 {
        let _ = writeln!(
            s,
            "<p>{} more process/device pairs with smaller peaks are not shown.</p>",
            data.sections_omitted
        );
    }
}

/// The answers ([`crate::answers::Answers`], as `vramtrace tune` gives them) as boxes at the
/// top: the best setting the user can select with the line to paste, the smallest common GPU,
/// the peak and where it comes from.
fn answers(s: &mut String, data: &ReportData) {
    let Some(h) = &data.answers else {
        return;
    };
    let a = &h.answers;
    let among = match h.grid {
        Grid::Full | Grid::Settings => format!(
            "of the {} settings <code>vramtrace tune</code> tries",
            h.tried
        ),
        Grid::Backends => format!(
            "of {} backends at their defaults (a large trace: <code>vramtrace tune</code> \
             searches the whole grid)",
            h.tried
        ),
    };
    s.push_str("<div class=\"answers\">");
    let _ = write!(
        s,
        "<div class=\"answer\"><span>peak</span><b>{}</b><span>held on the device {} after the \
         first event{}</span></div>",
        bytes(a.peak_bytes),
        duration(
            a.peak_time_ns
                .saturating_sub(data.buckets.map_or(0, |b| b.start_ns))
        ),
        a.peak_frame.as_ref().map_or(String::new(), |f| format!(
            ", most of it from <code>{}</code>",
            html(f)
        ))
    );
    match &a.best {
        Some(b) => {
            let _ = write!(
                s,
                "<div class=\"answer\" id=\"best-setting\" title=\"the recorded setting: {}\">\
                 <span>best selectable setting</span><b>{}</b><span><code class=\"paste\">{}</code>\
                 <br>{} ({:.1}%) less than the recorded setting, best validated {among}; \
                 its model's error on real runs of {} captures: {}</span></div>",
                html(&a.recorded_select),
                html(&b.setting),
                html(&b.select),
                bytes(b.saving_bytes.unsigned_abs()),
                100.0 * b.saving_fraction,
                b.capture.map_or("unknown", |c| c.name()),
                html(&b.validated),
            );
        }
        None => {
            let _ = write!(
                s,
                "<div class=\"answer\" id=\"best-setting\"><span>best selectable setting</span>\
                 <b>the recorded one</b><span><code class=\"paste\">{}</code><br>no setting \
                 {among} needs less</span></div>",
                html(&a.recorded_select)
            );
        }
    }
    let need = a
        .best
        .as_ref()
        .map_or(a.recorded_process_peak, |b| b.process_peak);
    let with = a
        .best
        .as_ref()
        .map_or("the recorded setting".to_string(), |b| html(&b.setting));
    let _ = write!(
        s,
        "<div class=\"answer\" id=\"smallest-gpu\"><span>smallest GPU</span><b>{}</b><span>process \
         peak {} with {with}: pool, memory outside it and the CUDA context</span></div>",
        a.smallest_gpu_gb
            .map_or("none of the common sizes".to_string(), |gb| format!(
                "{gb} GB"
            )),
        bytes(need)
    );
    if !a.preallocating.is_empty() {
        let _ = write!(
            s,
            "<div class=\"answer\"><span>preallocating</span><b>{}</b><span>reserve a fixed \
             share of the device up front: their peak is that share, not the program's \
             need</span></div>",
            a.preallocating
                .iter()
                .map(|p| html(p))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    s.push_str("</div>\n");
}

const GLOSSARY: &str = "<details><summary>What the words mean</summary><ul>
<li><b>requested</b>: the bytes the program asked for and had not yet freed.</li>
<li><b>allocated</b>: the bytes of the blocks an allocator handed out for them (after its rounding).</li>
<li><b>reserved</b>: the bytes the allocator holds from the driver; this is what the GPU must have.</li>
<li><b>lower bound</b>: the highest requested total; no allocator can reserve less.</li>
<li><b>fragmentation</b>: 1 − allocated / reserved, the share of reserved memory no live block uses.</li>
<li><b>driver calls</b>: cudaMalloc/cudaFree-like calls the allocator makes, each costing tens of µs.</li>
</ul></details>
";

/// The answer in one paragraph: how much was live at most, and what the policies make of it.
/// `segments`: the trace's allocations are a caching allocator's segments.
pub fn headline(x: &Section, start_ns: u64, segments: bool) -> String {
    let lb = x.lower_bound();
    let when = duration(x.peak.time_ns.saturating_sub(start_ns));
    let mut text = if segments {
        format!(
            "{} allocations, which are the recorded allocator's segments (see the note above). \
             At most <b>{}</b> was held at once, {when} after the first event.",
            count(x.allocations),
            bytes(lb)
        )
    } else {
        format!(
            "{} allocations. At most <b>{}</b> was live at once, {when} after the first event: \
             no allocator can do with less.",
            count(x.allocations),
            bytes(lb)
        )
    };
    // The offline bound is not an allocator a program can use.
    let real: Vec<_> = x
        .policies
        .iter()
        .filter(|p| p.name != "lower-bound" && p.oom.is_none())
        .collect();
    let over = |p: &super::data::PolicyResult| {
        100.0 * (p.peak_reserved.bytes as f64 / lb.max(1) as f64 - 1.0)
    };
    let best = real.iter().min_by_key(|p| (p.peak_reserved.bytes, p.index));
    let worst = real
        .iter()
        .max_by_key(|p| (p.peak_reserved.bytes, usize::MAX - p.index));
    if let (Some(b), Some(w)) = (best, worst) {
        let _ = write!(
            text,
            " Of the allocators replayed, <b>{}</b> needs the least GPU memory ({}, {:+.1}%)",
            html(&b.name),
            bytes(b.peak_reserved.bytes),
            over(b)
        );
        if w.index != b.index {
            let _ = write!(
                text,
                " and <b>{}</b> the most ({}, {:+.1}%)",
                html(&w.name),
                bytes(w.peak_reserved.bytes),
                over(w)
            );
        }
        text.push('.');
    }
    if x.outside_allocations > 0 {
        let _ = write!(
            text,
            " Besides, {} plain driver allocations made beside the pool (libraries that bypass \
             the framework's allocator) held up to {}: every allocator would hold them too, so \
             they are left out of these figures.",
            count(x.outside_allocations),
            bytes(x.outside_peak)
        );
    }
    let ooms: Vec<String> = x
        .policies
        .iter()
        .filter(|p| p.oom.is_some())
        .map(|p| html(&p.name))
        .collect();
    if !ooms.is_empty() {
        let _ = write!(
            text,
            " <span class=\"oom\">Out of memory at {}: {}.</span>",
            x.capacity.map_or("the capacity".to_string(), bytes),
            ooms.join(", ")
        );
    }
    text
}

/// The memory outside the pool by the library that made it, as `summary` prints it, and the
/// driver's own count against what the trace names.
fn outside_table(s: &mut String, x: &Section) {
    if let Some(d) = &x.driver_count {
        let _ = writeln!(
            s,
            "<p class=\"facts\">driver's count {} at its highest; the trace names {} of it \
             ({:.1}%: the CUDA context and the device memory held then)</p>",
            bytes(d.driver_bytes),
            bytes(d.named_bytes),
            d.named_fraction * 100.0
        );
    }
    if x.outside_by_library.is_empty() {
        return;
    }
    s.push_str(
        "<table class=\"outside\"><tr><th>outside the pool, by library</th>\
         <th>most held at once</th><th>allocations</th><th>bytes allocated</th>\
         <th>the largest from</th></tr>\n",
    );
    for m in &x.outside_by_library {
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td></tr>",
            html(&m.library),
            bytes(m.peak_bytes),
            count(m.allocations),
            bytes(m.bytes),
            html(&m.site.as_deref().map(short_frame).unwrap_or_default())
        );
    }
    s.push_str("</table>\n");
}

fn summary_table(s: &mut String, x: &Section, start_ns: u64) {
    if x.policies.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "<p class=\"facts\">{}</p>",
        match x.capacity {
            Some(c) => format!("replayed under a capacity of {}", bytes(c)),
            None => "replayed without a capacity limit".to_string(),
        }
    );
    s.push_str(
        "<table><tr><th>policy</th><th>peak reserved</th><th>over the lower bound</th>\
         <th>peak allocated</th><th>fragmentation at peak</th><th>driver allocs / frees</th>\
         <th>est. driver time</th><th>out of memory</th></tr>\n",
    );
    let lb = x.lower_bound();
    for p in &x.policies {
        let over = if lb > 0 {
            format!(
                "{:+.1}%",
                100.0 * (p.peak_reserved.bytes as f64 / lb as f64 - 1.0)
            )
        } else {
            "–".to_string()
        };
        let oom = match &p.oom {
            None => match recorded_refusals_note(p.refused_as_recorded, x.refused_total) {
                Some(n) if p.refused_as_recorded > 0 => {
                    format!("<span class=\"oom\">{}</span>", html(&n))
                }
                Some(n) => format!("no ({})", html(&n)),
                None => "no".to_string(),
            },
            Some(o) => format!(
                "<span class=\"oom\">at {} asking {} with {} reserved</span>",
                duration(o.time_ns.saturating_sub(start_ns)),
                bytes(o.size),
                bytes(o.reserved)
            ),
        };
        let _ = writeln!(
            s,
            "<tr><td><span class=\"swatch\" style=\"background:{}\"></span>{}</td><td>{}</td>\
             <td>{over}</td><td>{}</td><td>{:.1}%</td><td>{} / {}</td><td>{}</td><td>{oom}</td></tr>",
            style::hex(style::policy_color(p.color)),
            html(&p.name),
            bytes(p.peak_reserved.bytes),
            bytes(p.peak_allocated),
            100.0 * p.fragmentation_at_peak,
            count(p.device_allocs),
            count(p.device_frees),
            duration((p.est_alloc_time_us * 1e3) as u64),
        );
    }
    let _ = writeln!(
        s,
        "<tr><td>lower bound</td><td>{}</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td><td>–</td></tr></table>",
        bytes(lb)
    );
    for p in &x.policies {
        if let Some(o) = &p.oom
            && !o.stack.is_empty()
        {
            let _ = writeln!(
                s,
                "<details><summary>{}: stack of the request that did not fit</summary>\
                     <pre>{}</pre></details>",
                html(&p.name),
                o.stack
                    .iter()
                    .map(|f| html(f))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::data::{Peak, PolicyResult};

    fn policy(name: &str, index: usize, peak: u64) -> PolicyResult {
        PolicyResult {
            name: name.into(),
            index,
            color: index,
            peak_reserved: Peak {
                time_ns: 0,
                bytes: peak,
            },
            ..PolicyResult::default()
        }
    }

    #[test]
    fn the_headline_names_the_best_and_worst_real_allocator() {
        let x = Section {
            allocations: 3,
            peak: Peak {
                time_ns: 2_000_000,
                bytes: 100 << 20,
            },
            policies: vec![
                policy("pytorch", 0, 150 << 20),
                policy("cuda-malloc", 1, 110 << 20),
                policy("lower-bound", 2, 100 << 20),
            ],
            ..Section::default()
        };
        let h = headline(&x, 1_000_000, false);
        assert!(h.contains("At most <b>100.00 MiB</b> was live at once, 1.00 ms after"));
        assert!(h.contains("<b>cuda-malloc</b> needs the least GPU memory (110.00 MiB, +10.0%)"));
        assert!(h.contains("<b>pytorch</b> the most (150.00 MiB, +50.0%)"));
        assert!(headline(&x, 0, true).contains("segments"));
    }
}
