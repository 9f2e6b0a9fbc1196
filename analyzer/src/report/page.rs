//! The HTML page: one self-contained file (inline CSS and SVG, no script, no network) that
//! opens from disk. Every trace string is escaped with [`html`].

use super::data::{ReportData, Section};
use super::escape::html;
use super::style;
use super::{Chart, ChartKind};
use crate::units::{bytes, count, duration};
use std::fmt::Write as _;

const CSS: &str = "
body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:0;color:#222;background:#f6f6f4}
main{max-width:1040px;margin:0 auto;padding:24px 20px 60px;background:#fff}
h1{font-size:1.6em;margin:0 0 4px}h2{margin-top:1.8em;border-bottom:2px solid #ddd;padding-bottom:4px}
h3{margin-top:1.4em}
.facts{color:#555;margin:0 0 12px}.facts code{word-break:break-all}
.warn{background:#fff4e0;border-left:5px solid #e69f00;padding:10px 14px;margin:12px 0}
.oom{color:#c81e1e;font-weight:bold}
table{border-collapse:collapse;margin:10px 0;font-size:.93em}
th,td{padding:5px 10px;border-bottom:1px solid #e4e4e4;text-align:right;vertical-align:top}
th:first-child,td:first-child{text-align:left;white-space:nowrap}th{background:#f0f0ee}
td.stack{text-align:left;font-family:ui-monospace,monospace;font-size:.88em;max-width:560px;overflow-wrap:anywhere}
.swatch{display:inline-block;width:12px;height:12px;border-radius:2px;margin-right:6px;vertical-align:-1px}
figure{margin:18px 0}figure svg{width:100%;height:auto;display:block;border:1px solid #eee}
figcaption{color:#555;font-size:.93em;margin-top:4px}
details{margin:4px 0}summary{cursor:pointer}
nav a{margin-right:14px}footer{color:#888;font-size:.85em;margin-top:40px}
";

/// The whole page.
pub fn html_page(data: &ReportData, charts: &[Chart]) -> String {
    let t = &data.trace;
    let mut s = String::with_capacity(1 << 20);
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>vramtrace report: {}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n",
        html(&t.file)
    );
    let _ = writeln!(
        s,
        "<h1>GPU memory report: <code>{}</code></h1>",
        html(&t.file)
    );
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
    s.push_str(GLOSSARY);
    if data.sections.len() > 1 {
        s.push_str("<nav>");
        for (i, x) in data.sections.iter().enumerate() {
            let _ = write!(s, "<a href=\"#section-{i}\">{}</a>", html(&x.label()));
        }
        s.push_str("</nav>\n");
    }
    let start_ns = data.buckets.map_or(0, |b| b.start_ns);
    let segments = t.level.starts_with("segment");
    for (i, x) in data.sections.iter().enumerate() {
        section(&mut s, i, x, charts, start_ns, segments);
    }
    if data.sections_omitted > 0 {
        let _ = writeln!(
            s,
            "<p>{} more process/device pairs with smaller peaks are not shown.</p>",
            data.sections_omitted
        );
    }
    s.push_str("<h2>All requests</h2>\n");
    figure(
        &mut s,
        charts,
        ChartKind::Sizes,
        None,
        None,
        "How many requests of each size (left) and how many bytes they add up to (right). \
         Many small requests cost allocator time; a few large ones usually make the peak.",
    );
    figure(
        &mut s,
        charts,
        ChartKind::Lifetimes,
        None,
        None,
        "How long requests lived, from allocation to free. Short-lived requests are what a \
         caching allocator recycles; memory never freed stays until the process ends.",
    );
    let _ = writeln!(
        s,
        "<footer>Made by vramtrace {} from <code>{}</code>{}. Each chart is also a separate \
         .svg file beside this page.</footer>",
        env!("CARGO_PKG_VERSION"),
        html(&t.file),
        if t.symbolized {
            ""
        } else {
            ", without symbolization"
        }
    );
    s.push_str("</main>\n</body>\n</html>\n");
    s
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

fn section(s: &mut String, i: usize, x: &Section, charts: &[Chart], start_ns: u64, segments: bool) {
    let _ = writeln!(s, "<h2 id=\"section-{i}\">{}</h2>", html(&x.label()));
    let _ = writeln!(s, "<p>{}</p>", headline(x, start_ns, segments));
    summary_table(s, x, start_ns);
    figure(
        s,
        charts,
        ChartKind::Memory,
        Some(i),
        None,
        "Black: bytes the program had live. Coloured: bytes each allocator policy would hold \
         from the driver. Dots mark each peak; the dashed grey line is the lower bound. Each \
         line shows the highest value within each of 600 time slices, so no peak is hidden.",
    );
    figure(
        s,
        charts,
        ChartKind::Policies,
        Some(i),
        None,
        "The GPU memory each policy needs (its peak reserved) against the lower bound, with the \
         driver calls it makes and their estimated time.",
    );
    figure(
        s,
        charts,
        ChartKind::Fragmentation,
        Some(i),
        None,
        "The share of each policy's reserved memory that holds no live block, over time.",
    );
    figure(
        s,
        charts,
        ChartKind::LiveAtPeak,
        Some(i),
        None,
        "What was live at the moment of the peak, by the call stack that allocated it: the \
         widest boxes are what to shrink first.",
    );
    live_table(s, x);
    figure(
        s,
        charts,
        ChartKind::Timeline,
        Some(i),
        None,
        "Every allocation as a band, stacked in allocation order; when one is freed the bands \
         above it move down. Allocations too small or too short to see at this scale are \
         summed in the grey band, whose top follows the highest live total, so peaks show.",
    );
    figure(
        s,
        charts,
        ChartKind::TimelineAtPeak,
        Some(i),
        None,
        "The same timeline, zoomed on the moments around the peak.",
    );
    let maps = charts
        .iter()
        .filter(|c| c.kind == ChartKind::AddressMap && c.section == Some(i))
        .count();
    if maps == 0 {
        return;
    }
    // Many policies make a long page: their maps fold away, open on demand.
    let open = if maps <= 3 { " open" } else { "" };
    let _ = writeln!(
        s,
        "<details{open}><summary>Address space of each policy at its peak ({maps} charts)\
         </summary>"
    );
    for (p, policy) in x.policies.iter().enumerate() {
        figure(
            s,
            charts,
            ChartKind::AddressMap,
            Some(i),
            Some(p),
            &format!(
                "The address space of {} when its reserved memory peaked: each row one \
                 segment it held from the driver, blue where blocks were in use, orange \
                 where memory was free but held (fragmentation).",
                html(&policy.name)
            ),
        );
    }
    s.push_str("</details>\n");
}

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

fn summary_table(s: &mut String, x: &Section, start_ns: u64) {
    if x.policies.is_empty() {
        return;
    }
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
            None => "no".to_string(),
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

/// The largest live stacks at the peak, innermost frames shown, the whole stack on demand.
fn live_table(s: &mut String, x: &Section) {
    let live = &x.live_at_peak;
    if live.stacks.is_empty() {
        return;
    }
    s.push_str(
        "<table><tr><th>live bytes</th><th>share</th><th>objects</th>\
         <th style=\"text-align:left\">allocated from (innermost frames first)</th></tr>\n",
    );
    for st in live.stacks.iter().take(12) {
        let share = 100.0 * st.bytes as f64 / live.peak.bytes.max(1) as f64;
        let inner: Vec<String> = st.frames.iter().rev().take(3).map(|f| html(f)).collect();
        let whole: Vec<String> = st.frames.iter().rev().map(|f| html(f)).collect();
        let shown = if inner.is_empty() {
            "(no stack recorded)".to_string()
        } else {
            inner.join(" ← ")
        };
        let _ = writeln!(
            s,
            "<tr><td>{}</td><td>{share:.1}%</td><td>{}</td><td class=\"stack\">\
             <details><summary>{shown}</summary>{}</details></td></tr>",
            bytes(st.bytes),
            count(st.objects),
            whole.join("<br>")
        );
    }
    s.push_str("</table>\n");
}

fn figure(
    s: &mut String,
    charts: &[Chart],
    kind: ChartKind,
    section: Option<usize>,
    policy: Option<usize>,
    caption: &str,
) {
    let Some(c) = charts
        .iter()
        .find(|c| c.kind == kind && c.section == section && c.policy == policy)
    else {
        return;
    };
    let _ = writeln!(
        s,
        "<figure>\n{}<figcaption>{caption} <a href=\"{}\">{}</a></figcaption>\n</figure>",
        strip_prolog(&c.svg),
        html(&c.file),
        html(&c.file)
    );
}

/// The SVG without an XML declaration, which HTML does not allow inside a page.
fn strip_prolog(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
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

    #[test]
    fn an_svg_loses_its_xml_declaration_inside_the_page() {
        assert_eq!(strip_prolog("<?xml version=\"1.0\"?>\n<svg/>"), "<svg/>");
    }
}
