// brigade against jax-js in one headless Chromium page (web/bench.html): a plain n × n f32 matmul
// and the fused chain tanh(exp(x*1.5+2))*y, on WebGPU (SwiftShader when there is no GPU) and on
// the CPU (brigade's cpu device, jax-js's wasm backend). Prints GFLOP/s (matmul) and GB/s (chain)
// per target and the ratios brigade / jax-js, and brigade / a hand-written WGSL kernel (the
// adapter's ceiling for a plain kernel, `wgsl webgpu`).
//
//   web/build.sh && (cd web && npm ci) && node web/test/bench.mjs      (or: cd web && npm run bench)
//
// Environment (defaults in brackets): BRIGADE_BENCH_MATMUL [512,1024], BRIGADE_BENCH_FUSED
// [4194304] (elements; empty for none), BRIGADE_BENCH_CPU_MATMUL [= BRIGADE_BENCH_MATMUL] (the
// matmul sizes the CPU targets run), BRIGADE_BENCH_ROUNDS [2] (the targets alternate within
// a round; each row pools every round's runs), BRIGADE_BENCH_REPS [5] (timed runs per round, after
// one warm-up), BRIGADE_BENCH_CPU_REPS [2] (on the CPU targets), BRIGADE_BENCH_TARGETS [the five
// above; `wgsl-tex webgpu`, the hand-written matmul reading textures, only when named],
// BRIGADE_BENCH_JSON (write every result there), CHROMIUM.
// Exits non-zero if a target fails or a result does not check out.

import { writeFileSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';
import { serve } from '../serve.mjs';
import { FLAGS, chromiumPath } from './chromium.mjs';

const WEB = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const env = process.env;
const list = (v, d) => (v ?? d).split(',').map((s) => s.trim()).filter(Boolean);
const CFG = {
  matmul: list(env.BRIGADE_BENCH_MATMUL, '512,1024').map(Number),
  // The CPU targets' matmul sizes (brigade's cpu device may be the reference interpreter: slow).
  cpuMatmul: list(env.BRIGADE_BENCH_CPU_MATMUL, env.BRIGADE_BENCH_MATMUL ?? '512,1024').map(Number),
  fused: list(env.BRIGADE_BENCH_FUSED, '4194304').map(Number),
  targets: list(env.BRIGADE_BENCH_TARGETS, 'brigade webgpu,jax-js webgpu,wgsl webgpu,brigade cpu,jax-js wasm'),
  rounds: Number(env.BRIGADE_BENCH_ROUNDS ?? 2),
  warmup: 1,
  reps: Number(env.BRIGADE_BENCH_REPS ?? 5),
  cpuReps: Number(env.BRIGADE_BENCH_CPU_REPS ?? 2),
};
// The table's columns: a target's figure, or the ratio of two (brigade over the other).
const COLUMNS = [
  ['brigade webgpu'], ['jax-js webgpu'], ['brigade webgpu', 'jax-js webgpu'],
  ['wgsl webgpu'], ['brigade webgpu', 'wgsl webgpu'],
  ['wgsl-tex webgpu'], ['brigade webgpu', 'wgsl-tex webgpu'],
  ['brigade cpu'], ['jax-js wasm'], ['brigade cpu', 'jax-js wasm'],
];

async function main() {
  const server = await serve(WEB, 0);
  const base = `http://127.0.0.1:${server.address().port}`;
  const browser = await chromium.launch({ executablePath: chromiumPath(), headless: true, args: FLAGS, timeout: 120_000 });
  let bad = 0;
  try {
    const page = await browser.newPage();
    page.on('console', (m) => {
      const t = m.text();
      if (t.startsWith('[bench] ')) progress(JSON.parse(t.slice(8)));
      else if (m.type() === 'error' || m.type() === 'warning') console.log(`  [console.${m.type()}] ${t}`);
    });
    page.on('pageerror', (e) => console.log(`  [pageerror] ${e.message}`));
    await page.goto(`${base}/bench.html`);
    await page.waitForFunction(() => window.benchStatus?.ready, null, { timeout: 120_000 });
    const st = await page.evaluate(async () => {
      const a = await navigator.gpu?.requestAdapter();
      const i = a?.info ?? {};
      return {
        ...window.benchStatus, isolated: window.crossOriginIsolated,
        adapter: a ? { vendor: i.vendor, architecture: i.architecture, description: i.description, fallback: a.isFallbackAdapter ?? i.isFallbackAdapter } : null,
      };
    });
    const pkg = JSON.parse(readFileSync(path.join(WEB, 'node_modules/@jax-js/jax/package.json'), 'utf8'));
    console.log(`Chromium ${browser.version()}; WebGPU adapter ${JSON.stringify(st.adapter)}`);
    // Not cross-origin isolated: no SharedArrayBuffer, so jax-js's wasm backend runs on one
    // thread, as brigade's wasm does.
    console.log(`jax-js ${pkg.version} (page: ${JSON.stringify(st.jax)}); brigade loaded: ${st.brigade}; crossOriginIsolated: ${st.isolated}`);
    if (!st.brigade) throw new Error(st.error ?? 'brigade did not load (run web/build.sh)');
    if (!st.webgpu) throw new Error('no WebGPU adapter in headless Chromium (needs --enable-unsafe-webgpu)');
    if (!st.jax?.ok) throw new Error(`jax-js did not load: ${st.jax?.error} (cd web && npm ci)`);
    console.log(`config ${JSON.stringify(CFG)}\n`);
    const t0 = Date.now();
    const rows = await page.evaluate(
      (cfg) => window.benchPage.runAll(cfg, (r) => console.log(`[bench] ${JSON.stringify(r)}`)), CFG);
    console.log(`\n${((Date.now() - t0) / 1000).toFixed(0)} s of benchmarks\n`);
    bad = table(rows);
    if (env.BRIGADE_BENCH_JSON) {
      writeFileSync(env.BRIGADE_BENCH_JSON, JSON.stringify({ config: CFG, chromium: browser.version(), adapter: st.adapter, jax: pkg.version, rows }, null, 1));
    }
  } catch (e) {
    console.log(`FAIL ${e.message}`);
    bad++;
  } finally {
    await browser.close();
    server.close();
  }
  process.exit(bad ? 1 : 0);
}

function progress(r) {
  const what = `${r.target.padEnd(15)} ${r.kind} ${r.n} (round ${r.round + 1})`;
  if (r.error) console.log(`  ${what}: ERROR ${r.error}`);
  else console.log(`  ${what}: ${r.ms.toFixed(2)} ms median, ${rate(r)}, cold ${r.cold_ms.toFixed(0)} ms, check ${r.ok ? 'ok' : 'FAILED'} (err ${r.err.toExponential(1)})`);
}

const rate = (r) => (r.kind === 'matmul' ? `${r.gflops.toFixed(2)} GFLOP/s` : `${r.gbps.toFixed(3)} GB/s`);
const num = (r) => (r && r.ok ? (r.kind === 'matmul' ? r.gflops : r.gbps) : NaN);
const fmt = (v, d = 2) => (Number.isFinite(v) ? v.toFixed(d) : '–');

/** The table: one line per case, each target's figure and the ratios. Returns the failures. */
function table(rows) {
  const cases = [...new Set(rows.map((r) => `${r.kind} ${r.n}`))];
  const cols = COLUMNS.filter((c) => c.every((t) => CFG.targets.includes(t)));
  // Ratios are brigade over the column just before (its peer): "÷ jax-js", "÷ wgsl".
  const head = ['work', 'unit', ...cols.map((c) => (c.length === 1 ? c[0] : `÷ ${c[1].split(' ')[0]}`))];
  const lines = [head];
  for (const c of cases) {
    const get = (t) => num(rows.find((r) => `${r.kind} ${r.n}` === c && r.target === t));
    const unit = c.startsWith('matmul') ? 'GFLOP/s' : 'GB/s';
    lines.push([c, unit, ...cols.map((k) => (k.length === 1 ? fmt(get(k[0]), unit === 'GB/s' ? 3 : 2) : fmt(get(k[0]) / get(k[1]))))]);
  }
  const w = head.map((_, i) => Math.max(...lines.map((l) => String(l[i]).length)));
  for (const l of lines) console.log(l.map((v, i) => (i < 2 ? String(v).padEnd(w[i]) : String(v).padStart(w[i]))).join('  '));
  console.log('\n(÷ X: brigade on that device divided by X; medians of every round\'s timed runs, each ending when the'
    + '\n device has finished; wgsl: a hand-written 4x4-block vec4 matmul / vec4 chain, the adapter\'s ceiling'
    + '\n for a plain kernel; –: not run)');
  const failed = rows.filter((r) => !r.ok);
  for (const r of failed) console.log(`FAIL ${r.target} ${r.kind} ${r.n}: ${r.errors.join('; ') || `check err ${r.err}`}`);
  return failed.length;
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
