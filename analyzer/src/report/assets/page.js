// vramtrace report page: draws the embedded, already aggregated data (see page_data.rs).
// Trace strings reach the page only through textContent and element attributes, never as markup.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("vramtrace-data").textContent);
  const $ = (id) => document.getElementById(id);
  const el = (tag, attrs, text) => {
    const e = document.createElement(tag);
    if (attrs) for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  };

  // ---- formatting ----
  const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];
  function bytes(n) {
    let i = 0, v = n;
    while (Math.abs(v) >= 1024 && i < UNITS.length - 1) { v /= 1024; i++; }
    return i === 0 ? `${n} B` : `${v.toFixed(2)} ${UNITS[i]}`;
  }
  function dur(ns) {
    const a = Math.abs(ns);
    if (a >= 1e9) return (ns / 1e9).toFixed(3) + " s";
    if (a >= 1e6) return (ns / 1e6).toFixed(3) + " ms";
    if (a >= 1e3) return (ns / 1e3).toFixed(2) + " µs";
    return Math.round(ns) + " ns";
  }
  // Axis ticks: a 1-2-5 step, labelled with as many decimals as the step needs, so no two
  // labels of one axis are the same.
  function niceStep(span, n) {
    const raw = span / Math.max(1, n);
    const p = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 5, 10]) if (m * p >= raw) return m * p;
    return 10 * p;
  }
  function timeTicks(a, b, n) {
    const span = Math.max(b - a, 1);
    const unit = span >= 2e9 ? [1e9, "s"] : span >= 2e6 ? [1e6, "ms"] : span >= 2e3 ? [1e3, "µs"] : [1, "ns"];
    const step = niceStep(span / unit[0], n);
    const dec = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const out = [];
    for (let v = Math.ceil(a / unit[0] / step) * step; v * unit[0] <= b + 1e-6; v += step)
      out.push([v * unit[0], v.toFixed(dec) + (out.length === 0 ? " " + unit[1] : "")]);
    return out;
  }
  function byteTicks(max, n) {
    let i = 0, d = 1;
    while (max / d >= 1024 * 2 && i < UNITS.length - 1) { d *= 1024; i++; }
    const step = niceStep(max / d, n);
    const dec = Math.max(0, -Math.floor(Math.log10(step) + 1e-9));
    const out = [];
    for (let v = 0; v * d <= max * 1.0001; v += step) out.push([v * d, v.toFixed(dec) + " " + UNITS[i]]);
    return out;
  }

  // A policy reserving more than this many times the lower bound starts hidden.
  const OUTLIER = 2.5;

  // ---- state ----
  const S = {
    run: 0, section: 0, v0: 0, v1: 1, hidden: new Set(), search: "", plumbing: true,
    selected: -1, moment: null, statePolicy: 0, event: null, detail: 2000, zoomNode: null, flame: false,
    range: null, rangeMode: "hwm",
  };
  const run = () => D.runs[S.run];
  const sec = () => run().sections[S.section];
  const other = () => (D.mode === "compare" && D.runs.length > 1 ? D.runs[1 - S.run] : null);

  // ---- stacks ----
  function frames(r, stack) { return (r.stacks[stack] || []); }
  function shownFrames(r, stack) {
    const f = frames(r, stack);
    return S.plumbing ? f : f.filter((i) => !r.plumbing[i]);
  }
  // The innermost frame that is the program's own, else the innermost frame.
  function userFrame(r, stack) {
    const f = frames(r, stack);
    for (let k = f.length - 1; k >= 0; k--) if (!r.plumbing[f[k]]) return r.frames[f[k]];
    return f.length ? r.frames[f[f.length - 1]] : "(no stack recorded)";
  }
  // User frame first, then the whole stack innermost first.
  function stackText(r, stack) {
    const f = frames(r, stack);
    if (!f.length) return "(no stack recorded)";
    const lines = [userFrame(r, stack)];
    for (let k = f.length - 1; k >= 0; k--) lines.push((r.plumbing[f[k]] ? "  · " : "  at ") + r.frames[f[k]]);
    return lines.join("\n");
  }
  function hue(s) { let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) >>> 0; return h % 360; }
  const siteColors = new Map();
  function siteColor(name) {
    let c = siteColors.get(name);
    if (!c) { c = `hsl(${hue(name)},55%,${58 + (hue(name + "x") % 18)}%)`; siteColors.set(name, c); }
    return c;
  }
  // A band's colour: its site's, a little lighter or darker per allocation so neighbours from
  // one site stay apart; per allocation when the trace has no stacks.
  function bandColor(r, a, i) {
    const k = (a.index[i] * 2654435761) >>> 0;
    if (r.stacks.length <= 1) return `hsl(${k % 360},55%,${55 + (k >> 9) % 20}%)`;
    const h = hue(userFrame(r, a.stack[i]));
    return `hsl(${h},55%,${52 + (k % 7) * 4}%)`;
  }
  function matchingStacks(r) {
    const q = S.search.toLowerCase();
    if (!q) return null;
    const fm = r.frames.map((f) => f.toLowerCase().includes(q));
    return r.stacks.map((st) => st.some((i) => fm[i]));
  }

  // ---- series ----
  // The finest level covering [a, b].
  function levelFor(x, a, b) {
    let best = x.levels[0];
    for (const l of x.levels) {
      const end = l.t0 + l.dt * l.requested.length;
      if (l.t0 <= a && end >= b && l.dt < best.dt) best = l;
    }
    return best;
  }
  // Highest value of `series` over [a, b), or null where the series has ended.
  function envelope(l, series, a, b) {
    const n = series.length;
    let i0 = Math.floor((a - l.t0) / l.dt), i1 = Math.ceil((b - l.t0) / l.dt);
    i0 = Math.max(0, i0); i1 = Math.min(n, Math.max(i1, i0 + 1));
    if (i0 >= n) return null;
    let m = 0;
    for (let i = i0; i < i1; i++) if (series[i] > m) m = series[i];
    return m;
  }

  // ---- timeline ----
  const T = { cols: [], colT: [], colW: 0, left: 70, top: 12, right: 12, bottom: 30, yMax: 1, order: null, rank: null };
  function sizeCanvas(c) {
    const dpr = window.devicePixelRatio || 1;
    const w = c.clientWidth, h = c.clientHeight;
    if (c.width !== Math.round(w * dpr) || c.height !== Math.round(h * dpr)) { c.width = Math.round(w * dpr); c.height = Math.round(h * dpr); }
    const g = c.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    return [g, w, h];
  }
  function drawTimeline() {
    const c = $("timeline"), r = run(), x = sec();
    const [g, w, h] = sizeCanvas(c);
    g.clearRect(0, 0, w, h);
    const pw = w - T.left - T.right, ph = h - T.top - T.bottom;
    const v0 = S.v0, v1 = S.v1, span = v1 - v0;
    const ncol = Math.max(10, Math.floor(pw / 2));
    const dv = span / ncol;
    const X = (t) => T.left + ((t - v0) / span) * pw;
    const a = x.allocs, na = a.size.length;
    // Allocations drawn here: alive in the window, the largest by the area they cover in it
    // (size × time alive within the window), up to the detail threshold.
    let vis = [];
    const area = new Map();
    for (let i = 0; i < na; i++) {
      const d = a.death[i] < 0 ? v1 : Math.min(a.death[i], v1);
      const b0 = Math.max(a.birth[i], v0);
      if (a.birth[i] < v1 && d > v0) { vis.push(i); area.set(i, a.size[i] * (d - b0)); }
    }
    if (vis.length > S.detail) {
      vis.sort((p, q) => area.get(q) - area.get(p) || p - q);
      vis = vis.slice(0, S.detail).sort((p, q) => p - q);
    }
    const cols = new Array(ncol), colT = new Float64Array(ncol), drawn = new Float64Array(ncol);
    const offs = new Map();
    for (let j = 0; j < ncol; j++) {
      const t = v0 + (j + 0.5) * dv;
      colT[j] = t;
      let s = 0;
      const here = [];
      for (const i of vis) {
        const d = a.death[i] < 0 ? Infinity : a.death[i];
        if (a.birth[i] <= t && d > t) {
          here.push(i, s);
          let o = offs.get(i); if (!o) { o = []; offs.set(i, o); }
          o.push(j, s);
          s += a.size[i];
        }
      }
      cols[j] = here; drawn[j] = s;
    }
    const lvl = levelFor(x, v0, v1);
    const req = new Float64Array(ncol);
    for (let j = 0; j < ncol; j++) req[j] = Math.max(envelope(lvl, lvl.requested, v0 + j * dv, v0 + (j + 1) * dv) || 0, drawn[j]);
    const lines = [];
    const o = other();
    const ox = o ? o.sections[Math.min(S.section, o.sections.length - 1)] : null;
    let yMax = 1;
    for (let j = 0; j < ncol; j++) yMax = Math.max(yMax, req[j]);
    const polyLines = [];
    const addLines = (xs, dashed, tag) => {
      const l = levelFor(xs, v0, v1);
      const env = (series) => { const v = new Array(ncol); for (let j = 0; j < ncol; j++) v[j] = envelope(l, series, v0 + j * dv, v0 + (j + 1) * dv); return v; };
      if (dashed) polyLines.push({ name: "requested" + tag, color: "#141414", v: env(l.requested), dashed });
      xs.policies.forEach((p, k) => {
        if (S.hidden.has(p.name)) return;
        polyLines.push({ name: p.name + tag, color: p.color, v: env(l.reserved[k] || []), dashed });
      });
    };
    addLines(x, false, "");
    if (ox) addLines(ox, true, " (" + o.name + ")");
    for (const pl of polyLines) for (const v of pl.v) if (v !== null && v > yMax) yMax = v;
    if (x.capacity && x.capacity < yMax * 1.3) yMax = Math.max(yMax, x.capacity);
    yMax *= 1.05;
    T.yMax = yMax;
    const Y = (b) => T.top + ph - (b / yMax) * ph;
    const matches = matchingStacks(r);
    let highlighted = 0;
    // Allocation polygons.
    for (const i of vis) {
      const o2 = offs.get(i);
      if (!o2) continue;
      const d = a.death[i] < 0 ? v1 : Math.min(a.death[i], v1);
      const xl = X(Math.max(a.birth[i], v0)), xr = X(d);
      const size = a.size[i];
      g.beginPath();
      g.moveTo(xl, Y(o2[1]));
      for (let k = 0; k < o2.length; k += 2) g.lineTo(T.left + (o2[k] + 0.5) * (pw / ncol), Y(o2[k + 1]));
      g.lineTo(xr, Y(o2[o2.length - 1]));
      g.lineTo(xr, Y(o2[o2.length - 1] + size));
      for (let k = o2.length - 2; k >= 0; k -= 2) g.lineTo(T.left + (o2[k] + 0.5) * (pw / ncol), Y(o2[k + 1] + size));
      g.lineTo(xl, Y(o2[1] + size));
      g.closePath();
      const hit = matches && matches[a.stack[i]];
      if (hit) highlighted++;
      g.fillStyle = matches && !hit ? "#e4e4e4" : bandColor(r, a, i);
      g.fill();
      if (hit || i === S.selected) { g.strokeStyle = i === S.selected ? "#000" : "#d11"; g.lineWidth = i === S.selected ? 2 : 1.2; g.stroke(); }
    }
    // Everything else live: between the drawn allocations and the live total.
    g.beginPath();
    g.moveTo(T.left, Y(drawn[0]));
    for (let j = 0; j < ncol; j++) g.lineTo(T.left + (j + 0.5) * (pw / ncol), Y(drawn[j]));
    for (let j = ncol - 1; j >= 0; j--) g.lineTo(T.left + (j + 0.5) * (pw / ncol), Y(req[j]));
    g.closePath();
    g.fillStyle = "rgba(150,150,150,.55)";
    g.fill();
    // Lines: the program's live total and each policy's reserved bytes.
    const line = (v, color, dashed, width) => {
      g.beginPath(); g.strokeStyle = color; g.lineWidth = width; g.setLineDash(dashed ? [6, 4] : []);
      let on = false;
      for (let j = 0; j < ncol; j++) {
        if (v[j] === null) { on = false; continue; }
        const px = T.left + j * (pw / ncol), qx = px + pw / ncol;
        if (!on) { g.moveTo(px, Y(v[j])); on = true; } else g.lineTo(px, Y(v[j]));
        g.lineTo(qx, Y(v[j]));
      }
      g.stroke(); g.setLineDash([]);
    };
    line(Array.from(req), "#141414", false, 1.4); lines.push("requested");
    for (const pl of polyLines) { line(pl.v, pl.color, pl.dashed, 1.8); lines.push(pl.name); }
    if (x.capacity && x.capacity <= yMax) {
      g.strokeStyle = "#c81e1e"; g.setLineDash([3, 3]); g.beginPath(); g.moveTo(T.left, Y(x.capacity)); g.lineTo(T.left + pw, Y(x.capacity)); g.stroke(); g.setLineDash([]);
      g.fillStyle = "#c81e1e"; g.font = "11px sans-serif"; g.fillText("capacity " + bytes(x.capacity), T.left + 4, Y(x.capacity) - 3);
    }
    // Peaks.
    const mark = (t, b, color) => { if (t < v0 || t > v1) return; g.fillStyle = color; g.beginPath(); g.arc(X(t), Y(b), 4, 0, 7); g.fill(); };
    mark(x.peak_ns, x.lower_bound, "#141414");
    x.policies.forEach((p) => { if (!S.hidden.has(p.name)) mark(p.peak_ns, p.peak, p.color); });
    if (S.range) {
      const ra = X(Math.max(S.range[0], v0)), rb = X(Math.min(S.range[1], v1));
      if (rb > ra) {
        g.fillStyle = "rgba(230,140,20,.14)"; g.fillRect(ra, T.top, rb - ra, ph);
        g.fillStyle = "#d07a10";
        for (const hx of [X(S.range[0]), X(S.range[1])]) if (hx >= T.left && hx <= T.left + pw) g.fillRect(hx - 1.5, T.top, 3, ph);
      }
    }
    c.dataset.brush = S.range ? `${S.range[0]},${S.range[1]}` : "";
    if (S.moment !== null && S.moment >= v0 && S.moment <= v1) {
      g.strokeStyle = "#0a6"; g.lineWidth = 1.5; g.beginPath(); g.moveTo(X(S.moment), T.top); g.lineTo(X(S.moment), T.top + ph); g.stroke();
    }
    // Axes.
    g.fillStyle = "#333"; g.strokeStyle = "#ccc"; g.lineWidth = 1; g.font = "11px sans-serif";
    g.textAlign = "right";
    for (const [b, label] of byteTicks(yMax, 6)) { const y = Y(b); g.beginPath(); g.moveTo(T.left, y); g.lineTo(T.left + pw, y); g.stroke(); g.fillText(label, T.left - 5, y + 4); }
    g.textAlign = "center";
    const tt = timeTicks(v0, v1, Math.max(3, Math.floor(pw / 110)));
    for (const [t, label] of tt) { const px = X(t); g.fillText(label, px, T.top + ph + 16); g.beginPath(); g.moveTo(px, T.top + ph); g.lineTo(px, T.top + ph + 4); g.stroke(); }
    g.textAlign = "left";
    T.cols = cols; T.colT = colT; T.colW = pw / ncol; T.pw = pw; T.ph = ph; T.req = req; T.drawn = drawn; T.vis = vis.length;
    c.dataset.lines = lines.join("|");
    c.dataset.range = `${v0},${v1}`;
    c.dataset.highlighted = String(highlighted);
    c.dataset.axis = tt.map((t) => t[1]).join("|");
    $("range").textContent = `showing ${dur(v0)} – ${dur(v1)} of ${dur(x.duration_ns)}; ${vis.length} allocations drawn (at most ${S.detail} of the ${na} largest of all ${x.allocations}), the rest summarized in grey`;
    drawMinimap();
  }

  function drawMinimap() {
    const c = $("minimap"), x = sec();
    const [g, w, h] = sizeCanvas(c);
    g.clearRect(0, 0, w, h);
    const l = x.levels[0], n = l.requested.length, end = Math.max(x.duration_ns, 1);
    let m = 1; for (const v of l.requested) m = Math.max(m, v);
    const X = (t) => T.left + (t / end) * (w - T.left - T.right);
    g.fillStyle = "#bbb"; g.beginPath(); g.moveTo(X(0), h);
    for (let i = 0; i < n; i++) { g.lineTo(X(l.t0 + i * l.dt), h - 2 - (l.requested[i] / m) * (h - 6)); g.lineTo(X(l.t0 + (i + 1) * l.dt), h - 2 - (l.requested[i] / m) * (h - 6)); }
    g.lineTo(X(end), h); g.closePath(); g.fill();
    g.fillStyle = "rgba(40,110,200,.18)"; g.strokeStyle = "#2a6ec8";
    const bx = X(S.v0), bw = Math.max(2, X(S.v1) - X(S.v0));
    g.fillRect(bx, 0, bw, h); g.strokeRect(bx, 0.5, bw, h - 1);
  }

  function setRange(a, b) {
    const end = Math.max(sec().duration_ns, 1);
    let span = Math.max(b - a, 1);
    span = Math.min(span, end);
    a = Math.max(0, Math.min(a, end - span));
    S.v0 = a; S.v1 = a + span;
    drawTimeline();
  }
  function focusRange() { const f = sec().levels[1] || sec().levels[0]; return [f.t0, f.t0 + f.dt * f.requested.length]; }

  // The allocation under (px, py), or -1; [index, time].
  function hitTest(px, py) {
    const j = Math.floor((px - T.left) / T.colW);
    if (j < 0 || j >= T.cols.length) return [-1, null, j];
    const b = ((T.top + T.ph - py) / T.ph) * T.yMax;
    const a = sec().allocs, here = T.cols[j];
    for (let k = 0; k < here.length; k += 2) {
      const i = here[k], off = here[k + 1];
      if (b >= off && b < off + a.size[i]) return [i, T.colT[j], j];
    }
    return [-2, T.colT[j], j];
  }
  function allocText(i) {
    const r = run(), a = sec().allocs;
    const d = a.death[i];
    const life = d < 0 ? "never freed" : `lived ${dur(d - a.birth[i])} (freed at ${dur(d)})`;
    return `${userFrame(r, a.stack[i])}\n${bytes(a.size[i])} on stream ${a.stream[i]}, allocation #${a.index[i]}\nallocated at ${dur(a.birth[i])}, ${life}\n\n${stackText(r, a.stack[i])}`;
  }
  function showTip(ev, text) {
    const t = $("tooltip");
    t.textContent = text; t.style.display = "block";
    const x = Math.min(ev.clientX + 14, window.innerWidth - t.offsetWidth - 8);
    const y = Math.min(ev.clientY + 14, window.innerHeight - t.offsetHeight - 8);
    t.style.left = x + "px"; t.style.top = y + "px";
  }
  function hideTip() { $("tooltip").style.display = "none"; }

  function wireTimeline() {
    const c = $("timeline");
    let drag = null;
    c.addEventListener("mousemove", (ev) => {
      const rect = c.getBoundingClientRect(), px = ev.clientX - rect.left, py = ev.clientY - rect.top;
      if (drag && drag.brush !== null) {
        const t = timeAt(px);
        S.range = [Math.min(t, drag.brush), Math.max(t, drag.brush)];
        drawTimeline();
        return;
      }
      if (drag) {
        const dt = ((px - drag.x) / T.pw) * (drag.v1 - drag.v0);
        if (Math.abs(px - drag.x) > 3) drag.moved = true;
        if (drag.moved) setRange(drag.v0 - dt, drag.v1 - dt);
        return;
      }
      const [i, t, j] = hitTest(px, py);
      if (i >= 0) showTip(ev, allocText(i));
      else if (i === -2 && T.req[j] > T.drawn[j]) {
        const b = ((T.top + T.ph - py) / T.ph) * T.yMax;
        if (b <= T.req[j]) showTip(ev, `smaller or shorter allocations, summarized: up to ${bytes(T.req[j] - T.drawn[j])} live around ${dur(t)}`);
        else hideTip();
      } else hideTip();
    });
    c.addEventListener("mouseleave", () => { hideTip(); drag = null; });
    // Shift-drag: a range for the flame graph (its high-water mark, or what it leaked).
    const timeAt = (px) => S.v0 + ((px - T.left) / T.pw) * (S.v1 - S.v0);
    c.addEventListener("mousedown", (ev) => { const rect = c.getBoundingClientRect(); const px = ev.clientX - rect.left; drag = { x: px, v0: S.v0, v1: S.v1, moved: false, brush: ev.shiftKey ? timeAt(px) : null }; });
    c.addEventListener("mouseup", (ev) => {
      const d = drag; drag = null;
      if (d && d.brush !== null) {
        const t = timeAt(ev.clientX - c.getBoundingClientRect().left);
        if (t !== d.brush) setTimeRange(Math.min(t, d.brush), Math.max(t, d.brush));
        return;
      }
      if (!d || d.moved) return;
      const rect = c.getBoundingClientRect();
      const [i, t] = hitTest(ev.clientX - rect.left, ev.clientY - rect.top);
      if (t === null) return;
      S.selected = i >= 0 ? i : -1;
      $("detail").textContent = i >= 0 ? allocText(i) : `moment ${dur(t)}`;
      setMoment(t);
    });
    c.addEventListener("wheel", (ev) => {
      ev.preventDefault();
      const rect = c.getBoundingClientRect();
      const f = Math.max(0, Math.min(1, (ev.clientX - rect.left - T.left) / T.pw));
      zoomBy(ev.deltaY < 0 ? 1 / 1.4 : 1.4, f);
    }, { passive: false });
    const mm = $("minimap");
    let mdrag = null;
    const mt = (ev) => { const rect = mm.getBoundingClientRect(); const w = rect.width - T.left - T.right; return ((ev.clientX - rect.left - T.left) / w) * sec().duration_ns; };
    mm.addEventListener("mousedown", (ev) => { const t = mt(ev); mdrag = t > S.v0 && t < S.v1 ? { move: t, v0: S.v0, v1: S.v1 } : { from: t }; });
    window.addEventListener("mousemove", (ev) => {
      if (!mdrag) return;
      const t = mt(ev);
      if (mdrag.move !== undefined) setRange(mdrag.v0 + t - mdrag.move, mdrag.v1 + t - mdrag.move);
      else setRange(Math.min(mdrag.from, t), Math.max(mdrag.from, t));
    });
    window.addEventListener("mouseup", () => { mdrag = null; });
    $("zoom-in").onclick = () => zoomBy(1 / 2, 0.5);
    $("zoom-out").onclick = () => zoomBy(2, 0.5);
    $("zoom-focus").onclick = () => setRange(...focusRange());
    $("zoom-all").onclick = () => setRange(0, sec().duration_ns);
    $("range-mode").onchange = (ev) => { S.rangeMode = ev.target.value; if (S.range) drawIcicle(); };
    $("range-visible").onclick = () => setTimeRange(S.v0, S.v1);
    $("range-clear").onclick = () => setTimeRange(null);
    $("detail-n").onchange = (ev) => { S.detail = Math.max(0, parseInt(ev.target.value, 10) || 0); drawTimeline(); };
  }
  // The flame graph's range [a, b] (ns), or none (back to the moment).
  function setTimeRange(a, b) {
    S.range = a === null ? null : [Math.max(0, a), Math.min(b, sec().duration_ns)];
    S.zoomNode = null;
    drawTimeline(); drawIcicle();
  }
  function zoomBy(k, f) {
    const span = S.v1 - S.v0, at = S.v0 + f * span, ns = Math.max(span * k, 1);
    setRange(at - f * ns, at - f * ns + ns);
  }

  // ---- events: the requests whose allocator states the page holds, window by window ----
  function wins() { return sec().windows || []; }
  // [window, position] of the last held event at or before time t; else the first one.
  function eventAt(t) {
    const ws = wins();
    let best = null;
    for (let w = 0; w < ws.length; w++) {
      const tt = ws[w].t;
      let lo = 0, hi = tt.length;
      while (lo < hi) { const m = (lo + hi) >> 1; if (tt[m] <= t) lo = m + 1; else hi = m; }
      if (lo > 0) best = [w, lo - 1];
    }
    return best || (ws.length ? [0, 0] : null);
  }
  // One event on (dir ±1), or to the next/previous window (jump); from the peak view, the
  // event at the moment.
  function stepEvent(dir, jump) {
    const ws = wins();
    if (!ws.length) return;
    let e = S.event;
    if (e === null) e = eventAt(S.moment === null ? sec().peak_ns : S.moment);
    else if (jump) e = [Math.max(0, Math.min(ws.length - 1, e[0] + dir)), 0];
    else {
      let [w, k] = e;
      k += dir;
      if (k >= ws[w].t.length) { if (w + 1 < ws.length) { w++; k = 0; } else k--; }
      else if (k < 0) { if (w > 0) { w--; k = ws[w].t.length - 1; } else k = 0; }
      e = [w, k];
    }
    S.event = e;
    setMoment(ws[e[0]].t[e[1]], true);
    if (S.moment < S.v0 || S.moment > S.v1) { const span = S.v1 - S.v0; setRange(S.moment - span / 2, S.moment + span / 2); }
  }
  function setMoment(t, keepEvent) {
    S.moment = t;
    if (!keepEvent) S.event = eventAt(t);
    $("moment").textContent = `moment: ${dur(t)}${t === sec().peak_ns ? " (the peak)" : ""}`;
    drawTimeline(); drawIcicle(); drawState();
  }

  // ---- icicle of what is live at the moment ----
  // What the flame graph shows of a range [a, b] (ns), from the embedded allocations: the live
  // set at the moment live bytes were highest in it (its high-water mark), or what was
  // allocated in it and still live at its end (leaked in the range).
  function rangeStacks(a, b) {
    const x = sec(), al = x.allocs, n = al.size.length, by = new Map();
    const alive = (i, t) => al.birth[i] <= t && (al.death[i] < 0 || al.death[i] > t);
    let at = b;
    if (S.rangeMode === "hwm") {
      // Live bytes after all events of each instant in [a, b]; the first highest.
      const ev = [];
      let live = 0;
      for (let i = 0; i < n; i++) {
        if (alive(i, a)) live += al.size[i];
        if (al.birth[i] > a && al.birth[i] <= b) ev.push([al.birth[i], al.size[i]]);
        if (al.death[i] > a && al.death[i] <= b) ev.push([al.death[i], -al.size[i]]);
      }
      ev.sort((p, q) => p[0] - q[0]);
      let best = live;
      at = a;
      for (let k = 0; k < ev.length;) {
        const t = ev[k][0];
        while (k < ev.length && ev[k][0] === t) live += ev[k++][1];
        if (live > best) { best = live; at = t; }
      }
      for (let i = 0; i < n; i++) if (alive(i, at)) by.set(al.stack[i], (by.get(al.stack[i]) || 0) + al.size[i]);
    } else {
      for (let i = 0; i < n; i++) if (al.birth[i] >= a && al.birth[i] <= b && alive(i, b)) by.set(al.stack[i], (by.get(al.stack[i]) || 0) + al.size[i]);
    }
    return { exact: n === x.allocations, range: true, at, list: Array.from(by.entries()) };
  }
  function liveStacks() {
    const x = sec();
    if (S.range) return rangeStacks(S.range[0], S.range[1]);
    if (S.moment === null || S.moment === x.peak_ns) return { exact: true, list: x.sites.filter((s) => s[3] > 0).map((s) => [s[0], s[3]]) };
    const a = x.allocs, by = new Map();
    for (let i = 0; i < a.size.length; i++) {
      const d = a.death[i] < 0 ? Infinity : a.death[i];
      if (a.birth[i] <= S.moment && d > S.moment) by.set(a.stack[i], (by.get(a.stack[i]) || 0) + a.size[i]);
    }
    return { exact: false, list: Array.from(by.entries()) };
  }
  function tree(r, list) {
    const root = { name: "all live memory", bytes: 0, kids: new Map(), plumbing: false, stacks: [] };
    for (const [stack, b] of list) {
      root.bytes += b;
      let n = root;
      const f = shownFrames(r, stack);
      const names = f.length ? f.map((i) => r.frames[i]) : ["(no stack recorded)"];
      names.forEach((name, k) => {
        let c = n.kids.get(name);
        if (!c) { c = { name, bytes: 0, kids: new Map(), plumbing: f.length ? !!r.plumbing[f[k]] : false, parent: n }; n.kids.set(name, c); }
        c.bytes += b; n = c;
      });
    }
    return root;
  }
  function drawIcicle() {
    const box = $("icicle"), r = run(), live = liveStacks();
    const root = tree(r, live.list);
    let top = root;
    if (S.zoomNode) { // follow the zoomed path in the new tree
      let n = root;
      for (const name of S.zoomNode) { n = n.kids.get(name); if (!n) break; }
      if (n) top = n; else S.zoomNode = null;
    }
    box.textContent = "";
    const W = box.clientWidth || 1000, q = S.search.toLowerCase();
    let rows = 0, matched = 0;
    const path = [];
    for (let n = top; n && n !== root; n = n.parent) path.unshift(n.name);
    const place = (n, depth, x, w) => {
      if (w < 1 || depth > 80) return;
      rows = Math.max(rows, depth + 1);
      const d = el("div", { class: "node" + (n.plumbing ? " plumbing" : ""), title: `${n.name}\n${bytes(n.bytes)} (${((100 * n.bytes) / Math.max(top.bytes, 1)).toFixed(1)}%)` });
      d.textContent = `${n.name} — ${bytes(n.bytes)}`;
      d.style.left = x + "px"; d.style.width = w + "px";
      d.dataset.depth = depth;
      d.style.background = n === top ? "#ddd" : siteColor(n.name);
      if (q && n.name.toLowerCase().includes(q)) { d.classList.add("match"); matched++; }
      d.onmouseenter = () => { $("icicle-label").textContent = `${n.name} — ${bytes(n.bytes)}, ${((100 * n.bytes) / Math.max(root.bytes, 1)).toFixed(1)}% of live`; };
      d.onclick = () => {
        if (n === top) { S.zoomNode = path.length ? path.slice(0, -1) : null; }
        else { const p = []; for (let m = n; m && m !== root; m = m.parent) p.unshift(m.name); S.zoomNode = p; }
        drawIcicle();
      };
      box.appendChild(d);
      let cx = x;
      const kids = Array.from(n.kids.values()).sort((a, b) => b.bytes - a.bytes || (a.name < b.name ? -1 : 1));
      for (const k of kids) { const kw = (w * k.bytes) / Math.max(n.bytes, 1); place(k, depth + 1, cx, kw); cx += kw; }
    };
    place(top, 0, 0, W);
    const H = 22;
    for (const d of box.children) { const depth = +d.dataset.depth; d.style.top = (S.flame ? (rows - 1 - depth) : depth) * H + "px"; }
    box.style.height = rows * H + 2 + "px";
    box.dataset.matches = String(matched);
    box.dataset.total = String(root.bytes);
    const sites = {};
    for (const [st, b] of live.list) { const k = userFrame(r, st); sites[k] = (sites[k] || 0) + b; }
    box.dataset.sites = JSON.stringify(sites);
    const only = live.exact ? "every allocation counted" : `the ${sec().allocs.size.length} largest allocations only`;
    if (live.range) {
      $("icicle-note").textContent = S.rangeMode === "hwm"
        ? `The high-water mark of ${dur(S.range[0])} – ${dur(S.range[1])}: live at ${dur(live.at)}, ${bytes(root.bytes)} (${only}).`
        : `Allocated in ${dur(S.range[0])} – ${dur(S.range[1])} and still live at its end: ${bytes(root.bytes)} (${only}).`;
      return;
    }
    $("icicle-note").textContent = live.exact
      ? `Live at the peak (${dur(sec().peak_ns)}), ${bytes(root.bytes)} in all, every allocation counted.`
      : `Live at ${dur(S.moment)}: the ${sec().allocs.size.length} largest allocations only (${bytes(root.bytes)}).`;
  }

  // ---- allocator state, per policy: at its peak, or after any held event ----
  // The state after event k of window w: the window's starting state with the changes of its
  // events up to k applied (kept per policy, so stepping on applies one event's changes).
  function stateAt(p, w, k) {
    const l = p.log.find((x) => x.w === w);
    if (!l) return null;
    if (k >= l.n.length) return { missing: l.n.length };
    let c = p._cache;
    if (!c || c.w !== w || c.k > k) {
      c = { w, k: -1, pos: 0, segs: new Map(), blocks: new Map() };
      for (const [a, size, bl] of l.key) { c.segs.set(a, size); for (const [off, sz, owner, stack] of bl) c.blocks.set(a + off, [sz, owner, stack]); }
    }
    const o = l.ops;
    while (c.k < k) {
      c.k++;
      for (let i = 0; i < l.n[c.k]; i++) {
        const op = o[c.pos], a = l.base + o[c.pos + 1];
        if (op === 0) { c.blocks.set(a, [o[c.pos + 2], o[c.pos + 3] - 1, o[c.pos + 4]]); c.pos += 5; }
        else if (op === 1) { c.blocks.delete(a); c.pos += 2; }
        else if (op === 2) { c.segs.set(a, o[c.pos + 2]); c.pos += 3; }
        else { c.segs.delete(a); c.pos += 2; }
      }
    }
    p._cache = c;
    const addrs = Array.from(c.segs.keys()).sort((x, y) => x - y), bl = Array.from(c.blocks.keys()).sort((x, y) => x - y);
    const segments = [];
    let j = 0;
    for (const a of addrs) {
      const size = c.segs.get(a), list = [];
      while (j < bl.length && bl[j] < a) j++;
      while (j < bl.length && bl[j] < a + size) { const b = c.blocks.get(bl[j]); list.push([bl[j] - a, b[0], b[1], b[2]]); j++; }
      segments.push([a, size, list]);
    }
    return { segments };
  }
  function eventText(r, w, k) {
    const e = wins()[w];
    const what = { a: "allocation", f: "free", t: "refused attempt", c: "empty_cache", l: "memory fraction set" }[e.kind[k]] || "event";
    return `event #${e.first + k} (${what} of ${bytes(e.size[k])}${e.alloc[k] >= 0 ? `, allocation #${e.alloc[k]}` : ""} from ${userFrame(r, e.stack[k])}) at ${dur(e.t[k])}`;
  }
  function drawState() {
    const x = sec(), r = run(), tabs = $("state-tabs"), box = $("state");
    tabs.textContent = ""; box.textContent = "";
    const withMap = x.policies.map((p, k) => [p, k]).filter(([p]) => p.segments.length > 0 || p.log.some((l) => l.key.length || l.ops.length));
    if (!withMap.length) { box.textContent = "No replayed policy with an address space (replay one with --policy)."; return; }
    if (!withMap.some(([, k]) => k === S.statePolicy)) S.statePolicy = withMap[0][1];
    for (const [p, k] of withMap) {
      const b = el("button", { class: k === S.statePolicy ? "on" : "", "data-policy": p.name }, p.name);
      b.onclick = () => { S.statePolicy = k; drawState(); };
      tabs.appendChild(b);
    }
    const p = x.policies[S.statePolicy], ws = wins();
    const nav = el("span", { class: "hint" });
    const prev = el("button", { id: "state-prev" }, "◀ event"), next = el("button", { id: "state-next" }, "event ▶");
    const peakB = el("button", { id: "state-peak" }, "its peak");
    prev.disabled = next.disabled = !ws.length;
    prev.onclick = () => stepEvent(-1); next.onclick = () => stepEvent(1);
    peakB.onclick = () => { S.event = null; drawState(); };
    const held = ws.reduce((m, w) => m + w.t.length, 0);
    nav.append(" ", prev, " ", next, " ", peakB, ` ${held} events held (← and → step one, [ and ] jump between stretches)`);
    tabs.appendChild(nav);
    let st = null, title;
    if (S.event === null) { st = { segments: p.segments }; title = `${p.name} at its peak (${dur(p.peak_ns)})`; }
    else {
      const [w, k] = S.event;
      st = stateAt(p, w, k);
      title = `${p.name} after ${eventText(r, w, k)}`;
      // A moment between the held stretches shows the last held event before it.
      if (S.moment !== null && S.moment > ws[w].t[k] && k === ws[w].t.length - 1 && (w + 1 === ws.length || ws[w + 1].t[0] > S.moment))
        title += `, the last event the page holds before the moment ${dur(S.moment)}`;
      if (!st) { box.textContent = `${p.name}: no state kept for this stretch of events (the page's budget for states ran out).`; $("state-note").textContent = title; box.dataset.event = String(ws[w].first + k); return; }
      if (st.missing !== undefined) { box.textContent = `${p.name} stopped after ${st.missing} events of this stretch (it ran out of memory, or the page's budget for states ran out).`; $("state-note").textContent = title; box.dataset.event = String(ws[w].first + k); return; }
    }
    const segs = st.segments.slice().sort((a, b) => a[0] - b[0]);
    const biggest = Math.max(...segs.map((s) => s[1]), 1);
    const q = matchingStacks(r);
    let used = 0, total = 0, blocksShown = 0;
    const frag = el("div");
    segs.forEach((s) => {
      total += s[1];
      const row = el("div", { class: "segment", "data-address": String(s[0]), "data-size": String(s[1]) });
      // A share of the track right of the labels (156 px), so a small segment keeps a bar.
      row.style.width = `max(3px, calc((100% - 156px) * ${Math.max(0.02, s[1] / biggest)}))`;
      const lab = el("span", { class: "seglabel" }, `${bytes(s[1])} @0x${s[0].toString(16)}`);
      row.appendChild(lab);
      for (const [off, size, owner, stack] of s[2]) {
        used += size;
        const bl = el("div", { class: "block", "data-offset": String(off), "data-size": String(size), "data-owner": String(owner) });
        bl.style.left = (100 * off) / s[1] + "%";
        bl.style.width = Math.max(0.15, (100 * size) / s[1]) + "%";
        const site = userFrame(r, stack);
        bl.style.background = stack ? siteColor(site) : "#5b7fb5";
        if (q && q[stack]) bl.classList.add("match");
        bl.title = `${bytes(size)} block at +0x${off.toString(16)}\n${site}`;
        bl.onclick = (ev) => {
          ev.stopPropagation();
          for (const o of box.querySelectorAll(".block.sel")) o.classList.remove("sel");
          bl.classList.add("sel");
          const ai = owner >= 0 ? x.allocs.index.indexOf(owner) : -1;
          S.selected = ai;
          $("state-detail").textContent = ai >= 0 ? allocText(ai) : `${bytes(size)} block, allocation #${owner}\n\n${stackText(r, stack)}`;
          drawTimeline();
        };
        row.appendChild(bl);
        blocksShown++;
      }
      frag.appendChild(row);
    });
    box.appendChild(frag);
    box.dataset.segments = String(segs.length);
    box.dataset.event = S.event === null ? "" : String(ws[S.event[0]].first + S.event[1]);
    box.dataset.peak = S.event === null ? "1" : "0";
    $("state-note").textContent = `${title}: ${segs.length} segments, ${bytes(total)} reserved, ${bytes(used)} in ${blocksShown} blocks, ${bytes(total - used)} free (hatched) — ${(100 * (1 - used / Math.max(total, 1))).toFixed(1)}% fragmentation${S.event === null && p.blocks_omitted ? `; ${p.blocks_omitted} blocks of smaller segments not listed` : ""}.`;
  }

  // ---- tables ----
  function sortable(table, rows, cols, initial, limit) {
    let key = initial, down = true, all = false;
    const more = el("button", { class: "more" });
    const head = table.querySelector("tr");
    const render = () => {
      while (table.rows.length > 1) table.deleteRow(1);
      const sorted = rows.slice().sort((a, b) => { const x = a[key], y = b[key]; const c = typeof x === "string" ? x.localeCompare(y) : x - y; return down ? -c : c; });
      const shown = all ? sorted : sorted.slice(0, limit || 40);
      for (const row of shown) {
        const tr = table.insertRow();
        cols.forEach((c, k) => { const td = tr.insertCell(); td.textContent = c.fmt ? c.fmt(row[k]) : row[k]; if (k === 0) td.className = "frame"; });
        if (row.tip) tr.title = row.tip;
      }
      [...head.cells].forEach((th, k) => { th.className = "sortable" + (k === key ? (down ? " sorted-down" : " sorted-up") : ""); });
      more.textContent = all ? "show fewer" : `show all ${sorted.length} rows`;
      more.style.display = sorted.length > (limit || 40) ? "" : "none";
      more.onclick = () => { all = !all; render(); };
      if (!more.parentElement) table.after(more);
    };
    [...head.cells].forEach((th, k) => { th.onclick = () => { if (k === key) down = !down; else { key = k; down = typeof rows[0]?.[k] !== "string"; } render(); }; });
    render();
  }
  function siteRows(r, x) {
    const by = new Map();
    const oomBy = new Map();
    for (const p of x.policies) if (p.oom) { const n = userFrame(r, p.oom[4]); oomBy.set(n, (oomBy.get(n) || 0) + 1); }
    for (const [stack, allocs, b, atPeak, refused] of x.sites) {
      const n = userFrame(r, stack);
      let e = by.get(n);
      if (!e) { e = [n, 0, 0, 0, 0]; e.tip = stackText(r, stack); by.set(n, e); }
      e[1] += atPeak; e[2] += allocs; e[3] += b; e[4] += refused;
    }
    for (const [n, k] of oomBy) { let e = by.get(n); if (!e) { e = [n, 0, 0, 0, 0]; by.set(n, e); } e[4] += k; }
    return Array.from(by.values());
  }
  function drawSites() {
    const r = run(), x = sec(), q = S.search.toLowerCase();
    let rows = siteRows(r, x);
    if (q) rows = rows.filter((e) => e[0].toLowerCase().includes(q) || (e.tip || "").toLowerCase().includes(q));
    const t = $("sites");
    t.textContent = "";
    const h = t.insertRow();
    for (const name of ["site (user frame)", "bytes at peak", "allocations", "bytes allocated", "failures"]) h.appendChild(el("th", null, name));
    sortable(t, rows, [{}, { fmt: bytes }, {}, { fmt: bytes }, {}], 1);
    const f = $("failures");
    f.textContent = "";
    for (const p of x.policies) if (p.oom) {
      const li = el("li", null, `${p.name} ran out of memory at ${dur(p.oom[0])} asking ${bytes(p.oom[1])} (stream ${p.oom[3]}) with ${bytes(p.oom[2])} reserved, from ${userFrame(r, p.oom[4])}`);
      li.title = stackText(r, p.oom[4]); li.className = "oom"; f.appendChild(li);
    }
    for (const [t0, size, stack] of x.refused.slice(0, 200)) {
      const li = el("li", null, `the driver refused ${bytes(size)} at ${dur(t0)} (the program went on), from ${userFrame(r, stack)}`);
      li.title = stackText(r, stack); f.appendChild(li);
    }
    if (!f.children.length) f.appendChild(el("li", null, "none: no replayed policy ran out of memory and the driver refused nothing"));
    else if (x.refused_total > 200) f.appendChild(el("li", null, `… ${x.refused_total - 200} more refusals`));
  }
  function drawCompare() {
    const box = $("compare");
    if (!box) return;
    const A = D.runs[0], B = D.runs[1], xa = A.sections[0], xb = B.sections[0];
    const t = $("compare-peaks"); t.textContent = "";
    const h = t.insertRow();
    for (const n of ["", A.name, B.name, "change"]) h.appendChild(el("th", null, n));
    const row = (name, a, b) => { const tr = t.insertRow(); [name, a === null ? "–" : bytes(a), b === null ? "–" : bytes(b), a === null || b === null ? "–" : `${b - a >= 0 ? "+" : "−"}${bytes(Math.abs(b - a))} (${(100 * (b / Math.max(a, 1) - 1)).toFixed(1)}%)`].forEach((v) => { tr.insertCell().textContent = v; }); };
    row("lower bound (peak requested)", xa.lower_bound, xb.lower_bound);
    const names = new Set([...xa.policies.map((p) => p.name), ...xb.policies.map((p) => p.name)]);
    for (const n of names) { const pa = xa.policies.find((p) => p.name === n), pb = xb.policies.find((p) => p.name === n); row(n + " peak reserved", pa ? pa.peak : null, pb ? pb.peak : null); }
    const sa = new Map(siteRows(A, xa).map((e) => [e[0], e[1]])), sb = new Map(siteRows(B, xb).map((e) => [e[0], e[1]]));
    const all = new Set([...sa.keys(), ...sb.keys()]);
    const rows = [];
    for (const n of all) { const a = sa.get(n) || 0, b = sb.get(n) || 0; if (a !== b) rows.push([n, a, b, b - a]); }
    const g = $("compare-sites"); g.textContent = "";
    const hh = g.insertRow();
    for (const n of ["site (user frame)", "at peak in " + A.name, "at peak in " + B.name, "change"]) hh.appendChild(el("th", null, n));
    rows.forEach((r) => { r.abs = Math.abs(r[3]); });
    sortable(g, rows, [{}, { fmt: bytes }, { fmt: bytes }, { fmt: (v) => (v >= 0 ? "+" : "−") + bytes(Math.abs(v)) }], 3);
  }

  // ---- controls ----
  function drawToggles() {
    const box = $("policy-toggles"), x = sec();
    box.textContent = "";
    x.policies.forEach((p) => {
      const lab = el("label");
      const cb = el("input", { type: "checkbox", class: "policy-toggle", "data-policy": p.name });
      cb.checked = !S.hidden.has(p.name);
      cb.onchange = () => { if (cb.checked) S.hidden.delete(p.name); else S.hidden.add(p.name); drawTimeline(); };
      const sw = el("span", { class: "swatch" }); sw.style.background = p.color;
      const far = p.peak > OUTLIER * Math.max(x.lower_bound, 1) ? ", hidden at first: far above the others" : "";
      lab.append(cb, sw, document.createTextNode(`${p.name} (${bytes(p.peak)}${p.oom ? ", out of memory" : ""}${far})`));
      box.appendChild(lab);
    });
  }
  function selectors() {
    const rs = $("run-select");
    if (D.runs.length > 1) {
      D.runs.forEach((r, k) => rs.appendChild(el("option", { value: String(k) }, (D.mode === "ranks" ? `rank ${k}: ` : "") + r.name)));
      rs.onchange = () => { S.run = +rs.value; S.section = 0; reset(); };
    } else rs.parentElement.style.display = "none";
    fillSections();
  }
  function fillSections() {
    const ss = $("section-select");
    ss.textContent = "";
    run().sections.forEach((x, k) => ss.appendChild(el("option", { value: String(k) }, x.label)));
    ss.value = String(S.section);
    ss.onchange = () => { S.section = +ss.value; reset(); };
    ss.parentElement.style.display = run().sections.length > 1 ? "" : "none";
  }
  function reset() {
    fillSections();
    S.selected = -1; S.moment = null; S.zoomNode = null; S.event = null; S.range = null;
    if (!sec()) { $("views").style.display = "none"; return; }
    // Policies far above the lower bound start hidden, so they do not flatten the others.
    S.hidden = new Set(sec().policies.filter((p) => p.peak > OUTLIER * Math.max(sec().lower_bound, 1)).map((p) => p.name));
    $("views").style.display = "";
    const [a, b] = focusRange();
    S.v0 = a; S.v1 = Math.max(b, a + 1);
    drawToggles(); drawTimeline(); drawIcicle(); drawState(); drawSites();
    $("moment").textContent = "moment: the peak";
  }
  function wireControls() {
    let pending = null;
    $("search").addEventListener("input", (ev) => {
      clearTimeout(pending);
      pending = setTimeout(() => {
        S.search = ev.target.value.trim();
        drawTimeline(); drawIcicle(); drawState(); drawSites();
        const c = $("timeline").dataset.highlighted, m = $("icicle").dataset.matches;
        $("search-count").textContent = S.search ? `${c} drawn allocations, ${m} frames of the flame graph match` : "";
      }, 120);
    });
    $("plumbing").onchange = (ev) => { S.plumbing = !ev.target.checked; S.zoomNode = null; drawIcicle(); };
    $("flame").onchange = (ev) => { S.flame = ev.target.checked; drawIcicle(); };
    document.addEventListener("keydown", (ev) => {
      if (ev.target && (ev.target.tagName === "INPUT" || ev.target.tagName === "SELECT")) return;
      if (ev.key === "ArrowRight") { stepEvent(1); ev.preventDefault(); }
      else if (ev.key === "ArrowLeft") { stepEvent(-1); ev.preventDefault(); }
      else if (ev.key === "[" || ev.key === "]") stepEvent(ev.key === "]" ? 1 : -1, true);
      else if (ev.key === "+" || ev.key === "=") zoomBy(1 / 1.5, 0.5);
      else if (ev.key === "-") zoomBy(1.5, 0.5);
    });
    window.addEventListener("resize", () => { drawTimeline(); drawIcicle(); });
  }

  selectors();
  wireTimeline();
  wireControls();
  if (run().sections.length) reset(); else $("views").style.display = "none";
  drawCompare();
  // For the browser tests and the curious: the view state.
  window.vramtraceView = { S, T };
  window.vramtraceData = D;
  window.vramtraceReadyMs = performance.now();
  document.body.dataset.ready = "1";
})();
