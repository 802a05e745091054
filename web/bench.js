// The bench page: brigade (its `bench` export, src/web.rs) against jax-js on the same work in the
// same page: a plain n × n f32 matmul and the fused chain tanh(exp(x*1.5+2))*y, on WebGPU and
// on the CPU (brigade's cpu device; jax-js's wasm backend). web/test/bench.mjs drives it headless
// (npm run bench); the Run button does the same by hand.
//
// Both sides are timed alike: inputs already on the device, `warmup` untimed calls (the first
// compiles), then `reps` calls, each timed with performance.now() from the call until the device
// has finished it (brigade: the device's wait; jax-js: Array.blockUntilReady). The results are
// checked afterwards, untimed: brigade's against its reference interpreter, jax-js's against a
// float64 computation here, on the same sample of rows or elements.

import init, * as brigade from './pkg/brigade.js';

const TOL = 1e-4; // brigade's TOL: max |got - want| / max(1, max |want|)

/** The same deterministic data as brigade's `data()` in src/web.rs (u32 LCG, values in [-1, 1)). */
export function data(n, seed) {
  let s = (Math.imul(seed, 2654435761 | 0) + 12345) >>> 0;
  const out = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = ((s >>> 8) / 16777216) * 2 - 1;
  }
  return out;
}

/** brigade's `bench_sample`: the rows (matmul) or elements (fused) the check compares. */
function sample(kind, n) {
  let idx;
  if (kind === 'matmul') {
    idx = [0, Math.floor(n / 3), Math.floor((2 * n) / 3), n - 1];
  } else {
    idx = [];
    for (let i = 0; i < Math.min(n, 512); i++) idx.push(i);
    for (let i = Math.max(0, n - 512); i < n; i++) idx.push(i);
    const step = Math.max(1, Math.floor(n / 1024));
    for (let i = 0; i < 1024; i++) idx.push((i * step) % n);
  }
  return [...new Set(idx)].sort((a, b) => a - b);
}

function median(v) {
  const s = [...v].sort((a, b) => a - b);
  return s.length ? s[Math.floor(s.length / 2)] : NaN;
}

function work(kind, n) {
  return kind === 'matmul'
    ? { shape: [n, n], flops: 2 * n ** 3, bytes: 12 * n * n }
    : { shape: [n], flops: 5 * n, bytes: 12 * n };
}

// ---- jax-js ------------------------------------------------------------------------------------

let jax = null;
const jaxPrograms = new Map();

/** Load jax-js (served from web/node_modules at /vendor/jax-js/) and start its WebGPU backend. */
async function loadJax() {
  const mod = await import('./vendor/jax-js/dist/index.js');
  const version = await fetch('./vendor/jax-js/package.json').then((r) => r.json()).then((p) => p.version);
  const devices = await mod.init('wasm', 'webgpu');
  jax = mod;
  return { version, devices };
}

function jaxProgram(kind) {
  if (!jaxPrograms.has(kind)) {
    const np = jax.numpy;
    // jax-js functions take ownership of their arguments (callers pass `.ref` to keep them).
    const f = kind === 'matmul'
      ? jax.jit((a, b) => np.matmul(a, b))
      : jax.jit((x, y) => np.tanh(np.exp(x.mul(1.5).add(2))).mul(y));
    jaxPrograms.set(kind, f);
  }
  return jaxPrograms.get(kind);
}

/** The float64 value of what `kind` computes at the sampled rows / elements. */
function reference(kind, n, xs, idx) {
  const [a, b] = xs;
  if (kind === 'matmul') {
    const out = [];
    for (const r of idx) {
      const row = new Float64Array(n);
      for (let k = 0; k < n; k++) {
        const av = a[r * n + k];
        for (let j = 0; j < n; j++) row[j] += av * b[k * n + j];
      }
      out.push(...row);
    }
    return out;
  }
  return idx.map((i) => Math.tanh(Math.exp(a[i] * 1.5 + 2)) * b[i]);
}

function relErr(got, want) {
  if (got.length !== want.length) return Infinity;
  let scale = 1;
  for (const w of want) scale = Math.max(scale, Math.abs(w));
  let worst = 0;
  for (let i = 0; i < got.length; i++) {
    const d = Math.abs(got[i] - want[i]);
    worst = Math.max(worst, Number.isNaN(d) ? Infinity : d);
  }
  return worst / scale;
}

/** jax-js on `device` ('webgpu' or 'wasm'), timed like brigade's `bench`; the same JSON fields. */
export async function jaxBench(kind, n, device, warmup, reps) {
  if (!jax) throw new Error('jax-js is not loaded');
  const np = jax.numpy;
  const { shape, flops, bytes } = work(kind, n);
  const size = shape.reduce((p, d) => p * d, 1);
  const xs = [data(size, 21), data(size, 22)];
  const a = np.array(xs[0], { shape, device });
  const b = np.array(xs[1], { shape, device });
  await a.blockUntilReady();
  await b.blockUntilReady();
  const f = jaxProgram(kind);
  const times = [];
  let coldMs = NaN;
  let last = null;
  try {
    for (let i = 0; i < warmup + reps; i++) {
      const t0 = performance.now();
      const out = f(a.ref, b.ref);
      await out.blockUntilReady();
      const t = performance.now() - t0;
      if (i === 0) coldMs = t;
      if (i >= warmup) times.push(t);
      if (last) last.dispose();
      last = out;
    }
    const got = await last.data(); // consumes `last`
    last = null;
    const idx = sample(kind, n);
    const want = reference(kind, n, xs, idx);
    const picked = kind === 'matmul'
      ? idx.flatMap((r) => Array.from(got.subarray(r * n, (r + 1) * n)))
      : idx.map((i) => got[i]);
    const err = relErr(picked, want);
    const ms = median(times);
    return {
      kind, n, device, adapter: device === 'webgpu' ? 'jax-js webgpu' : 'jax-js wasm', warmup, reps,
      ms, ms_min: Math.min(...times), cold_ms: coldMs, times_ms: times, flops, bytes,
      gflops: flops / (ms * 1e6), gbps: bytes / (ms * 1e6), checked: want.length, err, tol: TOL, ok: err <= TOL,
    };
  } finally {
    if (last) last.dispose();
    a.dispose();
    b.dispose();
  }
}

// ---- both, alternating -------------------------------------------------------------------------

export const TARGETS = {
  'brigade webgpu': (kind, n, w, r) => brigade.bench(kind, n, 'webgpu', w, r).then(JSON.parse),
  'brigade cpu': (kind, n, w, r) => brigade.bench(kind, n, 'cpu', w, r).then(JSON.parse),
  'jax-js webgpu': (kind, n, w, r) => jaxBench(kind, n, 'webgpu', w, r),
  'jax-js wasm': (kind, n, w, r) => jaxBench(kind, n, 'wasm', w, r),
};

/**
 * Every target on every case, `rounds` times, the targets alternating within a round so that a
 * change in the machine's load hits all alike. Per (case, target): the timed runs of all rounds
 * pooled, their median, and whether every round's check passed. `cfg`: { matmul: [sizes],
 * fused: [sizes], targets: [names], rounds, warmup, reps, cpuReps (reps on the CPU targets),
 * cpuMatmul: [the matmul sizes the CPU targets run; all when absent] }.
 * `onResult(row)` sees each round's result as it comes.
 */
export async function runAll(cfg, onResult = () => {}) {
  const cases = [
    ...(cfg.matmul ?? []).map((n) => ['matmul', n]),
    ...(cfg.fused ?? []).map((n) => ['fused', n]),
  ];
  const rows = [];
  for (const [kind, n] of cases) {
    const pooled = new Map(cfg.targets.map((t) => [t, { target: t, kind, n, times: [], rounds: [], errors: [] }]));
    for (let round = 0; round < (cfg.rounds ?? 1); round++) {
      for (const t of cfg.targets) {
        const cpu = t.endsWith('cpu') || t.endsWith('wasm');
        if (cpu && kind === 'matmul' && cfg.cpuMatmul && !cfg.cpuMatmul.includes(n)) continue;
        const reps = cpu ? (cfg.cpuReps ?? cfg.reps) : cfg.reps;
        const p = pooled.get(t);
        try {
          const r = await TARGETS[t](kind, n, cfg.warmup ?? 1, reps);
          p.times.push(...r.times_ms);
          p.rounds.push(r);
          onResult({ target: t, round, ...r });
        } catch (e) {
          const msg = String(e?.message ?? e);
          p.errors.push(msg);
          onResult({ target: t, round, kind, n, error: msg });
        }
      }
    }
    for (const p of pooled.values()) {
      if (!p.rounds.length && !p.errors.length) continue; // skipped
      const { flops, bytes } = work(kind, n);
      const ms = median(p.times);
      rows.push({
        target: p.target, kind, n, ms, gflops: flops / (ms * 1e6), gbps: bytes / (ms * 1e6),
        runs: p.times.length, ok: p.rounds.length > 0 && p.errors.length === 0 && p.rounds.every((r) => r.ok),
        err: Math.max(...p.rounds.map((r) => r.err ?? Infinity), 0),
        cold_ms: p.rounds[0]?.cold_ms, adapter: p.rounds[0]?.adapter, errors: p.errors,
      });
    }
  }
  return rows;
}

// ---- the page ----------------------------------------------------------------------------------

const status = { ready: false, brigade: false, jax: null, error: null };
window.benchStatus = status;

function render(rows) {
  const tbody = document.querySelector('#results tbody');
  tbody.textContent = '';
  for (const r of rows) {
    const tr = document.createElement('tr');
    const cells = [r.target, r.kind, r.n, r.ms?.toFixed(2), r.gflops?.toFixed(2), r.gbps?.toFixed(2), r.ok ? '✓' : `✗ ${r.errors?.[0] ?? ''}`];
    for (const c of cells) {
      const td = document.createElement('td');
      td.textContent = String(c ?? '–');
      tr.appendChild(td);
    }
    tbody.appendChild(tr);
  }
}

async function main() {
  try {
    await init();
    status.brigade = true;
  } catch (e) {
    status.error = `brigade did not load: ${e?.message ?? e}`;
  }
  try {
    status.jax = { ok: true, ...(await loadJax()) };
  } catch (e) {
    status.jax = { ok: false, error: String(e?.message ?? e) };
  }
  status.webgpu = !!(navigator.gpu && (await navigator.gpu.requestAdapter()));
  status.ready = true;
  document.getElementById('env').textContent = `WebGPU: ${status.webgpu ? 'yes' : 'no'}; jax-js: ${status.jax.ok ? `${status.jax.version} (${status.jax.devices.join(', ')})` : status.jax.error}`;
  const button = document.getElementById('run');
  button.disabled = !status.brigade;
  button.onclick = async () => {
    button.disabled = true;
    const cfg = {
      matmul: document.getElementById('sizes').value.split(',').map(Number).filter((v) => v > 0),
      fused: [Number(document.getElementById('fused').value)],
      targets: Object.keys(TARGETS).filter((t) => status.jax.ok || !t.startsWith('jax')),
      rounds: 1, warmup: 1, reps: 5, cpuReps: 2,
    };
    let seen = 0;
    const rows = await runAll(cfg, (r) => {
      document.getElementById('progress').textContent = `${++seen} runs; last: ${r.target} ${r.kind} ${r.n}`;
    });
    render(rows);
    button.disabled = false;
  };
}

window.benchPage = { runAll, jaxBench, TARGETS, data };
main();
