// The Topics tab (专题): cards for the tutorial's sections the four modes do not show, each calling
// an export of web/src/cards.rs (real kernels, checked against the reference in Rust) and drawing
// what it measured. Self-contained: it builds its own DOM inside #tab-topics, merges its strings
// into i18n.js (i18n-cards.js), follows the page's language (the <html lang> attribute) and
// publishes window.brigadeCards for the browser test (web/test/cards.mjs).
//
// Query parameter: cards=1 runs every card once the page is ready (the browser test).

import { bg } from './engine.js';
import { t, applyStatic } from './i18n.js';
import { CARD_KEYS } from './i18n-cards.js';
import { gantt } from './plot.js';
import { attachPrograms } from './programs.js';

const params = new URLSearchParams(location.search);
const $ = (id) => document.getElementById(id);

// ---- status for the browser test ----------------------------------------------------------------

const status = { done: false, lang: 'zh', cards: {}, errors: [], keys: CARD_KEYS };
window.brigadeCards = status;

function setCard(name, patch) {
  status.cards[name] = { ...(status.cards[name] ?? {}), ...patch };
  const own = document.querySelector(`#card-${name} > summary .mark`);
  if (own) {
    own.textContent = status.cards[name].ok ? '✓' : '✗';
    own.className = `mark ${status.cards[name].ok ? 'ok' : 'bad'}`;
  }
  const all = Object.values(status.cards);
  const mark = $('mark-topics');
  if (mark && all.length) {
    const ok = all.every((c) => c.ok);
    mark.textContent = ok ? '✓' : '✗';
    mark.className = `mark ${ok ? 'ok' : 'bad'}`;
  }
}

// Real kernels: WebGPU devices and dispatches > 0 (as the page's own status counts them).
const real = (work) => !!window.brigadeStatus?.webgpu && (work?.dispatches ?? 0) > 0;

// ---- small DOM helpers --------------------------------------------------------------------------

function node(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function i18n(tag, key, cls) {
  const e = node(tag, cls);
  e.dataset.i18n = key;
  e.textContent = t(key);
  return e;
}
const fmt = (v, d = 2) => (v === null || v === undefined ? '–' : Number(v).toFixed(d));
const sci = (v) => (v === null || v === undefined ? '–' : Number(v).toExponential(1));
function bytes(v) {
  if (v === null || v === undefined) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return `${Number.isInteger(v) ? v : v.toFixed(1)} ${u[i]}`;
}
function checkLine(ok, err) {
  const tol = sci(window.brigadeStatus?.tol ?? 1e-4);
  return node('div', `check ${ok ? 'ok' : 'bad'}`, ok ? t('check.ok', { tol }) : t('check.bad', { err: sci(err), tol }));
}
function workLine(work) {
  return node('div', 'work', real(work) ? t('kernels.real', { d: work.dispatches, p: work.pipelines }) : t('kernels.cpu'));
}
function table(head, rows) {
  const tb = document.createElement('table');
  const tr = document.createElement('tr');
  head.forEach((h) => tr.append(node('th', '', h)));
  tb.append(tr);
  for (const r of rows) {
    const row = document.createElement('tr');
    r.forEach((c) => { const td = node('td'); if (c instanceof Node) td.append(c); else td.textContent = c; row.append(td); });
    tb.append(row);
  }
  return tb;
}
/** An error as the page shows it: its kind in the page's language, brigade's text beneath. */
function errorView(e) {
  const box = node('div', 'cards-error');
  const known = t(`cards.kind.${e.kind}`);
  box.append(node('div', 'check bad', known.startsWith('cards.') ? t('cards.kind.other', { kind: e.kind }) : known));
  const d = node('details');
  d.open = e.message.length < 600; // a shader's full text stays folded
  d.append(node('summary', 'muted small', t('cards.original')), node('div', 'error', e.message));
  box.append(d);
  return box;
}
function controls(...items) {
  const c = node('div', 'controls');
  c.append(...items);
  return c;
}
function numInput(id, key, value, min, max) {
  const l = node('label');
  const i = node('input');
  Object.assign(i, { id, type: 'number', value, min, max });
  l.append(i18n('span', key), ' ', i);
  return l;
}
function runButton(id) {
  const b = i18n('button', 'run', 'run');
  b.id = id;
  return b;
}

// ---- one Rust call at a time (the page's queue when it offers one) ------------------------------

let chain = Promise.resolve();
function serial(fn) {
  if (window.brigadeSerial) return window.brigadeSerial(fn);
  const run = chain.then(fn);
  chain = run.catch(() => {});
  return run;
}

// app.js instantiates the wasm and opens the devices (a second init() here could race it).
async function ready() {
  while (!window.brigadeStatus?.ready) await new Promise((r) => setTimeout(r, 100));
}

const last = {};

async function runCard(name, btn, call, render) {
  if (btn) { btn.disabled = true; btn.textContent = t('running'); }
  const t0 = performance.now();
  try {
    await ready();
    const r = JSON.parse(await serial(call));
    last[name] = r;
    setCard(name, { ran: true, ok: r.ok === true, realKernels: real(r.work), ms: performance.now() - t0, dispatches: r.work?.dispatches ?? 0, devices: r.devices });
  } catch (e) {
    const msg = String(e?.message ?? e);
    status.errors.push(`${name}: ${msg}`);
    last[name] = { error: msg };
    setCard(name, { ran: true, ok: false, realKernels: false, error: msg });
  } finally {
    if (btn) { btn.disabled = false; btn.textContent = t('run'); }
  }
  render();
}

function renderError(host, r) {
  if (!r) { host.replaceChildren(); return true; }
  if (r.error) {
    const d = node('details');
    d.open = r.error.length < 600;
    d.append(node('summary', 'check bad', r.error.split('\n')[0].slice(0, 200)), node('div', 'error', r.error));
    host.replaceChildren(d);
    return true;
  }
  return false;
}

// ---- the cards ----------------------------------------------------------------------------------

const CARDS = {};

CARDS.debug = {
  build(card) {
    card.append(
      i18n('h2', 'cards.debug.h'), i18n('p', 'cards.debug.p'),
      controls(runButton('c-debug-run')),
      node('div', 'result', ''), node('div', 'programs', ''),
    );
    card.querySelector('.result').id = 'c-debug';
    card.querySelector('.programs').dataset.programs = 'debug_errors';
  },
  run() { return runCard('debug', $('c-debug-run'), () => bg.debug_errors(), CARDS.debug.render); },
  render() {
    const host = $('c-debug');
    const r = last.debug;
    if (renderError(host, r)) return;
    const out = [];
    out.push(node('h3', '', t('cards.err1.h')));
    if (r.split.error) {
      out.push(node('p', '', t('cards.err1.p', { rows: r.split.rows, n: r.devices })), errorView(r.split.error));
    } else {
      out.push(node('p', 'muted', t('cards.err1.one')));
    }
    out.push(node('p', '', t('cards.err1.fix', { padded: r.split.padded_rows, sums: r.split.sums.map((v) => fmt(v, 3)).join(', ') })), checkLine(r.split.ok, r.split.err));
    out.push(node('h3', '', t('cards.err2.h')), node('p', '', t('cards.err2.p')));
    if (r.host_if.error) out.push(errorView(r.host_if.error));
    out.push(node('p', '', t('cards.err2.fix')));
    const ul = node('ul');
    r.host_if.branches.forEach((b, d) => {
      const row = r.host_if.input.slice(d * 3, d * 3 + 3);
      ul.append(node('li', '', t('cards.err2.branch', { d, sum: fmt(row.reduce((a, v) => a + v, 0), 3), b })));
    });
    out.push(ul, checkLine(r.host_if.ok, r.host_if.err));
    const go = node('a', 'cards-jump', t('cards.err3.go'));
    go.href = '#card-random';
    go.id = 'c-debug-to-rand';
    go.addEventListener('click', (ev) => { ev.preventDefault(); openCard('random', !last.random); });
    const p3 = node('p', '', `${t('cards.err3.p')} `);
    p3.append(go);
    out.push(node('h3', '', t('cards.err3.h')), p3, workLine(r.work));
    host.replaceChildren(...out);
  },
};

CARDS.prints = {
  build(card) {
    card.append(
      i18n('h2', 'cards.prints.h'), i18n('p', 'cards.prints.p'),
      controls(runButton('c-prints-run')),
      node('div', 'result'), i18n('h3', 'cards.fallback.h'), i18n('p', 'cards.fallback.p'), node('div', 'result'),
      node('div', 'programs'),
    );
    const [a, b] = card.querySelectorAll('.result');
    a.id = 'c-prints';
    b.id = 'c-fallback';
    card.querySelector('.programs').dataset.programs = 'debug_prints';
  },
  run() { return runCard('prints', $('c-prints-run'), () => bg.debug_prints(4), CARDS.prints.render); },
  render() {
    const r = last.prints;
    if (renderError($('c-prints'), r)) { $('c-fallback').replaceChildren(); return; }
    const pre = node('pre', 'program cards-log', r.lines.join('\n'));
    $('c-prints').replaceChildren(pre, node('div', `check ${r.prints_ok ? 'ok' : 'bad'}`, t('cards.prints.check', { ok: r.prints_ok ? '✓' : '✗' })));
    const f = r.fallback;
    $('c-fallback').replaceChildren(
      node('p', '', t('cards.fallback.line', { n: r.devices, real: fmt(f.real_ms), one: fmt(f.one_ms), agree: sci(f.agree), e1: sci(f.err_real), e2: sci(f.err_one) })),
      checkLine(r.ok, Math.max(f.err_real, f.err_one)), workLine(r.work),
    );
  },
};

CARDS.planner = {
  build(card) {
    card.append(
      i18n('h2', 'cards.plan.h'), node('p', 'formula', 'N = ⌈B / b_cap⌉'), i18n('p', 'cards.plan.p'),
      controls(numInput('c-plan-b', 'cards.plan.B', 1000000, 1), numInput('c-plan-f', 'cards.plan.F', 256, 1, 1024), runButton('c-plan-run')),
      node('div', 'result'), node('div', 'programs'),
    );
    card.querySelector('.result').id = 'c-plan';
    card.querySelector('.programs').dataset.programs = 'planner';
  },
  run() {
    const b = +$('c-plan-b').value, f = +$('c-plan-f').value;
    return runCard('planner', $('c-plan-run'), () => bg.planner(b, f), CARDS.planner.render);
  },
  render() {
    const r = last.planner;
    if (renderError($('c-plan'), r)) return;
    const out = [node('p', '', t('cards.plan.limit', { dev: r.device, limit: bytes(r.binding_limit), maxbuf: bytes(r.max_buffer) }))];
    if (r.b_cap < 0) {
      out.push(node('p', '', t('cards.plan.nocap')));
    } else {
      out.push(
        node('p', '', t('cards.plan.per', { per: bytes(r.bytes_per_sample), fixed: bytes(r.bytes_fixed) })),
        node('p', 'formula', t('cards.plan.cap', { cap: r.b_cap, B: r.batch_total, N: r.devices_needed })),
      );
    }
    out.push(
      node('p', '', t('cards.plan.share', { n: r.page_devices, share: r.share, fits: t(r.share_fits ? 'cards.plan.fits' : 'cards.plan.nofit') })),
      node('p', 'muted small', t('cards.plan.check', { ok: r.plan_ok ? '✓' : '✗', err: sci(r.err) })),
      checkLine(r.ok, r.err), workLine(r.work),
    );
    $('c-plan').replaceChildren(...out);
  },
};

const DEVICE_COLORS = ['#e08a3c', '#5b6bbf', '#3a8f5c', '#b5461f'];

CARDS.random = {
  build(card) {
    card.append(
      i18n('h2', 'cards.rand.h'), i18n('p', 'cards.rand.p'),
      controls(numInput('c-rand-seed', 'cards.rand.seed', 0, 0), runButton('c-rand-run')),
      node('div', 'result'), node('div', 'programs'),
    );
    card.querySelector('.result').id = 'c-rand';
    card.querySelector('.programs').dataset.programs = 'random_keys';
  },
  run() {
    const seed = Math.max(0, Math.floor(+$('c-rand-seed').value || 0)) >>> 0;
    return runCard('random', $('c-rand-run'), () => bg.random_keys(6, seed), CARDS.random.render);
  },
  render() {
    const r = last.random;
    if (renderError($('c-rand'), r)) return;
    const out = [];
    for (const run of r.runs) {
      out.push(node('h3', '', t(`cards.rand.${run.name}`)));
      const rows = [];
      for (let d = 0; d < r.devices; d++) {
        const vals = run.noise.slice(d * r.width, (d + 1) * r.width);
        const who = node('span', '', t('cards.rand.row', { d }));
        who.style.color = DEVICE_COLORS[d % 4];
        rows.push([who, ...vals.map((v) => fmt(v, 3))]);
      }
      out.push(table(['', ...Array.from({ length: r.width }, (_, i) => `ε${i}`)], rows));
      let verdict;
      if (r.devices === 1) verdict = node('p', 'muted', t('cards.rand.one'));
      else if (run.repeated_rows === r.devices) verdict = node('div', 'check bad cards-verdict', t('cards.rand.identical'));
      else verdict = node('div', 'check ok cards-verdict', t('cards.rand.distinct'));
      out.push(verdict, checkLine(run.ok, run.err));
    }
    const keys = [];
    for (let i = 0; i < r.split_keys.length; i += 2) keys.push(`[${r.split_keys[i]}, ${r.split_keys[i + 1]}]`);
    out.push(node('p', 'muted small', t('cards.rand.keys', { keys: keys.join(' ') })), workLine(r.work));
    $('c-rand').replaceChildren(...out);
  },
};

function shardsText(list) {
  return list.map((s) => (typeof s === 'string' ? s : t('cards.put.shard', { dev: s.device, shape: `[${s.shape.join(', ')}]` }))).join(' · ');
}

CARDS.placement = {
  build(card) {
    card.append(
      i18n('h2', 'cards.put.h'), i18n('p', 'cards.put.p'),
      controls(runButton('c-put-run')),
      node('div', 'result'), node('div', 'programs'),
    );
    card.querySelector('.result').id = 'c-put';
    card.querySelector('.programs').dataset.programs = 'placement';
  },
  run() { return runCard('placement', $('c-put-run'), () => bg.placement(64, 32), CARDS.placement.render); },
  render() {
    const r = last.placement;
    if (renderError($('c-put'), r)) return;
    const label = { host: t('cards.put.host'), placed: t('cards.put.placed') };
    $('c-put').replaceChildren(
      node('p', '', t('cards.put.one', { d: r.devices - 1, shape: `[${r.shape.join(', ')}]`, where: shardsText(r.one_device) })),
      node('p', '', `${t('cards.put.sharded')} ${shardsText(r.sharded)}`),
      node('p', '', `${t('cards.put.stacked', { n: r.devices })} ${shardsText(r.stacked)}`),
      table([t('cards.put.col.input'), t('cards.put.col.ms'), t('cards.put.col.up'), t('cards.put.col.down'), t('cards.put.col.err')],
        r.calls.map((c) => [label[c.input], fmt(c.ms), String(c.bytes_up), String(c.bytes_down), sci(c.err)])),
      node('p', '', t('cards.put.moved', { ms: fmt(r.put_ms), bytes: r.put_bytes, ok: r.placed_moves_nothing ? '✓' : '✗' })),
      checkLine(r.ok, Math.max(...r.calls.map((c) => c.err))), workLine(r.work),
    );
  },
};

CARDS.model = {
  build(card) {
    card.append(
      i18n('h2', 'cards.mp.h'), i18n('p', 'cards.mp.p'),
      controls(numInput('c-mp-width', 'cards.mp.width', 128, 1, 1024), numInput('c-mp-batch', 'cards.mp.batch', 256, 1),
        numInput('c-mp-micro', 'cards.mp.micro', 4, 1, 64), runButton('c-mp-run')),
      node('div', 'result'), node('div', 'programs'),
    );
    card.querySelector('.result').id = 'c-mp';
    card.querySelector('.programs').dataset.programs = 'model_parallel';
  },
  run(w = +$('c-mp-width').value, b = +$('c-mp-batch').value, m = +$('c-mp-micro').value) {
    return runCard('model', $('c-mp-run'), () => bg.model_parallel(w, b, m), CARDS.model.render);
  },
  render() {
    const r = last.model;
    if (renderError($('c-mp'), r)) return;
    const rows = r.stage_device.map((d, s) => `${t('cards.mp.stage', { s })} · #${d}`);
    const measured = node('div', 'plot');
    gantt(measured, rows, r.measured.map((b) => ({ row: b.stage, t0: b.t0, t1: b.t1, color: DEVICE_COLORS[b.device % 4], label: `m${b.micro}` })));
    const predicted = node('div', 'plot');
    gantt(predicted, rows, r.predicted.map((b) => ({ row: b.device, t0: b.t0, t1: b.t1, color: DEVICE_COLORS[r.stage_device[b.device] % 4], label: b.stage })));
    const where = r.stage_device.map((d, s) => `${t('cards.mp.stage', { s })} → #${d}`).join(', ');
    $('c-mp').replaceChildren(
      node('p', '', t('cards.mp.stages', { s: r.stages, where })),
      node('p', '', t('cards.mp.times', { times: r.stage_ms.map((v) => fmt(v)).join(' / ') })),
      node('h4', '', t('cards.mp.measured')), measured,
      node('h4', '', t('cards.mp.predicted')), predicted,
      node('p', '', t('cards.mp.sum', { piped: fmt(r.piped_ms), pred: fmt(r.predicted_ms), serial: fmt(r.serial_ms) })),
      node('p', 'muted small', t('cards.mp.note')),
      checkLine(r.ok, r.err), workLine(r.work),
    );
  },
};

/** The AI scenarios: each a short card with a button that opens and runs a demo. */
const SCENARIOS = [
  ['train', 'handson', 'h-train'],
  ['mm', 'handson', 'h-run2'],
  ['llm', 'topics', 'c-mp-run'],
];

function buildScenarios(card) {
  card.append(i18n('h2', 'cards.ai.h'), i18n('p', 'cards.ai.p'));
  const grid = node('div', 'cards-ai');
  for (const [key, tab, btn] of SCENARIOS) {
    const c = node('div', 'cards-ai-item');
    const go = i18n('button', `cards.ai.${key}.go`);
    go.id = `c-ai-${key}`;
    go.addEventListener('click', () => {
      document.querySelector(`.tabs button[data-tab="${tab}"]`)?.click();
      const target = $(btn);
      const holder = target?.closest('details.cards-card');
      if (holder) holder.open = true;
      target?.scrollIntoView({ block: 'center' });
      if (target && !target.disabled) target.click();
    });
    c.append(i18n('h3', `cards.ai.${key}.h`), i18n('p', `cards.ai.${key}.p`), go);
    grid.append(c);
  }
  card.append(grid);
}

// ---- the tab ------------------------------------------------------------------------------------

const NARROW = window.matchMedia('(max-width: 600px)');

/** A card that folds: a <details> whose summary is the card's title (its first h2) and a ✓/✗ once
 * it ran; `fill(body)` builds the content. */
function collapsible(id, fill) {
  const card = node('details', 'card cards-card');
  card.id = id;
  const body = node('div', 'cards-body');
  fill(body);
  const summary = node('summary');
  summary.append(body.querySelector('h2'), node('i', 'mark'));
  card.append(summary, body);
  return card;
}

function foldForWidth() {
  for (const d of document.querySelectorAll('#tab-topics details.cards-card')) d.open = !NARROW.matches;
}

/** Open card `name` (unfolded, scrolled to, on the Topics tab) and run it if `run`. */
function openCard(name, run) {
  const card = $(`card-${name}`);
  document.querySelector('.tabs button[data-tab="topics"]')?.click();
  card.open = true;
  card.scrollIntoView({ block: 'start' });
  // Opening the tab the first time runs every card (app.js autoRun): then this one is under way.
  if (run && !card.querySelector('button.run').disabled) CARDS[name].run();
}

const ORDER = ['debug', 'prints', 'planner', 'random', 'placement', 'model'];

function build() {
  const tab = $('tab-topics');
  if (!tab) return false;
  const intro = node('div', 'card');
  // Not a `button.run`: app.js clicks every one of those when the tab first opens (each card
  // runs once through them; Run all as well would run cards 2-6 twice).
  const all = i18n('button', 'cards.runall', 'runall');
  all.id = 'c-runall';
  all.addEventListener('click', () => runAll());
  intro.append(i18n('p', 'cards.intro'), i18n('p', 'cards.fold', 'muted small'), controls(all));
  tab.append(intro);
  for (const name of ORDER) tab.append(collapsible(`card-${name}`, (body) => CARDS[name].build(body)));
  tab.append(collapsible('card-ai', buildScenarios));
  // Phones show the cards folded (the tab was over 8 000 px tall at 390 px), wide screens open.
  NARROW.addEventListener('change', foldForWidth);
  foldForWidth();
  for (const name of ORDER) {
    const b = tab.querySelector(`#card-${name} button.run`);
    b.addEventListener('click', () => CARDS[name].run());
  }
  attachPrograms(document);
  return true;
}

async function runAll() {
  const b = $('c-runall');
  b.disabled = true;
  try {
    for (const name of ORDER) await CARDS[name].run();
  } finally {
    b.disabled = false;
  }
}

function rerender() {
  status.lang = document.documentElement.lang === 'en' ? 'en' : 'zh';
  for (const name of ORDER) if (last[name]) CARDS[name].render();
  attachPrograms(document);
}

async function main() {
  if (!build()) return;
  applyStatic();
  // The page's language toggle sets <html lang>: follow it.
  new MutationObserver(rerender).observe(document.documentElement, { attributes: true, attributeFilter: ['lang'] });
  rerender();
  if (params.get('cards') === '1') {
    await ready();
    // Let the page's own runs (test=1) finish first.
    while (params.get('test') === '1' && !window.brigadeStatus?.done) await new Promise((r) => setTimeout(r, 200));
    document.querySelector('.tabs button[data-tab="topics"]')?.click();
    // Small sizes: the browser test runs on software WebGPU with two cores.
    $('c-plan-b').value = 100000;
    $('c-plan-f').value = 64;
    $('c-mp-width').value = 64;
    $('c-mp-batch').value = 64;
    await runAll();
    status.done = true;
  }
}

main();
