// The bench page: brigade (its `bench` export, web/src/bench.rs) against jax-js on the same work in the
// same page: a plain n × n f32 matmul and the fused chain tanh(exp(x*1.5+2))*y, on WebGPU and
// on the CPU (brigade's cpu device; jax-js's wasm backend). web/test/bench.mjs drives it headless
// (npm run bench); the Run button does the same by hand. A hand-written WGSL kernel of each
// (`wgsl webgpu`) shows what the adapter reaches without a framework.
//
// Both sides are timed alike: inputs already on the device, `warmup` untimed calls (the first
// compiles), then `reps` calls, each timed with performance.now() from the call until the device
// has finished it (brigade: the device's wait; jax-js: Array.blockUntilReady). The results are
// checked afterwards, untimed: brigade's against its reference interpreter, jax-js's against a
// float64 computation here, on the same sample of rows or elements.

import init, * as brigade from './pkg/brigade.js';

const TOL = 1e-4; // brigade's TOL: max |got - want| / max(1, max |want|)

/** The same deterministic data as brigade's `data()` in web/src/data.rs (u32 LCG, values in [-1, 1)). */
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

// ---- a hand-written WGSL reference -------------------------------------------------------------
// What this adapter reaches with a plain, well-shaped kernel (no framework): the matmul with a
// 4 × 4 block of C per invocation and vec4 loads of A and B, no shared memory or barriers (the
// kind that runs best on CPU-emulated GPUs); the chain with one vec4 per invocation. A ceiling
// to read brigade's and jax-js's figures against, like the native bench's vec4 copy kernel.

const WGSL_MATMUL = `
@group(0) @binding(0) var<storage, read> a: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> b: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>; // n, n / 4
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let n = dims.x; let q = dims.y;
  let col = g.x; let row = g.y * 4u; // this invocation: C[row..row+4, 4*col..4*col+4]
  if (col >= q || row >= n) { return; }
  var c0 = vec4<f32>(); var c1 = vec4<f32>(); var c2 = vec4<f32>(); var c3 = vec4<f32>();
  for (var k = 0u; k < q; k++) {
    let a0 = a[row * q + k]; let a1 = a[(row + 1u) * q + k];
    let a2 = a[(row + 2u) * q + k]; let a3 = a[(row + 3u) * q + k];
    let b0 = b[(4u * k) * q + col]; let b1 = b[(4u * k + 1u) * q + col];
    let b2 = b[(4u * k + 2u) * q + col]; let b3 = b[(4u * k + 3u) * q + col];
    c0 += a0.x * b0 + a0.y * b1 + a0.z * b2 + a0.w * b3;
    c1 += a1.x * b0 + a1.y * b1 + a1.z * b2 + a1.w * b3;
    c2 += a2.x * b0 + a2.y * b1 + a2.z * b2 + a2.w * b3;
    c3 += a3.x * b0 + a3.y * b1 + a3.z * b2 + a3.w * b3;
  }
  c[row * q + col] = c0; c[(row + 1u) * q + col] = c1;
  c[(row + 2u) * q + col] = c2; c[(row + 3u) * q + col] = c3;
}`;

// The same product with A and B as rgba32float textures (a texel is a vec4 of a row), an 8 x 8
// block of C per invocation. SwiftShader turns each storage-buffer load whose index differs per
// lane into a gather, one per scalar, where a texel fetch is one 16-byte load per lane; on it this
// kernel is the fastest plain matmul found (~1.4x the buffer kernel above), which is where a
// framework reading storage buffers cannot follow without copying its operands into textures.
// The `wgsl-tex webgpu` target (opt-in; the chain has no texture form and runs WGSL_FUSED).
const WGSL_MATMUL_TEX = (() => {
  // Written out unrolled (as the buffer kernel is): loops over function-scope arrays would index
  // them per lane.
  const L = ['x', 'y', 'z', 'w'];
  const lines = [];
  for (let i = 0; i < 8; i++) lines.push(`  var c${i}_0 = vec4<f32>(); var c${i}_1 = vec4<f32>();`);
  lines.push('  for (var k = 0u; k < q; k++) {');
  for (let i = 0; i < 8; i++) lines.push(`    let a${i} = textureLoad(a, vec2<u32>(k, row + ${i}u), 0);`);
  for (let r = 0; r < 4; r++) {
    lines.push(`    let b${r}_0 = textureLoad(b, vec2<u32>(col, 4u * k + ${r}u), 0);`);
    lines.push(`    let b${r}_1 = textureLoad(b, vec2<u32>(col + 1u, 4u * k + ${r}u), 0);`);
    for (let i = 0; i < 8; i++) {
      for (const j of [0, 1]) lines.push(`    c${i}_${j} = fma(vec4<f32>(a${i}.${L[r]}), b${r}_${j}, c${i}_${j});`);
    }
  }
  lines.push('  }');
  for (let i = 0; i < 8; i++) lines.push(`  c[(row + ${i}u) * q + col] = c${i}_0; c[(row + ${i}u) * q + col + 1u] = c${i}_1;`);
  return `
@group(0) @binding(0) var a: texture_2d<f32>;
@group(0) @binding(1) var b: texture_2d<f32>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>; // n, n / 4
@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let n = dims.x; let q = dims.y;
  let col = g.x * 2u; let row = g.y * 8u; // this invocation: C[row..row+8, 4*col..4*col+8]
  if (col >= q || row >= n) { return; }
${lines.join('\n')}
}`;
})();

const WGSL_FUSED = `
@group(0) @binding(0) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read> y: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> o: array<vec4<f32>>;
@group(0) @binding(3) var<uniform> dims: vec4<u32>; // n / 4, invocations per row of the grid
@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
  let i = g.y * dims.y + g.x;
  if (i >= dims.x) { return; }
  o[i] = tanh(exp(x[i] * 1.5 + 2.0)) * y[i];
}`;

let wgsl = null;

async function wgslDevice() {
  if (!wgsl) {
    const adapter = await navigator.gpu?.requestAdapter();
    if (!adapter) throw new Error('no WebGPU adapter');
    const device = await adapter.requestDevice();
    const pipe = (code) => device.createComputePipeline({ layout: 'auto', compute: { module: device.createShaderModule({ code }), entryPoint: 'main' } });
    wgsl = { device, matmul: pipe(WGSL_MATMUL), matmulTex: pipe(WGSL_MATMUL_TEX), fused: pipe(WGSL_FUSED) };
  }
  return wgsl;
}

/**
 * The hand-written kernels on a WebGPU device of their own, timed like the others. `tex`: the
 * matmul reads its operands from textures (copied there untimed, like the buffers' upload).
 */
export async function wgslBench(kind, n, warmup, reps, tex = false) {
  if (n % 4 !== 0) throw new Error(`the WGSL reference needs n divisible by 4 (got ${n})`);
  const useTex = tex && kind === 'matmul';
  if (useTex && n % 8 !== 0) throw new Error(`the texture matmul needs n divisible by 8 (got ${n})`);
  const { device, ...pipes } = await wgslDevice();
  const { shape, flops, bytes } = work(kind, n);
  const size = shape.reduce((p, d) => p * d, 1);
  const xs = [data(size, 21), data(size, 22)];
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_DST | GPUBufferUsage.COPY_SRC;
  const bufs = xs.map((v) => {
    const buf = device.createBuffer({ size: v.byteLength, usage });
    device.queue.writeBuffer(buf, 0, v);
    return buf;
  });
  const out = device.createBuffer({ size: size * 4, usage });
  // The fused grid: at most 65535 workgroups a row, rows as needed.
  const groups = Math.ceil(size / 4 / 256);
  const perRow = Math.min(groups, 65535);
  const grid = useTex ? [Math.ceil(n / 8 / 8), Math.ceil(n / 8 / 8)]
    : kind === 'matmul' ? [Math.ceil(n / 4 / 8), Math.ceil(n / 4 / 8)] : [perRow, Math.ceil(groups / perRow)];
  // Texture operands: n / 4 texels (vec4s) a row, n rows.
  const texs = useTex ? xs.map((v) => {
    const t = device.createTexture({ size: [n / 4, n], format: 'rgba32float', usage: GPUTextureUsage.TEXTURE_BINDING | GPUTextureUsage.COPY_DST });
    device.queue.writeTexture({ texture: t }, v, { bytesPerRow: n * 4 }, [n / 4, n]);
    return t;
  }) : [];
  const dims = device.createBuffer({ size: 16, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST });
  device.queue.writeBuffer(dims, 0, new Uint32Array(kind === 'matmul' ? [n, n / 4, 0, 0] : [size / 4, perRow * 256, 0, 0]));
  const pipeline = useTex ? pipes.matmulTex : pipes[kind];
  const bind = device.createBindGroup({
    layout: pipeline.getBindGroupLayout(0),
    entries: useTex
      ? [...texs.map((t) => t.createView()), { buffer: out }, { buffer: dims }].map((resource, binding) => ({ binding, resource }))
      : [...bufs, out, dims].map((buffer, binding) => ({ binding, resource: { buffer } })),
  });
  await device.queue.onSubmittedWorkDone();
  const times = [];
  let coldMs = NaN;
  for (let i = 0; i < warmup + reps; i++) {
    const t0 = performance.now();
    const enc = device.createCommandEncoder();
    const pass = enc.beginComputePass();
    pass.setPipeline(pipeline);
    pass.setBindGroup(0, bind);
    pass.dispatchWorkgroups(...grid);
    pass.end();
    device.queue.submit([enc.finish()]);
    await device.queue.onSubmittedWorkDone();
    const t = performance.now() - t0;
    if (i === 0) coldMs = t;
    if (i >= warmup) times.push(t);
  }
  const staging = device.createBuffer({ size: size * 4, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
  const enc = device.createCommandEncoder();
  enc.copyBufferToBuffer(out, 0, staging, 0, size * 4);
  device.queue.submit([enc.finish()]);
  await staging.mapAsync(GPUMapMode.READ);
  const got = new Float32Array(staging.getMappedRange().slice(0));
  for (const b of [...bufs, out, dims, staging, ...texs]) b.destroy();
  const idx = sample(kind, n);
  const want = reference(kind, n, xs, idx);
  const picked = kind === 'matmul' ? idx.flatMap((r) => Array.from(got.subarray(r * n, (r + 1) * n))) : idx.map((i) => got[i]);
  const err = relErr(picked, want);
  const ms = median(times);
  return {
    kind, n, device: 'webgpu', adapter: useTex ? 'hand-written WGSL, texture operands' : 'hand-written WGSL', warmup, reps, ms, ms_min: Math.min(...times), cold_ms: coldMs,
    times_ms: times, flops, bytes, gflops: flops / (ms * 1e6), gbps: bytes / (ms * 1e6), checked: want.length, err, tol: TOL, ok: err <= TOL,
  };
}

// ---- both, alternating -------------------------------------------------------------------------

export const TARGETS = {
  'brigade webgpu': (kind, n, w, r) => brigade.bench(kind, n, 'webgpu', w, r).then(JSON.parse),
  'brigade cpu': (kind, n, w, r) => brigade.bench(kind, n, 'cpu', w, r).then(JSON.parse),
  'jax-js webgpu': (kind, n, w, r) => jaxBench(kind, n, 'webgpu', w, r),
  'wgsl webgpu': (kind, n, w, r) => wgslBench(kind, n, w, r),
  'wgsl-tex webgpu': (kind, n, w, r) => wgslBench(kind, n, w, r, true),
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
      targets: Object.keys(TARGETS).filter((t) => (status.jax.ok || !t.startsWith('jax')) && (status.webgpu || !t.endsWith('webgpu'))),
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
