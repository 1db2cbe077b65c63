// gpuguard report viewer. Reads the JSON block #gg-data that `gpuguard report --html` embedded and
// draws the page. No libraries, no network: everything here is plain DOM and SVG.
//
// Data: {report: <the report file, docs/report-schema.md>, analysis: {headline, why, advice, ...},
//        view: {stacks: {id: {frames: [{label, key, kind, detail, best}] outermost first, best, phase}}}}
// When the script finishes without error it sets <html data-gg-status="ok">; any uncaught error sets
// "error: ..." and shows a banner. The browser test reads that attribute.
//
// Two views of the memory when the report has PyTorch's tensor view (tensor_view.source "c10"): by
// tensor (the caching allocator's live blocks, what memory_allocated() counts) and by segment (the
// driver allocations, what memory_reserved() and nvidia-smi count). The switch in the header picks
// which one the flame graph and the tables show; by tensor first, since that names the code holding
// the memory. Reports without one show the segments only, as before, and no switch.
//
// Rows (timeline points, blocks, segments, mappings) are arrays: their columns are read by name from
// COLUMN, which the build puts before this script (tools/report/schema_js.py, from
// common/report/schema.h), so that this page reads a row as the shim writes it.
'use strict';

(function () {
  const root = document.documentElement;
  function fail(msg) {
    root.setAttribute('data-gg-status', 'error: ' + msg);
    const box = document.getElementById('page-error');
    if (box) {
      box.hidden = false;
      box.textContent = 'This page hit an error while drawing: ' + msg;
    }
  }
  window.addEventListener('error', e => fail((e && e.message) || 'unknown error'));
  window.addEventListener('unhandledrejection', e => fail(String(e && e.reason)));

  // ---- helpers ------------------------------------------------------------------------------
  const UNITS = ['KiB', 'MiB', 'GiB', 'TiB', 'PiB'];
  function bytes(n) {
    if (n === null || n === undefined || !isFinite(n)) return 'unknown';
    const neg = n < 0;
    let v = Math.abs(n);
    if (v < 1024) return (neg ? '-' : '') + v + ' B';
    let u = -1;
    while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
    return (neg ? '-' : '') + v.toFixed(2) + ' ' + UNITS[u];
  }
  function shortBytes(n) {  // axis labels: "1.5 GiB", "512 MiB"
    if (n < 1024) return n + ' B';
    let v = n, u = -1;
    while (v >= 1024 && u < UNITS.length - 1) { v /= 1024; u++; }
    return (Math.round(v * 10) / 10) + ' ' + UNITS[u];
  }
  function pct(part, whole) { return whole > 0 ? Math.round(100 * part / whole) : 0; }
  function duration(ns) {
    const s = ns / 1e9;
    if (Math.abs(s) < 1e-3) return Math.round(ns / 1e3) + ' µs';
    if (Math.abs(s) < 1) return Math.round(ns / 1e6) + ' ms';
    if (Math.abs(s) < 120) return s.toFixed(1) + ' s';
    return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
  }
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    if (attrs) {
      for (const [k, v] of Object.entries(attrs)) {
        if (v === null || v === undefined || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = v;
        else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
        else e.setAttribute(k, v === true ? '' : v);
      }
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }
  const SVG = 'http://www.w3.org/2000/svg';
  function svg(tag, attrs, text) {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  const tooltip = document.getElementById('tooltip');
  function showTip(ev, text) {
    tooltip.textContent = text;
    tooltip.hidden = false;
    const w = tooltip.offsetWidth, h = tooltip.offsetHeight;
    let x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + w > window.innerWidth - 8) x = ev.clientX - w - 14;
    if (y + h > window.innerHeight - 8) y = ev.clientY - h - 14;
    tooltip.style.left = x + 'px';
    tooltip.style.top = y + 'px';
  }
  function hideTip() { tooltip.hidden = true; }
  function num(v) { return typeof v === 'number' && isFinite(v) ? v : null; }
  function obj(v) { return v && typeof v === 'object' && !Array.isArray(v) ? v : {}; }
  function arr(v) { return Array.isArray(v) ? v : []; }

  // ---- data ---------------------------------------------------------------------------------
  const D = JSON.parse(document.getElementById('gg-data').textContent);
  const R = obj(D.report), A = obj(D.analysis), V = obj(D.view);
  const STACKS = obj(V.stacks);
  const usage = obj(R.usage), limit = R.limit && typeof R.limit === 'object' ? R.limit : null;
  const failed = R.failed_request && typeof R.failed_request === 'object' ? R.failed_request : null;
  const failedStack = failed && typeof failed.stack === 'string' ? failed.stack : null;
  const proc = obj(R.process), dev = obj(R.device);

  const TV = R.tensor_view && typeof R.tensor_view === 'object' ? R.tensor_view : null;
  const hasTensors = !!(TV && TV.source === 'c10');
  const tvOom = TV && TV.oom && typeof TV.oom === 'object' ? TV.oom : null;
  const mem = {view: hasTensors ? 'tensor' : 'segment'};

  function stackFrames(id) { return id && STACKS[id] ? arr(STACKS[id].frames) : []; }
  function bestLabel(id) { return id && STACKS[id] ? STACKS[id].best : '[unknown stack]'; }

  // A stack as a list, innermost first (where the allocation was asked for), plumbing dimmed.
  function frameList(id, limitCount) {
    const frames = stackFrames(id).slice().reverse();
    if (!frames.length) return el('div', {class: 'empty', text: 'No stack was recorded.'});
    const box = el('div');
    const ol = el('ol', {class: 'frames'});
    frames.forEach((f, i) => {
      const li = el('li', {class: [f.kind === 'plumbing' ? 'plumbing' : '', f.best ? 'best' : ''].join(' ').trim() || null,
                           title: f.detail || null},
                    f.label, f.kind === 'python' || f.kind === 'pylib' ? null : el('span', {class: 'where', text: f.kind === 'plumbing' ? 'CUDA / gpuguard' : ''}));
      if (limitCount && i >= limitCount) li.hidden = true;
      ol.append(li);
    });
    box.append(ol);
    if (limitCount && frames.length > limitCount) {
      const more = el('span', {class: 'more', text: 'show all ' + frames.length + ' frames'});
      more.addEventListener('click', () => { ol.querySelectorAll('li').forEach(li => { li.hidden = false; }); more.remove(); });
      box.append(more);
    }
    return box;
  }

  // ---- header and summary -------------------------------------------------------------------
  function drawHeader() {
    const bits = [];
    if (V.command) bits.push(V.command);
    if (num(proc.pid) !== null) bits.push('pid ' + proc.pid);
    if (proc.hostname) bits.push(proc.hostname);
    if (V.time) bits.push(V.time);
    document.getElementById('who').textContent = bits.join(' · ');
    document.getElementById('footer').textContent =
      (V.gpuguard || 'gpuguard') + ' · ' + (V.name || '') + ' · schema ' + R.schema + ' v' + R.version;
  }

  function drawSummary() {
    const box = document.getElementById('summary');
    const cls = A.failure ? 'fail' : A.kind === 'warn' ? 'warn' : 'ok';
    const banner = el('div', {class: 'banner ' + cls}, el('div', {class: 'headline', text: A.headline || 'gpuguard report'}));
    const why = arr(A.why);
    if (why.length) banner.append(el('ul', {class: 'why'}, ...why.map(w => el('li', {text: w}))));
    box.append(banner);

    const cards = el('div', {class: 'cards'});
    function card(k, v, s) { cards.append(el('div', {class: 'card'}, el('div', {class: 'k', text: k}), el('div', {class: 'v', text: v}), el('div', {class: 's', text: s || ''}))); }
    const live = num(V.live_bytes) || 0;
    if (limit) card('limit', bytes(num(limit.bytes)), [limit.scope, limit.source && (limit.source + (limit.spec ? '=' + limit.spec : ''))].filter(Boolean).join(' · '));
    else card('limit', 'none', 'no quota on this device');
    if (num(usage.container_bytes) !== null) card('container', bytes(usage.container_bytes), limit && num(limit.bytes) ? pct(usage.container_bytes, limit.bytes) + '% of the limit' : 'all processes');
    card('this process', bytes(live), num(usage.live_allocations) !== null ? usage.live_allocations + ' live allocations' : '');
    if (num(V.peak_bytes) !== null) card('peak', bytes(V.peak_bytes), limit && num(limit.bytes) ? pct(V.peak_bytes, limit.bytes) + '% of the limit' : '');
    if (failed && num(failed.bytes) !== null) card('request', bytes(failed.bytes), (failed.api || '') + (failed.driver_api && failed.driver_api !== failed.api ? ' → ' + failed.driver_api : ''));
    if (TV && num(TV.allocated_bytes) !== null) {
      const blocks = obj(TV.blocks);
      card('tensors', bytes(TV.allocated_bytes), [num(blocks.count) !== null && hasTensors ? blocks.count + ' live blocks' : 'PyTorch allocated',
        num(TV.peak_allocated_bytes) !== null ? 'peak ' + bytes(TV.peak_allocated_bytes) : null].filter(Boolean).join(' · '));
    }
    if (TV && num(TV.reserved_bytes) !== null) {
      const cached = num(TV.allocated_bytes) !== null ? TV.reserved_bytes - TV.allocated_bytes : null;
      card('reserved', bytes(TV.reserved_bytes), cached !== null && cached >= 0 ? bytes(cached) + ' cached, in no tensor' : 'by PyTorch');
    }
    if (num(dev.total_bytes) !== null && dev.total_bytes >= 0) card('device', bytes(dev.total_bytes), (dev.name || 'device') + (num(dev.free_bytes) !== null && dev.free_bytes >= 0 ? ' · ' + bytes(dev.free_bytes) + ' free' : ''));
    box.append(cards);

    // The meter: what was held, by whom, and where the failed request would have ended, against the limit.
    const lim = limit && num(limit.bytes);
    if (lim) {
      const container = num(usage.container_bytes) !== null ? usage.container_bytes : live;
      const others = Math.max(0, container - live);
      const req = failed && num(failed.bytes) ? failed.bytes : 0;
      const scale = Math.max(lim, container + req) * 1.02;
      const bar = el('div', {class: 'bar'});
      let x = 0;
      function part(c, v, label) {
        if (v <= 0) return;
        const p = el('div', {class: 'part ' + c, title: label});
        p.style.left = (100 * x / scale) + '%';
        p.style.width = (100 * v / scale) + '%';
        bar.append(p);
        x += v;
      }
      part('self', live, 'this process: ' + bytes(live));
      part('other', others, 'other processes: ' + bytes(others));
      part('request', req, 'the failed request: ' + bytes(req));
      const l = el('div', {class: 'limit', title: 'limit ' + bytes(lim)});
      l.style.left = 'calc(' + (100 * lim / scale) + '% - 1px)';
      bar.append(l);
      const keys = el('div', {class: 'keys'},
        el('span', null, el('i', {style: 'background:var(--self)'}), 'this process ' + bytes(live)),
        others > 0 ? el('span', null, el('i', {style: 'background:var(--other)'}), 'other processes ' + bytes(others)) : null,
        req > 0 ? el('span', null, el('i', {style: 'background:var(--request)'}), 'failed request ' + bytes(req)) : null,
        el('span', null, el('i', {style: 'background:var(--fail)'}), 'limit ' + bytes(lim)));
      box.append(el('div', {class: 'meter'}, bar, keys));
    }

    const advice = arr(A.advice);
    if (advice.length) {
      const adv = el('div', {class: 'advice'}, el('h3', {text: 'Advice'}));
      for (const a of advice) adv.append(el('div', {class: 'item', 'data-advice': a.id}, el('b', {text: a.title}), el('span', {text: a.detail})));
      box.append(adv);
    }
  }

  // ---- timeline -----------------------------------------------------------------------------
  function drawTimeline() {
    const host = document.getElementById('timeline');
    host.textContent = '';
    const tl = obj(R.timeline);
    const P = COLUMN.point, TP = COLUMN.tensor_point;
    const pts = arr(tl.points).filter(p => Array.isArray(p) && num(p[P.t_ns]) !== null && num(p[P.bytes]) !== null)
      .map(p => [p[P.t_ns], p[P.bytes]]).sort((a, b) => a[0] - b[0]);
    // PyTorch's allocated and reserved ([t_ns, allocated, reserved]), moved onto the process timeline's
    // clock: both count from the process's first hooked call, but each file says its own t0.
    const tvl = TV ? obj(TV.timeline) : {};
    const tvT0 = num(tvl.t0_unix_ns);
    const t0u = num(tl.t0_unix_ns) !== null ? num(tl.t0_unix_ns) : tvT0;
    const shift = t0u !== null && tvT0 !== null ? tvT0 - t0u : 0;
    const tvPts = arr(tvl.points)
      .filter(p => Array.isArray(p) && num(p[TP.t_ns]) !== null && num(p[TP.allocated]) !== null && num(p[TP.reserved]) !== null)
      .map(p => [p[TP.t_ns] + shift, p[TP.allocated], p[TP.reserved]]).sort((a, b) => a[0] - b[0]);
    // The report's own moment, on the timeline's clock: where the failure goes.
    let tEnd = pts.length ? pts[pts.length - 1][0] : 0;
    if (tvPts.length) tEnd = Math.max(tEnd, tvPts[tvPts.length - 1][0]);
    const tReport = t0u !== null && num(R.time_unix_ns) !== null ? R.time_unix_ns - t0u : null;
    if (tReport !== null && tReport > tEnd) tEnd = tReport;
    if (pts.length && tReport !== null && tReport > pts[pts.length - 1][0]) pts.push([tReport, pts[pts.length - 1][1]]);
    if (tvPts.length && tReport !== null && tReport > tvPts[tvPts.length - 1][0]) tvPts.push([tReport, ...tvPts[tvPts.length - 1].slice(1)]);
    // A short run's timeline can be a single point (the step of the failure, at the report's own
    // moment), which left no time range to draw. The process held nothing at its first hooked call
    // (time 0), so the line starts there; a lone point at time 0 is held for a millisecond.
    if (pts.length === 1) {
      if (pts[0][0] > 0) pts.unshift([0, 0]);
      else pts.push([Math.max(1e6, tEnd), pts[0][1]]);
      tEnd = Math.max(tEnd, pts[pts.length - 1][0]);
    }
    const tvLines = tvPts.length >= 2;
    if (pts.length < 2 && !tvLines) {
      host.append(el('div', {class: 'empty', text: 'This report has no usage timeline.'}));
      return;
    }
    // The request c10 could not serve, at its own moment (the report comes a little after it).
    const tOom = tvOom && t0u !== null && num(tvOom.time_unix_ns) !== null ? tvOom.time_unix_ns - t0u : null;
    if (tOom !== null && tOom > tEnd) tEnd = tOom;
    const peak = obj(R.peak);
    const tPeak = t0u !== null && num(peak.time_unix_ns) !== null ? peak.time_unix_ns - t0u : null;
    const lim = limit && num(limit.bytes);
    let maxY = 0;
    for (const p of pts) maxY = Math.max(maxY, p[1]);
    for (const p of tvPts) maxY = Math.max(maxY, p[1], p[2]);
    if (lim) maxY = Math.max(maxY, lim);
    if (num(V.peak_bytes)) maxY = Math.max(maxY, V.peak_bytes);
    maxY = maxY * 1.08 || 1;
    const tStart = pts.length >= 2 && tvLines ? Math.min(pts[0][0], tvPts[0][0]) : pts.length >= 2 ? pts[0][0] : tvPts[0][0];
    const span = Math.max(1, tEnd - tStart);

    const W = Math.max(480, host.clientWidth || 900), H = 260;
    const m = {l: 70, r: 18, t: 14, b: 30};
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    const X = t => m.l + pw * (t - tStart) / span;
    const Y = b => m.t + ph * (1 - b / maxY);
    const s = svg('svg', {viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: 'img', 'aria-label': 'GPU memory of this process over time'});

    // Axes: bytes on nice binary steps, time in seconds.
    const gy = svg('g', {class: 'axis grid'});
    const unit = Math.pow(1024, Math.max(0, Math.floor(Math.log(maxY) / Math.log(1024))));
    const raw = maxY / unit / 5;
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = ([1, 2, 2.5, 5, 10].map(k => k * mag).find(k => k >= raw) || 10 * mag) * unit;
    for (let v = 0; v <= maxY; v += step) {
      gy.append(svg('line', {x1: m.l, x2: W - m.r, y1: Y(v), y2: Y(v)}));
      gy.append(svg('text', {x: m.l - 8, y: Y(v) + 4, 'text-anchor': 'end'}, shortBytes(v)));
    }
    s.append(gy);
    const gx = svg('g', {class: 'axis'});
    const secs = span / 1e9;
    const xraw = secs / 8, xmag = Math.pow(10, Math.floor(Math.log10(xraw || 1)));
    const xstep = ([1, 2, 5, 10].map(k => k * xmag).find(k => k >= xraw) || 10 * xmag);
    for (let v = 0; v <= secs + 1e-9; v += xstep) {
      const x = X(tStart + v * 1e9);
      gx.append(svg('line', {x1: x, x2: x, y1: H - m.b, y2: H - m.b + 4}));
      gx.append(svg('text', {x, y: H - m.b + 17, 'text-anchor': 'middle'}, (xstep < 1 ? v.toFixed(Math.min(3, -Math.floor(Math.log10(xstep)))) : Math.round(v)) + ' s'));
    }
    gx.append(svg('line', {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b}));
    s.append(gx);

    // Usage is a step function: it holds its value until the next point.
    function steps(list, i) {
      let d = `M ${X(list[0][0])} ${Y(list[0][i])}`;
      for (let k = 1; k < list.length; k++) d += ` H ${X(list[k][0])} V ${Y(list[k][i])}`;
      return d;
    }
    if (pts.length >= 2) {
      const d = steps(pts, 1);
      s.append(svg('path', {class: 'area', d: d + ` V ${Y(0)} H ${X(pts[0][0])} Z`}));
      s.append(svg('path', {class: 'line', d}));
    }
    // PyTorch's two lines, as memory_viz draws them: reserved (its segments) over allocated (its tensors).
    if (tvLines) {
      s.append(svg('path', {class: 'tv-reserved', d: steps(tvPts, 2)}));
      s.append(svg('path', {class: 'tv-allocated', d: steps(tvPts, 1)}));
    }

    if (lim) {
      s.append(svg('line', {class: 'limit-line', x1: m.l, x2: W - m.r, y1: Y(lim), y2: Y(lim)}));
      s.append(svg('text', {class: 'limit-label', x: m.l + 6, y: Y(lim) - 5}, 'limit ' + bytes(lim)));
    }
    if (tPeak !== null && num(V.peak_bytes) !== null && tPeak >= tStart && tPeak <= tEnd) {
      s.append(svg('circle', {class: 'peak-dot', cx: X(tPeak), cy: Y(V.peak_bytes), r: 5}));
      const right = X(tPeak) > m.l + pw * 0.7;
      s.append(svg('text', {class: 'peak-label', x: X(tPeak) + (right ? -9 : 9), y: Y(V.peak_bytes) + (Y(V.peak_bytes) < m.t + 34 ? 18 : -9), 'text-anchor': right ? 'end' : 'start'}, 'peak ' + bytes(V.peak_bytes)));
    }
    if (A.failure && tReport !== null) {
      const x = X(tReport);
      s.append(svg('line', {class: 'fail-line', x1: x, x2: x, y1: m.t, y2: H - m.b}));
      s.append(svg('text', {class: 'fail-label', x: x - 6, y: m.t + 12, 'text-anchor': 'end'}, 'OOM' + (failed && num(failed.bytes) ? ': +' + bytes(failed.bytes) : '')));
    }
    if (tOom !== null && tOom >= tStart) {
      // Marked on the allocated line and labelled just above it, between allocated and reserved (the
      // memory cached in no tensor, which could not serve the request): the top of the chart holds the
      // limit's, the peak's and the report's own OOM labels.
      const x = X(tOom), a = num(tvOom.allocated_bytes);
      s.append(svg('line', {class: 'oom-line', x1: x, x2: x, y1: m.t, y2: H - m.b}));
      if (a !== null) s.append(svg('circle', {class: 'oom-dot', cx: x, cy: Y(a), r: 4}));
      const right = x > m.l + pw * 0.5;
      s.append(svg('text', {class: 'fail-label', x: x + (right ? -8 : 8), y: a !== null ? Math.max(Y(a) - 10, m.t + 44) : H - m.b - 6,
        'text-anchor': right ? 'end' : 'start'}, 'PyTorch OOM: asked for ' + bytes(num(tvOom.requested_bytes))));
      host.setAttribute('data-oom', String(Math.round(tOom)));
    }

    // Hover: the value under the cursor.
    const cursor = svg('line', {class: 'cursor', y1: m.t, y2: H - m.b, x1: -10, x2: -10});
    s.append(cursor);
    const hit = svg('rect', {x: m.l, y: m.t, width: pw, height: ph, fill: 'transparent'});
    hit.addEventListener('mousemove', ev => {
      const r = s.getBoundingClientRect();
      const sx = (ev.clientX - r.left) * (W / r.width);
      const t = tStart + (sx - m.l) / pw * span;
      cursor.setAttribute('x1', sx);
      cursor.setAttribute('x2', sx);
      let text = duration(t - tStart);
      if (pts.length >= 2) {
        let v = pts[0][1];
        for (const p of pts) { if (p[0] <= t) v = p[1]; else break; }
        text += '\n' + bytes(v) + (lim ? ' (' + pct(v, lim) + '% of the limit)' : '');
      }
      if (tvLines) {
        let v = tvPts[0];
        for (const p of tvPts) { if (p[0] <= t) v = p; else break; }
        text += '\nPyTorch: ' + bytes(v[1]) + ' allocated, ' + bytes(v[2]) + ' reserved';
      }
      showTip(ev, text);
    });
    hit.addEventListener('mouseleave', () => { hideTip(); cursor.setAttribute('x1', -10); cursor.setAttribute('x2', -10); });
    s.append(hit);
    host.append(s);
    host.setAttribute('data-points', String(pts.length));
    const note = document.getElementById('timeline-note');
    note.textContent = 'this process, ' + pts.length + ' points over ' + duration(span);
    if (tvLines) {
      host.setAttribute('data-tensor-points', String(tvPts.length));
      note.textContent += '; PyTorch\u2019s allocated and reserved, ' + tvPts.length + ' points';
      host.append(el('div', {class: 'chart-keys'},
        pts.length >= 2 ? el('span', null, el('i', {class: 'k-line'}), 'this process (its driver allocations)') : null,
        el('span', null, el('i', {class: 'k-reserved'}), 'reserved by PyTorch (its segments)'),
        el('span', null, el('i', {class: 'k-allocated'}), 'allocated to tensors')));
    }
  }

  // ---- flame graph (icicle: outermost frame on top) ------------------------------------------
  const flame = {which: 'live', zoom: [], search: ''};
  function buildTree(list) {
    const rootNode = {label: 'all', key: '', kind: 'root', value: 0, count: 0, children: new Map(), stacks: [], detail: ''};
    for (const e of arr(list)) {
      const b = num(e && e.bytes);
      if (!b) continue;
      rootNode.value += b;
      rootNode.count += num(e.count) || 0;
      let node = rootNode;
      let frames = stackFrames(e.stack);
      if (!frames.length) frames = [{label: '[unknown stack]', key: 'unknown', kind: 'plumbing', detail: ''}];
      for (const f of frames) {
        let c = node.children.get(f.key);
        if (!c) {
          c = {label: f.label, key: f.key, kind: f.kind, detail: f.detail, value: 0, count: 0, children: new Map(), stacks: [], parent: node};
          node.children.set(f.key, c);
        }
        c.value += b;
        c.count += num(e.count) || 0;
        node = c;
      }
      node.stacks.push(e.stack);
    }
    return rootNode;
  }
  const trees = {
    segment: {live: buildTree(R.by_stack), peak: buildTree(obj(R.peak).by_stack)},
    tensor: hasTensors ? {live: buildTree(TV.by_stack), peak: buildTree(TV.peak_by_stack)} : null,
  };
  // The failed request's own path through the tree (not every node that shares a frame with it).
  const failedPath = stackFrames(failedStack).map(f => f.key).join('\u001e');
  function pathOf(node) {
    const keys = [];
    for (let n = node; n && n.parent; n = n.parent) keys.unshift(n.key);
    return keys.join('\u001e');
  }

  function colour(node) {
    let h = 0;
    for (let i = 0; i < node.label.length; i++) h = (h * 31 + node.label.charCodeAt(i)) >>> 0;
    const j = (h % 1000) / 1000;  // a stable small variation, so neighbours differ
    switch (node.kind) {
      case 'python': return `hsl(${24 + j * 14}, 88%, ${60 + j * 8}%)`;
      case 'pylib': return `hsl(${44 + j * 10}, 78%, ${60 + j * 8}%)`;
      case 'native': return `hsl(${195 + j * 18}, 55%, ${58 + j * 10}%)`;
      default: return `hsl(220, 8%, ${70 + j * 8}%)`;
    }
  }

  function drawFlame() {
    const host = document.getElementById('flame');
    const crumbs = document.getElementById('flame-crumbs');
    const detail = document.getElementById('flame-detail');
    host.textContent = '';
    crumbs.textContent = '';
    const tree = trees[mem.view][flame.which];
    host.setAttribute('data-view', mem.view);
    if (!tree.value) {
      host.style.height = 'auto';
      host.append(el('div', {class: 'empty', text: flame.which === 'peak' ? 'The report has no stacks for the peak.' : 'No live memory by stack in this report.'}));
      return;
    }
    // Resolve the zoom path (a list of keys from the root) against this tree.
    let focus = tree;
    const path = [];
    for (const k of flame.zoom) {
      const c = focus.children.get(k);
      if (!c) break;
      focus = c;
      path.push(c);
    }
    crumbs.append(el('a', {text: 'all', onclick: () => { flame.zoom = []; drawFlame(); }}));
    path.forEach((n, i) => {
      crumbs.append(' › ');
      crumbs.append(el('a', {text: n.label, onclick: () => { flame.zoom = flame.zoom.slice(0, i + 1); drawFlame(); }}));
    });

    const W = host.clientWidth || 1000;
    const rowH = 22;
    const minPx = 2;
    const q = flame.search.trim().toLowerCase();
    let maxDepth = 0, matched = 0;
    const frag = document.createDocumentFragment();
    function place(node, depth, x, w) {
      if (w < minPx) return;
      maxDepth = Math.max(maxDepth, depth);
      const isRoot = depth === 0;
      const label = isRoot
        ? (path.length ? '↑ ' + node.label : mem.view === 'tensor' ? 'all live tensors' : 'all live memory') + ' — ' + bytes(node.value)
        : node.label;
      const div = el('div', {class: 'node' + (isRoot ? ' root' : ''), title: null});
      div.textContent = w > 30 ? label : '';
      div.style.left = x + 'px';
      div.style.width = Math.max(1, w - 1) + 'px';
      div.style.top = (depth * rowH) + 'px';
      if (!isRoot) div.style.background = colour(node);
      if (!isRoot && failedPath && flame.which === 'live' && (failedPath + '\u001e').startsWith(pathOf(node) + '\u001e')) {
        div.classList.add('failed');
      }
      if (q) {
        if (!isRoot && (node.label.toLowerCase().includes(q) || String(node.detail || '').toLowerCase().includes(q))) { div.classList.add('match'); matched++; }
        else if (!isRoot) div.classList.add('dim');
      }
      const info = () => node.label + '\n' + bytes(node.value) + ' · ' + pct(node.value, tree.value) + '% of all' +
        (node.parent && node.parent.value ? ' · ' + pct(node.value, node.parent.value) + '% of its caller' : '') +
        (node.count ? ' · ' + node.count + (mem.view === 'tensor' ? ' tensor' : ' allocation') + (node.count === 1 ? '' : 's') : '') +
        (node.detail ? '\n' + node.detail : '');
      div.addEventListener('mouseenter', ev => { detail.textContent = info(); showTip(ev, node.label + '\n' + bytes(node.value) + ' (' + pct(node.value, tree.value) + '%)'); });
      div.addEventListener('mousemove', ev => showTip(ev, node.label + '\n' + bytes(node.value) + ' (' + pct(node.value, tree.value) + '%)'));
      div.addEventListener('mouseleave', hideTip);
      div.addEventListener('click', () => {
        hideTip();
        if (isRoot) { flame.zoom = flame.zoom.slice(0, -1); }
        else {
          const keys = [];
          for (let n = node; n && n.parent; n = n.parent) keys.unshift(n.key);
          flame.zoom = keys;
        }
        drawFlame();
      });
      frag.append(div);
      const kids = Array.from(node.children.values()).sort((a, b) => b.value - a.value);
      let cx = x;
      for (const c of kids) {
        const cw = w * c.value / node.value;
        place(c, depth + 1, cx, cw);
        cx += cw;
      }
    }
    place(focus, 0, 0, W);
    host.append(frag);
    host.style.height = ((maxDepth + 1) * rowH + 2) + 'px';
    host.setAttribute('data-nodes', String(host.childElementCount));
    if (q) detail.textContent = matched + ' frame' + (matched === 1 ? '' : 's') + ' match "' + flame.search + '"';
  }

  function setupFlame() {
    const live = document.getElementById('flame-live'), peakB = document.getElementById('flame-peak');
    function pick(which) {
      flame.which = which;
      flame.zoom = [];
      live.classList.toggle('on', which === 'live');
      peakB.classList.toggle('on', which === 'peak');
      drawFlame();
    }
    live.addEventListener('click', () => pick('live'));
    peakB.addEventListener('click', () => { if (!peakB.disabled) pick('peak'); });
    const search = document.getElementById('flame-search');
    search.addEventListener('input', () => { flame.search = search.value; drawFlame(); });
    showView();
  }

  // The view switch: by tensor or by segment, for the flame graph and the tables together.
  const VIEW_TEXT = {
    tensor: {flame: 'Live tensors by stack', holders: 'live tensor bytes by stack (PyTorch\u2019s blocks) · click a row for its stack',
             allocs: 'Largest live tensors', allocsNote: 'blocks of PyTorch\u2019s caching allocator · click a column to sort, a row for its stack'},
    segment: {flame: 'Live memory by stack', holders: 'live bytes by stack · click a row for its stack',
              allocs: 'Largest live allocations', allocsNote: 'click a column to sort, a row for its stack'},
  };
  function showView() {
    const peakB = document.getElementById('flame-peak');
    const noPeak = !trees[mem.view].peak.value;
    peakB.disabled = noPeak;
    if (noPeak) peakB.title = 'This report has no stacks for the peak';
    else peakB.removeAttribute('title');
    if (noPeak && flame.which === 'peak') {
      flame.which = 'live';
      document.getElementById('flame-live').classList.add('on');
      peakB.classList.remove('on');
    }
    if (hasTensors) {
      const t = VIEW_TEXT[mem.view];
      // The headings' own text is their first node; their <small> notes follow it.
      document.getElementById('flame-title').firstChild.nodeValue = t.flame + ' ';
      document.getElementById('holders-note').textContent = t.holders;
      document.getElementById('allocs-title').firstChild.nodeValue = t.allocs + ' ';
      document.getElementById('allocs-note').textContent = t.allocsNote;
      for (const v of ['tensor', 'segment']) {
        const b = document.getElementById('view-' + v);
        b.classList.toggle('on', v === mem.view);
        b.setAttribute('aria-pressed', String(v === mem.view));
      }
      document.getElementById('view-switch').setAttribute('data-view', mem.view);
    }
    drawFlame();
  }
  function setupViewSwitch() {
    if (!hasTensors) return;
    document.getElementById('view-switch').hidden = false;
    for (const v of ['tensor', 'segment']) {
      document.getElementById('view-' + v).addEventListener('click', () => {
        if (mem.view === v) return;
        mem.view = v;
        flame.zoom = [];
        showView();
        drawHolders();
        drawAllocs();
      });
    }
  }

  // ---- sortable tables ----------------------------------------------------------------------
  // columns: [{key, label, type: 'bytes'|'num'|'text', value: row => sortable value, cell: row => Node|string}]
  function table(host, columns, rows, sortKey, sortDir, expand) {
    host.textContent = '';
    if (!rows.length) { host.append(el('div', {class: 'empty', text: 'None in this report.'})); return; }
    let key = sortKey, dir = sortDir;
    const thead = el('thead'), tbody = el('tbody');
    const trh = el('tr');
    const ths = columns.map(c => {
      const th = el('th', {class: 'sortable' + (c.type !== 'text' ? ' num' : ''), scope: 'col', tabindex: '0', text: c.label, 'data-key': c.key});
      const go = () => {
        if (key === c.key) dir = dir === 'asc' ? 'desc' : 'asc';
        else { key = c.key; dir = c.type === 'text' ? 'asc' : 'desc'; }
        render();
      };
      th.addEventListener('click', go);
      th.addEventListener('keydown', e => { if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); go(); } });
      trh.append(th);
      return th;
    });
    thead.append(trh);
    const tableEl = el('table', null, thead, tbody);
    host.append(el('div', {class: 'tablewrap'}, tableEl));
    function render() {
      const col = columns.find(c => c.key === key) || columns[0];
      const sorted = rows.slice().sort((a, b) => {
        const va = col.value(a), vb = col.value(b);
        let r;
        if (typeof va === 'number' && typeof vb === 'number') r = va - vb;
        else r = String(va === null || va === undefined ? '' : va).localeCompare(String(vb === null || vb === undefined ? '' : vb));
        return dir === 'asc' ? r : -r;
      });
      ths.forEach((th, i) => {
        if (columns[i].key === key) th.setAttribute('aria-sort', dir === 'asc' ? 'ascending' : 'descending');
        else th.removeAttribute('aria-sort');
      });
      tbody.textContent = '';
      for (const row of sorted) {
        const tr = el('tr', {class: expand ? 'clickable' : null});
        for (const c of columns) {
          const v = c.cell(row);
          tr.append(el('td', {class: c.type !== 'text' ? 'num' : null}, v instanceof Node ? v : String(v)));
        }
        tbody.append(tr);
        if (expand) {
          tr.addEventListener('click', () => {
            const next = tr.nextElementSibling;
            if (next && next.classList.contains('stackrow')) { next.remove(); tr.classList.remove('open'); return; }
            tr.classList.add('open');
            tr.after(el('tr', {class: 'stackrow'}, el('td', {colspan: String(columns.length)}, expand(row))));
          });
        }
      }
      tableEl.setAttribute('data-sort', key + ':' + dir);
    }
    render();
  }

  function barCell(v, max) {
    const w = max > 0 ? Math.max(1, Math.round(60 * v / max)) : 0;
    const b = el('span', {class: 'inbar'});
    b.style.width = w + 'px';
    return el('span', null, b, bytes(v));
  }

  function bestCell(id) {
    const s = el('span', null, bestLabel(id));
    const info = STACKS[id];
    if (info && info.phase) s.append(el('span', {class: 'tag', text: info.phase}));
    if (info && info.caching_allocator) s.append(el('span', {class: 'tag', text: 'caching allocator'}));
    if (id && id === failedStack) s.append(el('span', {class: 'tag hot', text: 'failed request'}));
    return s;
  }

  function drawHolders() {
    const byTensor = mem.view === 'tensor';
    const rows = arr(byTensor ? TV.by_stack : R.by_stack).filter(e => e && num(e.bytes) !== null);
    const max = rows.reduce((m, r) => Math.max(m, r.bytes), 0);
    const total = rows.reduce((m, r) => m + r.bytes, 0);
    table(document.getElementById('holders'), [
      {key: 'bytes', label: 'Live bytes', type: 'bytes', value: r => r.bytes, cell: r => barCell(r.bytes, max)},
      {key: 'share', label: 'Share', type: 'num', value: r => r.bytes, cell: r => pct(r.bytes, total) + '%'},
      {key: 'count', label: byTensor ? 'Tensors' : 'Allocations', type: 'num', value: r => num(r.count) || 0, cell: r => String(num(r.count) || 0)},
      {key: 'where', label: 'Where (innermost Python frame, else native)', type: 'text', value: r => bestLabel(r.stack), cell: r => bestCell(r.stack)},
    ], rows, 'bytes', 'desc', r => frameList(r.stack, 12));
  }

  // Where a block lies: the segment (a driver allocation) or mapped range (of an expandable segment)
  // holding its address.
  const SEG = COLUMN.segment, MAP = COLUMN.mapping, BLK = COLUMN.block;
  const regions = !hasTensors ? [] : arr(TV.segments).filter(g => Array.isArray(g) && num(g[SEG.address]) !== null && num(g[SEG.bytes]) !== null)
    .map(g => ({address: g[SEG.address], size: g[SEG.bytes], mapped: false}))
    .concat(arr(TV.mappings).filter(g => Array.isArray(g) && num(g[MAP.address]) !== null && num(g[MAP.bytes]) !== null)
      .map(g => ({address: g[MAP.address], size: g[MAP.bytes], mapped: true})))
    .sort((a, b) => a.address - b.address);
  function regionOf(address) {
    let lo = 0, hi = regions.length - 1, found = null;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      if (regions[mid].address <= address) { found = regions[mid]; lo = mid + 1; } else hi = mid - 1;
    }
    return found && address < found.address + found.size ? found : null;
  }
  function hex(n) { return '0x' + n.toString(16); }

  // A report lists up to 50,000 blocks; a table row each would take the page seconds to draw, so the
  // table holds the largest TENSOR_ROWS (the flame graph and the holders count them all).
  const TENSOR_ROWS = 1000;
  function drawTensorBlocks() {
    const blocks = obj(TV.blocks);
    const listed = arr(blocks.list).filter(b => Array.isArray(b) && num(b[BLK.address]) !== null && num(b[BLK.bytes]) !== null);
    const rows = listed.sort((a, b) => b[BLK.bytes] - a[BLK.bytes]).slice(0, TENSOR_ROWS)
      .map(b => ({address: b[BLK.address], bytes: b[BLK.bytes], stack: typeof b[BLK.stack] === 'string' ? b[BLK.stack] : null,
                  age_ns: num(b[BLK.age_ns]), region: regionOf(b[BLK.address])}));
    const max = rows.reduce((m, r) => Math.max(m, r.bytes), 0);
    const count = Math.max(num(blocks.count) || 0, listed.length);
    if (count > rows.length) {
      document.getElementById('allocs-note').textContent = 'the ' + rows.length + ' largest of ' + count + ' live blocks of PyTorch\u2019s caching allocator · click a column to sort, a row for its stack';
    }
    table(document.getElementById('allocs'), [
      {key: 'bytes', label: 'Size', type: 'bytes', value: r => r.bytes, cell: r => barCell(r.bytes, max)},
      {key: 'age', label: 'Age', type: 'num', value: r => r.age_ns === null ? -1 : r.age_ns, cell: r => r.age_ns === null ? '?' : duration(r.age_ns)},
      {key: 'where', label: 'Where', type: 'text', value: r => bestLabel(r.stack), cell: r => bestCell(r.stack)},
      {key: 'segment', label: 'In segment', type: 'text', value: r => r.region ? r.region.address : -1, cell: r => r.region
        ? el('span', null, el('code', {text: hex(r.region.address)}), ' ' + bytes(r.region.size) + (r.region.mapped ? ' mapped' : '') + ' · +' + bytes(r.address - r.region.address))
        : '?'},
      {key: 'address', label: 'Address', type: 'text', value: r => r.address, cell: r => el('code', {text: hex(r.address)})},
    ], rows, 'bytes', 'desc', r => frameList(r.stack, 12));
  }

  function drawAllocs() {
    if (mem.view === 'tensor') { drawTensorBlocks(); return; }
    const rows = arr(R.top_allocations).filter(e => e && num(e.bytes) !== null);
    const max = rows.reduce((m, r) => Math.max(m, r.bytes), 0);
    table(document.getElementById('allocs'), [
      {key: 'bytes', label: 'Size', type: 'bytes', value: r => r.bytes, cell: r => barCell(r.bytes, max)},
      {key: 'api', label: 'API', type: 'text', value: r => r.api || '', cell: r => el('code', {text: r.api || '?'})},
      {key: 'age', label: 'Age', type: 'num', value: r => num(r.age_ns) === null ? -1 : r.age_ns, cell: r => num(r.age_ns) === null ? '?' : duration(r.age_ns)},
      {key: 'device', label: 'Device', type: 'num', value: r => num(r.device) === null ? -1 : r.device, cell: r => num(r.device) === null ? '?' : String(r.device)},
      {key: 'thread', label: 'Thread', type: 'num', value: r => num(r.thread) === null ? -1 : r.thread, cell: r => num(r.thread) === null ? '?' : String(r.thread)},
      {key: 'tag', label: 'Tag', type: 'text', value: r => r.tag || '', cell: r => r.tag ? el('span', {class: 'tag', text: r.tag}) : ''},
      {key: 'where', label: 'Where', type: 'text', value: r => bestLabel(r.stack), cell: r => bestCell(r.stack)},
      {key: 'address', label: 'Address', type: 'text', value: r => r.address || '', cell: r => el('code', {text: r.address || ''})},
    ], rows, 'bytes', 'desc', r => frameList(r.stack, 12));
  }

  function drawFailed() {
    if (!failed && !tvOom) return;
    document.getElementById('failed-section').hidden = false;
    const box = document.getElementById('failed');
    const dl = el('dl', {class: 'kv'});
    function kv(k, v) { if (v !== null && v !== undefined && v !== '') dl.append(el('dt', {text: k}), el('dd', {text: String(v)})); }
    // What c10 itself could not serve (a report of reason allocator_oom has only this).
    if (tvOom) {
      kv('PyTorch asked for', num(tvOom.requested_bytes) !== null ? bytes(tvOom.requested_bytes) + ' (' + tvOom.requested_bytes + ')' : null);
      if (num(tvOom.allocated_bytes) !== null && num(tvOom.reserved_bytes) !== null) {
        kv('PyTorch held', bytes(tvOom.allocated_bytes) + ' in tensors of ' + bytes(tvOom.reserved_bytes) + ' reserved (' +
          bytes(Math.max(0, tvOom.reserved_bytes - tvOom.allocated_bytes)) + ' cached in no tensor, in pieces too small for the request)');
      }
    }
    if (!failed) { box.append(dl); return; }
    kv('API', failed.api);
    kv('driver call', failed.driver_api);
    kv('bytes', num(failed.bytes) !== null ? bytes(failed.bytes) + ' (' + failed.bytes + ')' : null);
    kv('device', failed.device);
    kv('thread', failed.thread);
    kv('driver result', num(failed.driver_result) === 2 ? '2 (CUDA_ERROR_OUT_OF_MEMORY)' : failed.driver_result);
    const ep = obj(R.episode);
    if (num(ep.failed_calls) !== null) kv('failed calls in this episode', ep.failed_calls);
    box.append(dl, el('h3', {class: 'sub', text: ''}), frameList(failedStack, 14));
  }

  // The what-if replay (tools/report/whatif/): its answers as `gpuguard report --what-if --json` gives them.
  function drawWhatIf() {
    const w = V.what_if && typeof V.what_if === 'object' ? V.what_if : null;
    if (!w) return;
    document.getElementById('whatif-section').hidden = false;
    const box = document.getElementById('whatif');
    const cards = el('div', {class: 'cards'});
    function card(k, v, s) { cards.append(el('div', {class: 'card'}, el('div', {class: 'k', text: k}), el('div', {class: 'v', text: v}), el('div', {class: 's', text: s || ''}))); }
    const check = obj(w.model_check), budget = obj(w.budget), small = obj(w.smallest_budget);
    // The summary replays only what its verdict needs: what it left out is null, and `unanswered` says why.
    if (w.model_check) card('model check', check.trusted ? 'trusted' : 'not trusted', check.why || '');
    card('budget for PyTorch', bytes(num(budget.bytes)),
         budget.scope === 'device' ? "no quota: the device's memory" : budget.scope ? 'the ' + budget.scope + ' limit, less what others hold' : '');
    if (Array.isArray(w.max_split_size_mb)) {
      const e = w.expandable_segments && typeof w.expandable_segments === 'object' ? w.expandable_segments : null;
      card('expandable_segments:True', e ? (e.avoids_oom ? 'avoids it' : 'does not') : 'unknown',
           e && !e.avoids_oom ? (e.runs_out_earlier ? 'runs out earlier' : 'refuses the request too') : '');
      const splits = arr(w.max_split_size_mb).filter(o => o && o.avoids_oom).map(o => String(o.mb));
      card('max_split_size_mb', splits.length ? splits.join(', ') : 'none', splits.length ? 'avoid it' : 'of ' + arr(w.max_split_size_mb).map(o => obj(o).mb).join(', '));
    }
    if (num(small.as_configured_bytes) !== null || !w.unanswered)
      card('smallest budget', bytes(num(small.as_configured_bytes)), 'allocated peak ' + bytes(num(small.allocated_peak_bytes)) + ' · expandable ' + bytes(num(small.expandable_segments_bytes)));
    box.append(cards);
    if (w.unanswered) box.append(el('p', {class: 'banner warn', text: w.unanswered}));
    for (const c of arr(obj(w.events).caveats)) box.append(el('p', {class: 'banner warn', text: 'approximate: ' + c}));
  }

  function drawCudnn() {
    const c = R.cudnn && typeof R.cudnn === 'object' ? R.cudnn : null;
    if (!c) return;
    document.getElementById('cudnn-section').hidden = false;
    const box = document.getElementById('cudnn');
    const cards = el('div', {class: 'cards'});
    function card(k, v, s) { cards.append(el('div', {class: 'card'}, el('div', {class: 'k', text: k}), el('div', {class: 'v', text: v}), el('div', {class: 's', text: s || ''}))); }
    card('largest workspace asked', bytes(num(c.largest_workspace_requested_bytes)));
    card('workspace cap', num(c.workspace_cap_bytes) === null ? 'off' : bytes(c.workspace_cap_bytes), 'GPUGUARD_CUDNN_WORKSPACE_LIMIT');
    card('workspace in use', bytes(num(c.workspace_in_use_bytes)));
    card('plans rejected', num(c.plans_rejected) === null ? '?' : String(c.plans_rejected), 'by the cap');
    box.append(cards);
    const rows = arr(c.requests_by_stack).filter(e => e && num(e.largest_bytes) !== null);
    const max = rows.reduce((m, r) => Math.max(m, r.largest_bytes), 0);
    const t = el('div');
    box.append(t);
    table(t, [
      {key: 'largest', label: 'Largest request', type: 'bytes', value: r => r.largest_bytes, cell: r => barCell(r.largest_bytes, max)},
      {key: 'count', label: 'Requests', type: 'num', value: r => num(r.count) || 0, cell: r => String(num(r.count) || 0)},
      {key: 'where', label: 'Where', type: 'text', value: r => bestLabel(r.stack), cell: r => bestCell(r.stack)},
    ], rows, 'largest', 'desc', r => frameList(r.stack, 12));
  }

  function drawLedger() {
    const l = R.ledger && typeof R.ledger === 'object' ? R.ledger : null;
    if (!l) return;
    document.getElementById('ledger-section').hidden = false;
    const box = document.getElementById('ledger');
    const rows = arr(l.processes).filter(p => p && typeof p === 'object');
    const max = rows.reduce((m, r) => Math.max(m, num(r.bytes) || 0), 0);
    const total = rows.reduce((m, r) => m + (num(r.bytes) || 0), 0);
    const t = el('div');
    box.append(t);
    table(t, [
      {key: 'bytes', label: 'Holds', type: 'bytes', value: r => num(r.bytes) || 0, cell: r => barCell(num(r.bytes) || 0, max)},
      {key: 'share', label: 'Share', type: 'num', value: r => num(r.bytes) || 0, cell: r => pct(num(r.bytes) || 0, total) + '%'},
      {key: 'peak', label: 'Peak', type: 'bytes', value: r => num(r.peak_bytes) || 0, cell: r => bytes(num(r.peak_bytes))},
      {key: 'pid', label: 'PID', type: 'num', value: r => num(r.pid) || 0, cell: r => String(r.pid)},
      {key: 'command', label: 'Command', type: 'text', value: r => r.command || '', cell: r => {
        const s = el('span', null, el('code', {text: r.command || '?'}));
        if (r.self) s.append(el('span', {class: 'tag', text: 'this process'}));
        if (r.alive === false) s.append(el('span', {class: 'tag hot', text: 'exited'}));
        if (A.sibling && A.sibling.pid === r.pid) s.append(el('span', {class: 'tag hot', text: 'holds most'}));
        return s;
      }},
    ], rows, 'bytes', 'desc', null);
    const devs = arr(l.devices);
    if (devs.length || l.path) {
      const dl = el('dl', {class: 'kv'});
      if (l.path) dl.append(el('dt', {text: 'ledger'}), el('dd', {text: l.path}));
      for (const d of devs) dl.append(el('dt', {text: d.uuid || 'device'}), el('dd', {text: 'used ' + bytes(num(d.used_bytes)) + ' · peak ' + bytes(num(d.peak_bytes)) + ' · limit ' + bytes(num(d.limit_bytes))}));
      box.append(el('div', {style: 'margin-top:10px'}, dl));
    }
  }

  function drawDetails() {
    const box = document.getElementById('details');
    const dl = el('dl', {class: 'kv'});
    function kv(k, v) { if (v !== null && v !== undefined && v !== '') dl.append(el('dt', {text: k}), el('dd', {text: String(v)})); }
    kv('reason', R.reason);
    kv('message', R.message);
    kv('command', arr(proc.command).join(' '));
    kv('executable', proc.exe);
    kv('pid / ppid / uid', [proc.pid, proc.ppid, proc.uid].map(v => v === undefined || v === null ? '?' : v).join(' / '));
    kv('device', [dev.name, num(dev.ordinal) !== null ? '#' + dev.ordinal : null, dev.uuid].filter(Boolean).join(' · '));
    for (const [k, v] of Object.entries(obj(proc.env))) kv(k, v);
    kv('gpuguard', R.gpuguard_version);
    box.append(dl);
    const counts = Object.entries(obj(R.counts_by_api)).map(([api, c]) => Object.assign({api}, obj(c)));
    if (counts.length) {
      const t = el('div', {style: 'margin-top:12px'});
      box.append(t);
      table(t, [
        {key: 'api', label: 'API', type: 'text', value: r => r.api, cell: r => el('code', {text: r.api})},
        {key: 'allocs', label: 'Allocations', type: 'num', value: r => num(r.allocs) || 0, cell: r => String(num(r.allocs) || 0)},
        {key: 'frees', label: 'Frees', type: 'num', value: r => num(r.frees) || 0, cell: r => String(num(r.frees) || 0)},
        {key: 'failures', label: 'Failures', type: 'num', value: r => num(r.failures) || 0, cell: r => String(num(r.failures) || 0)},
        {key: 'live_count', label: 'Live', type: 'num', value: r => num(r.live_count) || 0, cell: r => String(num(r.live_count) || 0)},
        {key: 'live_bytes', label: 'Live bytes', type: 'bytes', value: r => num(r.live_bytes) || 0, cell: r => bytes(num(r.live_bytes) || 0)},
      ], counts, 'live_bytes', 'desc', null);
    }
  }

  // ---- go -----------------------------------------------------------------------------------
  const only = /(?:^#|&)only=([a-z]+)/.exec(location.hash || '');
  if (only) {
    const sec = document.getElementById(only[1] === 'summary' ? 'summary' : only[1] + '-section');
    if (sec) { document.body.classList.add('only'); sec.classList.add('shown'); }
  }
  drawHeader();
  drawSummary();
  drawTimeline();
  setupViewSwitch();
  setupFlame();
  drawFailed();
  drawHolders();
  drawAllocs();
  drawWhatIf();
  drawCudnn();
  drawLedger();
  drawDetails();
  let resizeTimer = null;
  window.addEventListener('resize', () => {
    clearTimeout(resizeTimer);
    resizeTimer = setTimeout(() => { drawTimeline(); drawFlame(); }, 120);
  });
  if (!root.getAttribute('data-gg-status').startsWith('error')) root.setAttribute('data-gg-status', 'ok');
})();
