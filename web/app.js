// The demo page: four modes over brigade compiled to wasm, running on the browser's WebGPU.
// Rust does the work (web/pkg, built from web/src/); this file draws what it measured.
//
// Query parameters: devices=N (1–4), cpu=1 (force the cpu fallback), lang=en,
// test=1 (small sizes, run every mode automatically; the browser test reads window.brigadeStatus),
// only=MODE (with test=1: run just that mode).
//
// brigade runs in a Web Worker (engine.js, worker.js): the reference checks and the cpu fallback
// never block this thread, and the Cancel button ends any run.

import init, { bg, cancel as cancelEngine, CancelledError } from './engine.js';
import { t, setLang, getLang, applyStatic } from './i18n.js';
import { renderQuiz } from './quiz.js';
import { linePlot, gantt, groupedBars } from './plot.js';

const params = new URLSearchParams(location.search);
const TEST = params.get('test') === '1';
const $ = (id) => document.getElementById(id);

// ---- machine-readable status ---------------------------------------------------------------------

const status = {
  ready: false, done: false, lang: 'zh', webgpu: false, backend: null, devices: 0, adapters: [],
  fallback: '', software: false, modes: {}, indivisible: null, errors: [], panics: [],
  running: null, cancelled: 0,
};
window.brigadeStatus = status;

function publish() {
  status.lang = getLang();
  $('status').textContent = JSON.stringify(status);
}

function setMode(name, patch) {
  status.modes[name] = { ...(status.modes[name] ?? {}), ...patch };
  const m = status.modes[name];
  const mark = $(`mark-${name}`);
  if (mark && m.ok !== undefined) {
    mark.textContent = m.ok ? '✓' : '✗';
    mark.className = `mark ${m.ok ? 'ok' : 'bad'}`;
  }
  publish();
}

function fail(where, e) {
  const msg = String(e?.message ?? e);
  if (e instanceof CancelledError) {
    // Not an error: the learner stopped the run.
    publish();
    return 'cancelled';
  }
  status.errors.push(`${where}: ${msg}`);
  publish();
  return msg;
}

// ---- brigade's errors in the page's language ----------------------------------------------------

/** The error kind of a message thrown by an export (the JSON answers carry `kind` themselves). */
function errorKindOf(msg) {
  const known = [
    [/cannot be split evenly/, 'IndivisibleSplit'], [/every size must be at least 1/, 'BadShapeArg'],
    [/only \d+ devices are available/, 'TooManyShards'], [/mapped sizes disagree/, 'MappedSizeMismatch'],
    [/out of memory/i, 'OutOfMemory'], [/limit/i, 'OverLimit'], [/has not called start|no device/i, 'NoDevice'],
    [/cancelled/, 'Cancelled'],
  ];
  return known.find(([re]) => re.test(msg))?.[1] ?? 'Other';
}

/** Fields of an IndivisibleSplit message: rows, devices, the next multiple. */
function indivisibleFields(msg) {
  const m = /has (\d+) rows along axis \d+, which cannot be split evenly over (\d+) devices.*pad to (\d+) rows/.exec(msg ?? '');
  return m ? { size: +m[1], devices: +m[2], pad: +m[3] } : null;
}

/** The hint for an indivisible batch: only device counts this page offers (1–4), padding, vmap. */
function indivisibleHint(size, devices) {
  const fits = [1, 2, 3, 4].filter((k) => size % k === 0);
  const pad = Math.ceil(size / devices) * devices;
  return t('hint.indivisible', { b: size, fits: fits.join(', '), pad, n: devices, per: pad / devices, extra: pad - size });
}

/** brigade's error `msg` (kind `kind`) in the page's language, the original kept in a details line. */
function brigadeError(msg, kind = errorKindOf(msg), id) {
  const box = node('div', 'error');
  if (id) box.id = id;
  const f = kind === 'IndivisibleSplit' ? indivisibleFields(msg) : null;
  const key = `errk.${kind}`;
  const text = f ? t(key, f) : t(key) === key ? t('errk.Other', { kind }) : t(key);
  box.append(node('div', 'etext', text));
  if (f) box.append(node('div', 'ehint', indivisibleHint(f.size, f.devices)));
  const det = document.createElement('details');
  det.append(node('summary', '', t('err.original')), node('code', 'orig', msg));
  box.append(det);
  return box;
}

// ---- events from Rust: lanes light up while their kernels run -----------------------------------

const laneHosts = {};

window.brigadeEvent = (kind, detail) => {
  let d;
  try { d = JSON.parse(detail); } catch { d = detail; }
  if (kind === 'panic') {
    status.panics.push(d);
    publish();
    return;
  }
  if (kind === 'lane') {
    const host = laneHosts[d.mode];
    const lane = host?.querySelector(`[data-device="${d.device}"]`);
    if (!lane) return;
    lane.classList.toggle('busy', d.state === 'busy');
    lane.classList.toggle('done', d.state === 'done' || d.state === 'arrived');
    lane.classList.toggle('bad', d.state === 'error');
    lane.querySelector('.time').textContent = d.ms !== undefined ? `${d.ms.toFixed(1)} ms` : d.state === 'error' ? '✗' : '…';
  }
};

function deviceLabel(i) {
  const a = status.adapters[i];
  return a ? `${t('devices.lane', { i })} · ${a.backend}` : t('devices.lane', { i });
}

// Text that follows the language toggle: a string, or [key, vars] looked up at every render.
const tr = (x) => (Array.isArray(x) ? t(x[0], x[1]) : x);

function setTr(el, x) {
  if (Array.isArray(x)) el.dataset.tr = JSON.stringify(x); else delete el.dataset.tr;
  el.textContent = tr(x);
}

/** Lanes for `mode` in `host`: blocks[i] = [start fraction, width fraction, label]; labels
 * (and block labels) are strings or [i18n key, vars], translated again by the language toggle. */
function drawLanes(mode, host, blocks, labels = blocks.map((_, i) => ['devices.lane', { i }])) {
  laneHosts[mode] = host;
  host.replaceChildren(...blocks.map(([x, w, text], i) => {
    const lane = document.createElement('div');
    lane.className = 'lane';
    lane.dataset.device = i;
    lane.innerHTML = '<span class="who"></span><div class="track"><div class="block"></div></div><span class="time"></span>';
    setTr(lane.querySelector('.who'), labels[i]);
    const b = lane.querySelector('.block');
    b.style.left = `${x * 100}%`;
    b.style.width = `${w * 100}%`;
    setTr(b, text);
    return lane;
  }));
}

function splitBlocks(n, total, key = 'basics.rows') {
  const per = Math.floor(total / n);
  return Array.from({ length: n }, (_, i) => [i / n, 1 / n, [key, { a: i * per + 1, b: (i + 1) * per }]]);
}

// ---- small renderers ----------------------------------------------------------------------------

const fmt = (v, d = 2) => (v === null || v === undefined ? '–' : Number(v).toFixed(d));
const sci = (v) => (v === null || v === undefined ? '–' : Number(v).toExponential(1));

function node(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function checkLine(ok, err) {
  const tol = sci(status.tol ?? 1e-4);
  return node('div', `check ${ok ? 'ok' : 'bad'}`, ok ? t('check.ok', { tol }) : t('check.bad', { err: sci(err), tol }));
}

function workLine(work) {
  if (!work) return node('div', 'work', '');
  const real = status.webgpu && work.dispatches > 0;
  return node('div', 'work', real ? t('kernels.real', { d: work.dispatches, p: work.pipelines }) : t('kernels.cpu'));
}

function table(head, rows) {
  // Wide tables scroll inside their own box on a phone instead of widening the page.
  const wrap = node('div', 'scroll');
  const tb = document.createElement('table');
  wrap.append(tb);
  const tr = document.createElement('tr');
  head.forEach((h) => tr.append(node('th', '', h)));
  tb.append(tr);
  for (const r of rows) {
    const row = document.createElement('tr');
    r.forEach((c) => {
      const td = node('td');
      if (c instanceof Node) td.append(c); else td.textContent = c;
      row.append(td);
    });
    tb.append(row);
  }
  return wrap;
}

function errorBox(title, msg, id, kind) {
  const box = node('div', '');
  if (title) box.append(node('p', '', title));
  box.append(brigadeError(msg, kind, id));
  return box;
}

const real = (work) => status.webgpu && (work?.dispatches ?? 0) > 0;

// ---- one Rust call at a time --------------------------------------------------------------------

let chain = Promise.resolve();
// The run in flight: what it is, since when, which step; shown in the run bar with Cancel.
const current = { what: null, t0: 0, step: '' };
let ticker = null;

function showRun() {
  const bar = $('runbar');
  if (!current.what) { bar.hidden = true; $('runlabel').textContent = ''; return; }
  bar.hidden = false;
  const s = ((performance.now() - current.t0) / 1000).toFixed(1);
  $('runlabel').textContent = t('run.progress', { what: t(current.what), s, step: current.step ? ` · ${current.step}` : '' });
}

/** Report progress of the run in flight (`3/5`, `n = 128`). */
function step(text) {
  current.step = text;
  showRun();
}

function serial(fn, what = 'run.any') {
  const go = async () => {
    Object.assign(current, { what, t0: performance.now(), step: '' });
    status.running = what;
    publish();
    ticker ??= setInterval(showRun, 100);
    showRun();
    try { return await fn(); } finally {
      current.what = null;
      status.running = null;
      clearInterval(ticker);
      ticker = null;
      showRun();
      publish();
    }
  };
  const run = chain.then(go);
  chain = run.catch(() => {});
  return run;
}
// Other tabs (cards.js) queue their calls here too, and call brigade through engine.js's `bg`.
window.brigadeSerial = serial;

async function cancelRun() {
  if (!current.what) return;
  status.cancelled++;
  $('runlabel').textContent = t('run.cancelling');
  trainState = null;
  await cancelEngine().catch((e) => fail('restart', e));
  // Lanes lit by the cancelled run go dark.
  document.querySelectorAll('.lane.busy').forEach((l) => { l.classList.remove('busy'); l.querySelector('.time').textContent = '—'; });
  publish();
}

function busy(btn, on) {
  if (!btn) return;
  btn.disabled = on;
  btn.textContent = on ? t('running') : t(btn.dataset.i18n);
}

async function withButton(id, fn, what) {
  const btn = $(id);
  // The run bar names the mode the button belongs to.
  what ??= `tab.${btn?.closest('section')?.id?.replace('tab-', '') ?? 'basics'}`;
  busy(btn, true);
  try { return await serial(fn, what); } finally { busy(btn, false); }
}

// ---- devices ------------------------------------------------------------------------------------

async function webgpuDefault() {
  // Four chefs where a real GPU is there; two on a software adapter, which is slow.
  try {
    const a = await navigator.gpu?.requestAdapter();
    if (!a) return 2;
    const fallback = a.isFallbackAdapter ?? a.info?.isFallbackAdapter ?? false;
    return fallback ? 2 : 4;
  } catch { return 2; }
}

async function openDevices(n) {
  status.ready = false;
  publish();
  $('devstatus').textContent = t('devices.opening');
  const wantGpu = params.get('cpu') !== '1' && !!navigator.gpu;
  // The browser names its adapter through GPUAdapter.info (wgpu leaves the name empty there).
  let adapterName = '';
  let softwareAdapter = false;
  if (wantGpu) {
    try {
      const a = await navigator.gpu.requestAdapter();
      const i = a?.info;
      adapterName = [i?.vendor, i?.architecture, i?.description].filter(Boolean).join(' · ');
      softwareAdapter = !!(a?.isFallbackAdapter ?? i?.isFallbackAdapter);
    } catch { /* the name is only decoration */ }
  }
  const info = JSON.parse(await bg.start(n, wantGpu));
  status.webgpu = info.webgpu;
  status.backend = info.backend;
  status.devices = info.count;
  status.adapters = info.devices;
  status.tol = info.tol;
  status.fallback = wantGpu ? info.fallback : (navigator.gpu ? 'cpu=1 in the address' : 'navigator.gpu is undefined');
  // Software adapters (and logical devices on one adapter) share one machine: no measured speed-up.
  status.software = !info.webgpu || softwareAdapter || /swiftshader|llvmpipe|lavapipe|software/i.test(adapterName);
  $('devstatus').textContent = t('devices.ready', { count: info.count, backend: info.backend });
  $('devlist').replaceChildren(...info.devices.map((d) => {
    const name = d.name || (d.backend === 'webgpu' ? adapterName : '') || d.backend;
    const c = node('span', `devchip ${d.backend === 'cpu' ? 'cpu' : ''}`, `#${d.index} ${name} [${d.backend}, ${d.type}]`);
    return c;
  }));
  $('nowebgpu').hidden = info.webgpu;
  $('nowebgpu-body').textContent = t('nowebgpu.body', { n: info.count });
  $('nowebgpu-reason').textContent = status.fallback;
  // Controls that depend on the device count.
  const sel = $('a-shards');
  sel.replaceChildren(...Array.from({ length: info.count }, (_, i) => {
    const o = node('option', '', String(i + 1));
    if (i + 1 === info.count) o.selected = true;
    return o;
  }));
  $('h-n').value = Math.ceil(256 / info.count) * info.count;
  $('o-n').value = Math.ceil(256 / info.count) * info.count;
  $('o-sizes').textContent = sweepSizes().join(', ');
  trainState = null;
  status.ready = true;
  publish();
}

// ---- 入门 Basics ---------------------------------------------------------------------------------

let last = {};

async function runBasics(batch = +$('b-batch').value, dim = +$('b-dim').value, reps = TEST ? 2 : 3) {
  const n = status.devices;
  drawLanes('basics', $('b-lanes'), splitBlocks(n, batch));
  drawLanes('basics-one', $('b-onelane'), [[0, 1, ['basics.rows', { a: 1, b: batch }]]], [['basics.onelane']]);
  drawLanes('basics-vmap', $('b-vmaplane'), [[0, 1, ['basics.rows', { a: 1, b: batch }]]], [['basics.vmaplane']]);
  const t0 = performance.now();
  try {
    const r = JSON.parse(await bg.basics(batch, dim, reps));
    last.basics = r;
    renderBasics();
    const refused = !!r.pmap.error;
    setMode('basics', {
      ran: true, ok: r.ok, realKernels: real(r.work), ms: performance.now() - t0, batch,
      pmap_ms: r.pmap.warm_ms ?? null, one_ms: r.one.warm_ms, vmap_ms: r.vmap.warm_ms, speedup: r.speedup,
      refused: refused ? r.pmap.kind : null, dispatches: r.work.dispatches,
      lanesBusy: document.querySelectorAll('#tab-basics .lane.busy').length,
    });
    return r;
  } catch (e) {
    const msg = fail('basics', e);
    last.basics = { error: msg };
    renderBasics();
    // A cancelled run is no failure: the mark keeps what the last finished run showed.
    if (e instanceof CancelledError) setMode('basics', { cancelled: true });
    else setMode('basics', { ran: true, ok: false, realKernels: false, error: msg });
    return { ok: false };
  }
}

function renderBasics() {
  const r = last.basics;
  const out = $('b-result');
  if (!r) { out.replaceChildren(); return; }
  if (r.error) { out.replaceChildren(errorBox('', r.error)); return; }
  const lanes = $('b-lanes').querySelectorAll('.lane');
  const refused = !!r.pmap.error;
  if (!refused) {
    r.pmap.device_ms.forEach((ms, i) => {
      if (lanes[i]) { lanes[i].className = 'lane done'; lanes[i].querySelector('.time').textContent = `${ms.toFixed(1)} ms`; }
    });
  } else {
    lanes.forEach((l) => {
      l.className = 'lane bad';
      l.querySelector('.block').textContent = `${r.batch} / ${r.devices} = ${(r.batch / r.devices).toFixed(2)} ✗`;
      l.querySelector('.time').textContent = '✗';
    });
  }
  const speed = (base, x) => (x > 0 && base > 0 ? `${fmt(base / x)}×` : '—');
  const parts = [
    table([t('basics.col.how'), t('basics.col.cold'), t('basics.col.warm', { k: r.reps }), t('basics.col.speed'), t('basics.col.err')], [
      refused
        ? [t('basics.pmap', { n: r.devices }), '—', '—', '—', r.pmap.kind]
        : [t('basics.pmap', { n: r.devices }), fmt(r.pmap.cold_ms), fmt(r.pmap.warm_ms), speed(r.one.warm_ms, r.pmap.warm_ms), sci(r.err_pmap)],
      [t('basics.one'), fmt(r.one.cold_ms), fmt(r.one.warm_ms), '1.00×', sci(r.err_one)],
      [t('basics.vmap'), fmt(r.vmap.cold_ms), fmt(r.vmap.warm_ms), speed(r.one.warm_ms, r.vmap.warm_ms), sci(r.err_vmap)],
    ]),
    node('p', 'small muted', t('basics.coldnote', { k: r.reps })),
  ];
  if (refused) {
    parts.push(node('p', '', t('basics.refused', { b: r.batch, n: r.devices })));
    parts.push(brigadeError(r.pmap.error, r.pmap.kind, 'b-error'));
  } else {
    parts.push(node('p', '', t('basics.joined', { shape: `(${r.out_shape.join(', ')})`, d: sci(r.pmap_vs_vmap) })));
    parts.push(node('p', '', t('basics.speedup', { x: fmt(r.speedup), n: r.devices })));
  }
  if (status.software || r.devices > 1) parts.push(node('p', 'small note', t(status.software ? 'basics.shared.sw' : 'basics.shared.hw')));
  const errs = [r.err_one, r.err_vmap, ...(refused ? [] : [r.err_pmap])];
  parts.push(checkLine(r.ok, Math.max(...errs)), workLine(r.work));
  out.replaceChildren(...parts);
}

/** The test's Basics: an indivisible batch first (pmap refused, the baseline and vmap verified,
 * no lane left busy), then one that divides. */
async function runBasicsTest() {
  const n = status.devices;
  let odd = null;
  if (n > 1) {
    const b = 1001 % n === 0 ? 1003 : 1001;
    const r = await runBasics(b, 64, 1);
    const m = status.modes.basics;
    odd = { batch: b, ok: m.ok, refused: m.refused, lanesBusy: m.lanesBusy, vmap_ms: m.vmap_ms, shown: $('b-error')?.textContent ?? '', hint: document.querySelector('#b-error .ehint')?.textContent ?? '' };
    void r;
  }
  await runBasics(1200, 64, 2);
  const ok = status.modes.basics.ok && (odd === null || (odd.ok && odd.refused === 'IndivisibleSplit' && odd.lanesBusy === 0));
  setMode('basics', { indivisible: odd, ok });
}

// ---- 进阶 Advanced -------------------------------------------------------------------------------

const divHistory = [];

async function runDivisibility(batch = +$('a-batch').value, shards = +$('a-shards').value) {
  drawLanes('advanced', $('a-lanes'), splitBlocks(shards, batch));
  try {
    const r = JSON.parse(await bg.divisibility(batch, shards));
    divHistory.push(r);
    if (r.error) status.indivisible = { batch, shards, kind: r.kind, message: r.error };
    renderDivisibility();
    return r;
  } catch (e) {
    const msg = fail('divisibility', e);
    divHistory.push({ batch, shards, failed: msg });
    renderDivisibility();
    return { ok: false };
  }
}

function renderDivisibility() {
  const out = $('a-result1');
  if (!divHistory.length) { out.replaceChildren(); return; }
  const rows = divHistory.slice(-6).map((r) => [
    String(r.batch), String(r.shards),
    r.error || r.failed ? '—' : String(r.rows_per_device),
    r.error || r.failed ? '—' : fmt(r.ms),
    r.error ? r.kind : r.failed ? '✗' : r.ok ? '✓' : '✗',
  ]);
  const lastRun = divHistory[divHistory.length - 1];
  const parts = [table(['B', 'n', 'b_local', 'ms', ''], rows)];
  const lastErr = [...divHistory].reverse().find((r) => r.error);
  if (lastRun.error) {
    // No block size works: every lane shows the fraction it would have needed.
    $('a-lanes').querySelectorAll('.lane').forEach((l) => {
      l.className = 'lane bad';
      l.querySelector('.block').textContent = `${lastRun.batch} / ${lastRun.shards} = ${(lastRun.batch / lastRun.shards).toFixed(2)} ✗`;
      l.querySelector('.time').textContent = '—';
    });
  } else if (lastRun.failed) {
    parts.push(errorBox('', lastRun.failed));
  } else {
    $('a-lanes').querySelectorAll('.lane').forEach((l, i) => {
      l.className = 'lane done';
      l.querySelector('.time').textContent = lastRun.device_ms?.[i] !== undefined ? `${fmt(lastRun.device_ms[i], 1)} ms` : '';
    });
    parts.push(node('p', '', t('adv.split', { n: lastRun.shards, b: lastRun.rows_per_device, total: fmt(lastRun.total, 3) })));
    parts.push(checkLine(lastRun.ok, lastRun.err), workLine(lastRun.work));
  }
  if (lastErr) parts.push(errorBox(t('adv.error', { kind: lastErr.kind }), lastErr.error, 'div-error', lastErr.kind));
  out.replaceChildren(...parts);
}

async function runInAxes() {
  try {
    last.inaxes = JSON.parse(await bg.in_axes_demo(4, 8, 6));
  } catch (e) { last.inaxes = { error: fail('in_axes', e) }; }
  renderInAxes();
  return last.inaxes;
}

function renderInAxes() {
  const r = last.inaxes;
  const out = $('a-result2');
  if (!r) return out.replaceChildren();
  if (r.error) return out.replaceChildren(errorBox('', r.error));
  out.replaceChildren(
    node('p', '', `x ${JSON.stringify(r.x_shape)} in_axes=0 · w ${JSON.stringify(r.w_shape)} in_axes=None`),
    node('p', '', t('adv.sees', { ins: r.device_inputs.join(', '), outs: r.device_outputs.join(', '), shape: `(${r.out_shape.join(', ')})` })),
    node('p', 'small', `${fmt(r.ms)} ms · ${r.device_ms.map((m, i) => `#${i} ${fmt(m, 1)} ms`).join(' · ')}`),
    errorBox(t('adv.without'), r.without_none, undefined, r.without_kind),
    checkLine(r.ok, r.err), workLine(r.work),
  );
}

async function runNesting() {
  try {
    last.nesting = JSON.parse(await bg.nesting(3, 8));
  } catch (e) { last.nesting = { error: fail('nesting', e) }; }
  renderNesting();
  return last.nesting;
}

function renderNesting() {
  const r = last.nesting;
  const out = $('a-result3');
  if (!r) return out.replaceChildren();
  if (r.error) return out.replaceChildren(errorBox('', r.error));
  const levels = [
    [`(${r.x_shape.join(', ')})`, 'adv.level.global', 'pmap ↓'],
    [r.device_inputs[0], 'adv.level.device', 'vmap ↓'],
    [r.example_inputs[0], 'adv.level.example', 'f'],
    [r.example_outputs[0], 'adv.level.exout', 'vmap ↑'],
    [r.device_outputs[0], 'adv.level.devout', 'pmap ↑'],
    [`(${r.out_shape.join(', ')})`, 'adv.level.out', ''],
  ];
  const walk = node('div', 'walk');
  levels.forEach(([shape, key, arrow]) => {
    const l = node('div', 'lvl');
    l.append(node('b', '', shape), node('span', '', t(key)));
    walk.append(l);
    if (arrow) walk.append(node('span', 'arrow', `→ ${arrow} →`));
  });
  const det = document.createElement('details');
  det.append(node('summary', '', t('adv.program')), node('pre', 'program', r.device_program));
  out.replaceChildren(walk, det, node('p', 'small', `${fmt(r.ms)} ms`), checkLine(r.ok, r.err), workLine(r.work));
}

async function runBarrier(uneven = $('a-uneven').checked) {
  try {
    last.barrier = JSON.parse(await bg.barrier(TEST ? 64 : 256, 32, uneven));
  } catch (e) { last.barrier = { error: fail('barrier', e) }; }
  renderBarrier();
  return last.barrier;
}

const STAGE_COLORS = {
  'stage 1': '#e08a3c', wait: '#cfc4b6', 'stage 2': '#3a8f5c', submit: '#a4aee0',
  read: '#5b6bbf', pmean: '#3f4ba0', write: '#7c88cc', upload: '#a4aee0', compute: '#e08a3c',
};

function renderBarrier() {
  const r = last.barrier;
  const out = $('a-result4');
  if (!r) return out.replaceChildren();
  if (r.error) return out.replaceChildren(errorBox('', r.error));
  const n = r.devices;
  const rows = [...Array.from({ length: n }, (_, i) => deviceLabel(i)), t('stage.host')];
  const bars = r.timeline.map((b) => ({
    row: b.device < 0 ? n : b.device, t0: b.t0, t1: b.t1, color: STAGE_COLORS[b.stage] ?? '#999', label: t(`stage.${b.stage}`),
  }));
  const plot = node('div', 'plot');
  const waits = r.wait_ms.map((w, i) => `#${i} ${fmt(w, 1)} ms`).join(' · ');
  out.replaceChildren(
    node('p', '', t('adv.stages', { s: r.stages, x: r.exchanges, ms: fmt(r.pmap_ms) })),
    ...(r.uneven ? [node('p', '', t('adv.uneven.on', { f: r.uneven_factor, d: r.devices - 1 }))] : []),
    plot, node('p', 'small muted', t('adv.legend')),
    node('p', 'small', t('adv.waits', { w: waits })),
    checkLine(r.ok, Math.max(r.err, r.err_staged)), workLine(r.work),
  );
  gantt(plot, rows, bars, ['stage 1', 'wait', 'host', 'stage 2'].map((k) => [t(`stage.${k}`), STAGE_COLORS[k === 'host' ? 'read' : k]]));
}

async function runAdvanced() {
  const t0 = performance.now();
  const n = status.devices;
  // A batch that divides, then one that does not: the second shows brigade's own error.
  const good = 1000 % n === 0 ? 1000 : 1200;
  $('a-batch').value = good;
  const r1 = await runDivisibility(good, n);
  let indivisibleShown = null;
  if (n > 1) {
    $('a-batch').value = 1001;
    const r = await runDivisibility(1001, n);
    indivisibleShown = !!r.error;
  }
  const r2 = await runInAxes();
  const r3 = await runNesting();
  const r4 = await runBarrier(false);
  let r5 = { ok: true, work: r4.work };
  if (n > 1) {
    // Uneven load: the slow device arrives last and the others wait for it.
    $('a-uneven').checked = true;
    r5 = await runBarrier(true);
  }
  const all = [r1, r2, r3, r4, r5];
  setMode('advanced', {
    ran: true,
    ok: all.every((r) => r.ok === true) && indivisibleShown !== false,
    realKernels: all.every((r) => real(r.work)),
    indivisibleShown,
    unevenWaits: r5.wait_ms ?? null,
    // Which of the four checks failed, and by how much: the browser test prints this.
    checks: all.map((r) => ({ ok: r.ok, err: r.err })),
    ms: performance.now() - t0,
    dispatches: all.reduce((s, r) => s + (r.work?.dispatches ?? 0), 0),
  });
}

// ---- 实战 Hands-on -------------------------------------------------------------------------------

let trainState = null;

async function runTraining(steps = +$('h-steps').value) {
  const n = status.devices;
  trainState = { setup: JSON.parse(await bg.train_init()), steps: [], eval: null };
  for (let i = 0; i < steps; i++) {
    step(`${i + 1}/${steps}`);
    const r = JSON.parse(await bg.train_step());
    trainState.steps.push(r);
    renderTraining();
    // Let the page paint the curve between steps.
    await new Promise((res) => setTimeout(res, 0));
  }
  trainState.eval = JSON.parse(await bg.train_eval());
  renderTraining();
  void n;
  return trainState;
}

const DEVICE_COLORS = ['#e08a3c', '#5b6bbf', '#3a8f5c', '#b5461f'];

function renderTraining() {
  const s = trainState;
  const out = $('h-result1');
  if (!s) { out.replaceChildren(); return; }
  if (s.error) { out.replaceChildren(errorBox('', s.error)); return; }
  const pts = s.steps.map((r, i) => [i + 1, r.loss]);
  const every = Math.max(1, Math.ceil(pts.length / 8));
  linePlot($('h-loss'), [{ name: 'loss', color: '#b5461f', points: pts }],
    { xlabel: 'step', xticks: pts.filter((_, i) => i % every === 0).map((p) => p[0]) });
  const lastStep = s.steps[s.steps.length - 1];
  if (!lastStep) return;
  groupedBars($('h-grads'), [
    ...lastStep.b2_grad_local.map((v, d) => ({ name: t('hands.device', { d }), color: DEVICE_COLORS[d % 4], values: v })),
    { name: t('hands.mean'), color: '#2b2622', values: lastStep.b2_grad_mean },
  ]);
  const yes = (b) => (b ? '✓' : '✗');
  const parts = [
    node('p', '', t('hands.stepinfo', {
      step: lastStep.step, loss: fmt(lastStep.loss, 4), ms: fmt(lastStep.ms),
      ep: sci(lastStep.err_pmean), er: sci(lastStep.err_ref), id: yes(lastStep.identical),
    })),
    node('p', 'small', t('hands.norms', { norms: lastStep.grad_norms.map((v) => fmt(v, 4)).join(' · ') })),
  ];
  const stepsOk = s.steps.every((r) => r.ok);
  if (s.eval) {
    const e = s.eval;
    parts.push(node('p', '', t('hands.eval', {
      acc: fmt(100 * e.accuracy, 1), test: e.test, agree: e.agree_with_reference,
      first: fmt(e.first_loss, 3), last: fmt(e.last_loss, 3),
    })));
    parts.push(checkLine(stepsOk && e.ok, Math.max(...s.steps.map((r) => Math.max(r.err_pmean, r.err_ref)))));
  }
  const work = s.steps.reduce((w, r) => ({ dispatches: w.dispatches + r.work.dispatches, pipelines: w.pipelines + r.work.pipelines }), { dispatches: 0, pipelines: 0 });
  parts.push(workLine(work));
  out.replaceChildren(...parts);
}

async function runMatmul(n = +$('h-n').value) {
  const k = status.devices;
  drawLanes('matmul', $('h-lanes'), splitBlocks(k, n, 'basics.rows').map(([x, w], i) => [x, w, `A${i} · B`]));
  try {
    last.matmul = JSON.parse(await bg.row_split_matmul(n));
  } catch (e) { last.matmul = { error: fail('matmul', e) }; }
  renderMatmul();
  return last.matmul;
}

function renderMatmul() {
  const r = last.matmul;
  const out = $('h-result2');
  if (!r) return out.replaceChildren();
  if (r.error) return out.replaceChildren(errorBox('', r.error));
  out.replaceChildren(
    node('p', '', `C (${r.n}×${r.n}) = A (${r.n}×${r.n}) · B (${r.n}×${r.n}) · ${t('hands.mm', { rows: r.device_rows.join(' + '), ms: fmt(r.ms), checked: r.rows_checked })}`),
    checkLine(r.ok, r.err), workLine(r.work),
  );
}

async function runHandsOn() {
  const t0 = performance.now();
  let ok = true;
  let realK = true;
  try {
    if (TEST) $('h-steps').value = 24;
    const s = await runTraining(+$('h-steps').value);
    ok = s.steps.every((r) => r.ok) && s.eval.ok;
    realK = s.steps.every((r) => real(r.work));
    setMode('handson', { train_steps: s.steps.length, first_loss: s.eval.first_loss, last_loss: s.eval.last_loss, accuracy: s.eval.accuracy, step_ms: s.steps.map((r) => r.ms) });
  } catch (e) {
    trainState = { error: fail('training', e) };
    renderTraining();
    ok = false;
  }
  if (TEST) $('h-n').value = Math.ceil(128 / status.devices) * status.devices;
  const m = await runMatmul(+$('h-n').value);
  setMode('handson', {
    ran: true, ok: ok && m.ok === true, realKernels: realK && real(m.work), ms: performance.now() - t0,
  });
}

// ---- 优化 Optimization ---------------------------------------------------------------------------

function sweepSizes() {
  const n = Math.max(1, status.devices);
  const base = TEST ? [32, 64, 128, 256] : [32, 64, 128, 256, 512];
  if (!TEST && $('o-big').checked) base.push(1024);
  return base.map((s) => Math.ceil(s / n) * n);
}

let sweep = [];

async function runSweep() {
  sweep = [];
  renderSweep();
  const sizes = sweepSizes();
  for (const [i, n] of sizes.entries()) {
    step(`n = ${n} (${i + 1}/${sizes.length})`);
    try {
      sweep.push(JSON.parse(await bg.sweep_point(n, TEST ? 2 : 3)));
    } catch (e) {
      sweep.push({ n, error: fail(`sweep ${n}`, e) });
      if (e instanceof CancelledError) break;
    }
    renderSweep();
  }
  return sweep;
}

/** The smallest measured n from which the prediction for k independent devices stays faster. */
function crossover(points) {
  let at = null;
  for (const r of points) {
    if (r.predicted_speedup > 1) at ??= r.n; else at = null;
  }
  return at;
}

function renderSweep() {
  const k = status.devices;
  const good = sweep.filter((r) => !r.error);
  const cross = crossover(good);
  linePlot($('o-plot'), [
    { name: t('opt.plot.one'), color: '#5b6bbf', points: good.map((r) => [r.n, r.single_ms]) },
    { name: t('opt.plot.all', { n: k }), color: '#e08a3c', points: good.map((r) => [r.n, r.split_ms]) },
    { name: t('opt.plot.pred', { n: k }), color: '#3a8f5c', dashed: true, points: good.map((r) => [r.n, r.predicted_ms]) },
  ], { logx: true, logy: true, legendLeft: true, xlabel: 'n', ylabel: t('opt.plot.y'), marker: cross ? { x: cross, label: t('opt.cross', { n: cross }) } : null });
  $('o-table').replaceChildren(table(
    [t('opt.col.n'), t('opt.col.one'), t('opt.col.all', { n: k }), t('opt.col.speed'), t('opt.col.share'), t('opt.col.pred', { n: k }), t('opt.col.pspeed'), ''],
    sweep.map((r) => (r.error ? [String(r.n), '—', '—', '—', '—', '—', '—', '✗'] : [
      String(r.n), fmt(r.single_ms), fmt(r.split_ms), `${fmt(r.speedup)}×`, `${fmt(100 * r.compute_share, 0)} %`,
      fmt(r.predicted_ms), `${fmt(r.predicted_speedup)}×`, r.ok ? '✓' : '✗',
    ])),
  ));
  const out = $('o-result1');
  if (!sweep.length) return out.replaceChildren();
  const errs = sweep.find((r) => r.error);
  const maxErr = Math.max(0, ...good.map((r) => Math.max(r.err_single, r.err_split, r.err_between, r.err_pieces)));
  const work = good.reduce((w, r) => ({ dispatches: w.dispatches + r.work.dispatches, pipelines: w.pipelines + r.work.pipelines }), { dispatches: 0, pipelines: 0 });
  const lastP = good[good.length - 1];
  out.replaceChildren(
    ...(errs ? [errorBox('', errs.error)] : []),
    ...(lastP ? [node('p', '', cross ? t('opt.crossline', { n: cross, k, x: fmt(lastP.predicted_speedup) }) : t('opt.nocross', { k }))] : []),
    ...(lastP ? [node('p', 'small', t('opt.pieces', {
      n: lastP.n, up: fmt(lastP.one.upload_ms), c: fmt(lastP.one.compute_ms), rd: fmt(lastP.one.read_ms),
      rows: lastP.n / k, bup: fmt(lastP.block.upload_ms), bc: fmt(lastP.block.compute_ms), brd: fmt(lastP.block.read_ms),
    }))] : []),
    node('p', 'small note', t(status.software ? 'opt.shared.sw' : 'opt.shared.hw', { k })),
    checkLine(!errs && good.every((r) => r.ok), maxErr), workLine(work),
  );
}

async function runTimeline(n = +$('o-n').value) {
  try {
    last.timeline = JSON.parse(await bg.timeline(n));
  } catch (e) { last.timeline = { error: fail('timeline', e) }; }
  renderTimeline();
  return last.timeline;
}

function renderTimeline() {
  const r = last.timeline;
  const out = $('o-result2');
  if (!r) return out.replaceChildren();
  if (r.error) return out.replaceChildren(errorBox('', r.error));
  const names = { upload: t('opt.upload'), compute: t('opt.compute'), read: t('opt.read') };
  gantt($('o-timeline'), Array.from({ length: r.devices }, (_, i) => deviceLabel(i)),
    r.timeline.map((b) => ({ row: b.device, t0: b.t0, t1: b.t1, color: STAGE_COLORS[b.stage], label: names[b.stage] ?? b.stage })),
    [[names.upload, STAGE_COLORS.upload], [names.compute, STAGE_COLORS.compute], [names.read, STAGE_COLORS.read]]);
  out.replaceChildren(node('p', 'small', `n = ${r.n}`), checkLine(r.ok, r.err), workLine(r.work));
}

async function runOptimize() {
  const t0 = performance.now();
  const s = await runSweep();
  const cross = crossover(s.filter((r) => !r.error));
  if (TEST) $('o-n').value = Math.ceil(128 / status.devices) * status.devices;
  const tl = await runTimeline(+$('o-n').value);
  setMode('optimize', {
    ran: true,
    ok: s.every((r) => r.ok === true) && tl.ok === true,
    realKernels: s.every((r) => real(r.work)) && real(tl.work),
    ms: performance.now() - t0,
    sweep: s.map((r) => ({ n: r.n, single_ms: r.single_ms, split_ms: r.split_ms, compute_share: r.compute_share, predicted_ms: r.predicted_ms })),
    crossover: cross,
    plotted: $('o-plot').querySelectorAll('polyline').length,
  });
}

// ---- language, tabs, wiring ---------------------------------------------------------------------

const quizState = { chosen: {}, result: {} };

function rerender() {
  applyStatic();
  for (const id of ['b-run', 'a-run1', 'a-run2', 'a-run3', 'a-run4', 'h-train', 'h-run2', 'o-run1', 'o-run2', 'relight']) {
    const b = $(id);
    if (b && !b.disabled) b.textContent = t(b.dataset.i18n);
  }
  if (status.ready) {
    $('devstatus').textContent = t('devices.ready', { count: status.devices, backend: status.backend });
    $('nowebgpu-body').textContent = t('nowebgpu.body', { n: status.devices });
  }
  // Lane labels (and every text drawn from a key) and the results, in the new language.
  document.querySelectorAll('[data-tr]').forEach((el) => { el.textContent = tr(JSON.parse(el.dataset.tr)); });
  showRun();
  renderBasics(); renderDivisibility(); renderInAxes(); renderNesting(); renderBarrier();
  renderTraining(); renderMatmul(); renderSweep(); renderTimeline();
  renderQuiz($('quiz'), quizState);
  publish();
}

function showTab(name) {
  document.querySelectorAll('.tabs button').forEach((b) => b.classList.toggle('active', b.dataset.tab === name));
  document.querySelectorAll('.tab').forEach((s) => s.classList.toggle('active', s.id === `tab-${name}`));
}

// Every mode runs by itself the first time it is opened (the runs queue up, stay cancellable and
// never block the page); the test runs the modes itself.
const autoRan = new Set(['basics']);

function autoRun(name) {
  if (TEST || autoRan.has(name) || !status.ready) return;
  autoRan.add(name);
  $(`tab-${name}`)?.querySelectorAll('button.run').forEach((b) => b.click());
}

function wire() {
  document.querySelectorAll('.tabs button').forEach((b) => b.addEventListener('click', () => { showTab(b.dataset.tab); autoRun(b.dataset.tab); }));
  $('lang').addEventListener('click', () => { setLang(getLang() === 'zh' ? 'en' : 'zh'); rerender(); });
  $('relight').addEventListener('click', () => withButton('relight', () => openDevices(+$('devcount').value)
    .catch((e) => { $('devstatus').textContent = fail('start', e); }), 'run.start'));
  $('cancel').addEventListener('click', () => cancelRun());
  $('b-run').addEventListener('click', () => withButton('b-run', () => runBasics()));
  $('a-run1').addEventListener('click', () => withButton('a-run1', () => runDivisibility()));
  $('a-run2').addEventListener('click', () => withButton('a-run2', () => runInAxes()));
  $('a-run3').addEventListener('click', () => withButton('a-run3', () => runNesting()));
  $('a-run4').addEventListener('click', () => withButton('a-run4', () => runBarrier()));
  $('a-uneven').addEventListener('change', () => withButton('a-run4', () => runBarrier()));
  $('h-train').addEventListener('click', () => withButton('h-train', () => runTraining().catch((e) => {
    trainState = { error: fail('training', e) }; renderTraining();
  })));
  $('h-run2').addEventListener('click', () => withButton('h-run2', () => runMatmul()));
  $('o-run1').addEventListener('click', () => withButton('o-run1', () => runSweep()));
  $('o-big').addEventListener('change', () => { $('o-sizes').textContent = sweepSizes().join(', '); });
  $('o-run2').addEventListener('click', () => withButton('o-run2', () => runTimeline()));
}

/** The longest the page's thread went without running a timer (ms): a freeze shows here. */
function watchLag() {
  let lastTick = performance.now();
  status.maxLagMs = 0;
  setInterval(() => {
    const now = performance.now();
    status.maxLagMs = Math.max(status.maxLagMs, now - lastTick - 20);
    lastTick = now;
  }, 20);
}

async function main() {
  if (params.get('lang') === 'en') setLang('en');
  watchLag();
  wire();
  rerender();
  try {
    await init();
  } catch (e) {
    fail('loading brigade.wasm (build it with web/build.sh)', e);
    $('devstatus').textContent = String(e);
    return;
  }
  const asked = +(params.get('devices') ?? 0);
  const n = asked >= 1 && asked <= 4 ? asked : await webgpuDefault();
  $('devcount').value = String(n);
  try {
    await serial(() => openDevices(n), 'run.start');
  } catch (e) {
    $('devstatus').textContent = fail('start', e);
    return;
  }
  rerender();
  // Loading the page itself is not a freeze: measure from here.
  status.maxLagMs = 0;
  if (!TEST) {
    // The kitchen comes alive at once; every other demo waits for its Run button.
    await withButton('b-run', () => runBasics());
  }
  if (TEST) {
    // Every mode in turn, with small sizes; the browser test waits for `done`.
    const only = params.get('only');
    for (const [name, run] of [['basics', runBasicsTest], ['advanced', runAdvanced], ['handson', runHandsOn], ['optimize', runOptimize]]) {
      if (only && only !== name) continue;
      showTab(name);
      try { await serial(run, `tab.${name}`); } catch (e) { setMode(name, { ran: true, ok: false, error: fail(name, e) }); }
    }
    showTab('basics');
    status.done = true;
    publish();
  }
}

main();
