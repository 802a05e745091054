// Small SVG charts: line plots, a timeline (Gantt) and grouped bars. No library needed.

const NS = 'http://www.w3.org/2000/svg';

function el(name, attrs = {}, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function svg(w, h) {
  return el('svg', { viewBox: `0 0 ${w} ${h}`, preserveAspectRatio: 'xMidYMid meet' });
}

const fmt = (v) => (Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toFixed(1) : v.toPrecision(2));

/**
 * Lines through points. series: [{name, color, points: [[x, y], ...], dashed}];
 * opts: {logx, logy, xlabel, ylabel, xticks, marker: {x, label}} (marker: a vertical line at x).
 */
export function linePlot(host, series, opts = {}) {
  const W = 480, H = 270, L = 52, R = 12, T = 26, B = 36;
  const s = svg(W, H);
  const pts = series.flatMap((x) => x.points).filter(([x, y]) => isFinite(x) && isFinite(y) && (!opts.logy || y > 0));
  if (pts.length === 0) { host.replaceChildren(s); return; }
  const tx = (v) => (opts.logx ? Math.log2(v) : v);
  const ty = (v) => (opts.logy ? Math.log10(v) : v);
  let [x0, x1] = [Math.min(...pts.map((p) => tx(p[0]))), Math.max(...pts.map((p) => tx(p[0])))];
  let [y0, y1] = [Math.min(...pts.map((p) => ty(p[1]))), Math.max(...pts.map((p) => ty(p[1])))];
  if (x0 === x1) { x0 -= 1; x1 += 1; }
  if (y0 === y1) { y0 -= 0.5; y1 += 0.5; }
  const pad = (y1 - y0) * 0.08; y0 -= pad; y1 += pad;
  if (!opts.logy && opts.zero !== false) y0 = Math.min(y0, 0);
  const X = (v) => L + ((tx(v) - x0) / (x1 - x0)) * (W - L - R);
  const Y = (v) => T + (1 - (ty(v) - y0) / (y1 - y0)) * (H - T - B);
  s.append(el('line', { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: '#bbb' }));
  s.append(el('line', { x1: L, y1: T, x2: L, y2: H - B, stroke: '#bbb' }));
  // y ticks: 4 evenly spaced (in log space when logy).
  for (let k = 0; k <= 4; k++) {
    const yv = y0 + ((y1 - y0) * k) / 4;
    const val = opts.logy ? 10 ** yv : yv;
    const yy = T + (1 - k / 4) * (H - T - B);
    s.append(el('line', { x1: L - 3, y1: yy, x2: W - R, y2: yy, stroke: '#eee' }));
    s.append(el('text', { x: L - 6, y: yy + 4, 'text-anchor': 'end' }, fmt(val)));
  }
  const xt = opts.xticks ?? [...new Set(pts.map((p) => p[0]))];
  for (const v of xt) {
    s.append(el('text', { x: X(v), y: H - B + 14, 'text-anchor': 'middle' }, String(v)));
  }
  if (opts.xlabel) s.append(el('text', { x: (L + W - R) / 2, y: H - 4, 'text-anchor': 'middle' }, opts.xlabel));
  if (opts.ylabel) s.append(el('text', { x: 4, y: 12 }, opts.ylabel));
  series.forEach((ser, i) => {
    const p = ser.points.filter(([x, y]) => isFinite(x) && isFinite(y) && (!opts.logy || y > 0));
    if (p.length) {
      s.append(el('polyline', {
        points: p.map(([x, y]) => `${X(x)},${Y(y)}`).join(' '),
        fill: 'none', stroke: ser.color, 'stroke-width': 2, ...(ser.dashed ? { 'stroke-dasharray': '6 4' } : {}),
      }));
      if (p.length < 40) for (const [x, y] of p) s.append(el('circle', { cx: X(x), cy: Y(y), r: 3, fill: ser.color }));
    }
    // Legend top left, where rising curves (time against size) leave room.
    const lx = opts.legendLeft ? L + 10 : W - R - 120;
    s.append(el('rect', { x: lx, y: T + 4 + i * 16, width: 10, height: 10, fill: ser.color }));
    s.append(el('text', { x: lx + 15, y: T + 13 + i * 16 }, ser.name));
  });
  const m = opts.marker;
  if (m && isFinite(m.x) && (!opts.logx || m.x > 0)) {
    s.append(el('line', { x1: X(m.x), y1: T, x2: X(m.x), y2: H - B, stroke: '#b5461f', 'stroke-dasharray': '2 3', class: 'marker' }));
    s.append(el('text', { x: X(m.x) + 4, y: H - B - 6, fill: '#b5461f', class: 'marker' }, m.label ?? ''));
  }
  host.replaceChildren(s);
}

/**
 * A timeline. rows: [label], bars: [{row, t0, t1, color, label}], all in ms.
 */
export function gantt(host, rows, bars, legend = []) {
  const W = 640, L = 118, R = 24, T = 10, RH = 26, B = 40 + (legend.length ? 18 : 0);
  const H = T + rows.length * RH + B;
  const s = svg(W, H);
  const tmax = Math.max(1e-3, ...bars.map((b) => b.t1));
  const X = (v) => L + (v / tmax) * (W - L - R);
  rows.forEach((r, i) => {
    s.append(el('text', { x: 4, y: T + i * RH + 17 }, r));
    s.append(el('line', { x1: L, y1: T + (i + 1) * RH, x2: W - R, y2: T + (i + 1) * RH, stroke: '#f0ebe4' }));
  });
  for (const b of bars) {
    const x = X(b.t0), w = Math.max(1.5, X(b.t1) - X(b.t0));
    const r = el('rect', { x, y: T + b.row * RH + 4, width: w, height: RH - 8, fill: b.color, rx: 3 });
    r.append(el('title', {}, `${b.label}: ${b.t0.toFixed(2)}–${b.t1.toFixed(2)} ms`));
    s.append(r);
    if (w > 34) s.append(el('text', { x: x + 3, y: T + b.row * RH + 17, style: 'fill:#fff' }, b.label));
  }
  const axisY = T + rows.length * RH;
  s.append(el('line', { x1: L, y1: axisY, x2: W - R, y2: axisY, stroke: '#bbb' }));
  for (let k = 0; k <= 5; k++) {
    const v = (tmax * k) / 5;
    s.append(el('text', { x: X(v), y: axisY + 14, 'text-anchor': 'middle' }, `${fmt(v)} ms`));
  }
  legend.forEach(([name, color], i) => {
    s.append(el('rect', { x: L + i * 120, y: axisY + 24, width: 10, height: 10, fill: color }));
    s.append(el('text', { x: L + 14 + i * 120, y: axisY + 33 }, name));
  });
  host.replaceChildren(s);
}

/** Grouped bars: groups[g] = {name, color, values[]}; one cluster per value index. */
export function groupedBars(host, groups) {
  const W = 480, H = 220, L = 44, R = 8, T = 10, B = 30;
  const s = svg(W, H);
  const n = Math.max(0, ...groups.map((g) => g.values.length));
  const all = groups.flatMap((g) => g.values);
  const m = Math.max(1e-9, ...all.map(Math.abs));
  const Y = (v) => T + (1 - (v + m) / (2 * m)) * (H - T - B);
  s.append(el('line', { x1: L, y1: Y(0), x2: W - R, y2: Y(0), stroke: '#bbb' }));
  s.append(el('text', { x: L - 4, y: Y(m) + 4, 'text-anchor': 'end' }, fmt(m)));
  s.append(el('text', { x: L - 4, y: Y(-m) + 4, 'text-anchor': 'end' }, fmt(-m)));
  const cw = (W - L - R) / Math.max(1, n);
  const bw = (cw * 0.8) / Math.max(1, groups.length);
  for (let i = 0; i < n; i++) {
    groups.forEach((g, j) => {
      const v = g.values[i];
      const x = L + i * cw + cw * 0.1 + j * bw;
      s.append(el('rect', { x, y: Math.min(Y(v), Y(0)), width: bw, height: Math.abs(Y(v) - Y(0)), fill: g.color }));
    });
    s.append(el('text', { x: L + i * cw + cw / 2, y: H - B + 14, 'text-anchor': 'middle' }, String(i)));
  }
  groups.forEach((g, j) => {
    s.append(el('rect', { x: L + j * 90, y: H - 12, width: 10, height: 10, fill: g.color }));
    s.append(el('text', { x: L + 14 + j * 90, y: H - 3 }, g.name));
  });
  host.replaceChildren(s);
}
