#!/usr/bin/env python3
"""JAX reference for brigade's benchmark rows: the same work on JAX's default device.

Run by `scripts/device_bench.sh run` on the device machine (JAX on the GPU), or by hand:

    python3 scripts/device_jax_ref.py                          # JAX's default platform
    JAX_PLATFORMS=cpu python3 scripts/device_jax_ref.py --matmul 256,512 --elems 1048576

Each row is timed with `time.perf_counter` around a call finished by `block_until_ready` (or a
host copy), after warm-up calls: the median of the timed calls, like `benches/bench.rs`. Rows:

- f32 matmul n×n×n (2n³ FLOP) with `precision=HIGHEST` (true fp32) and with JAX's default
  precision (on NVIDIA GPUs from Ampere on this is TF32 on the tensor cores; the script prints the
  error of both against an f64 product so the log shows which it was);
- the fused `tanh(exp(x*1.5+2))*y` (3 × 4 bytes per element), the full sum (4 bytes per element),
  `-x` as a copy-like reference (read + write, 8 bytes per element);
- host→device (`jax.device_put`) and device→host (`np.asarray` of a distinct array each time, since
  a JAX array caches its host copy) of `--elems` f32.

Prints a markdown table; with `--out FILE` also appends one tab-separated line per row in the
format of brigade's `BRIGADE_BENCH_OUT` (device, id, median ms, first-call ms, rate, unit, runs),
with device `jax:<platform>`. Without JAX (or numpy) it prints "jax not available" and exits 0.
"""

import argparse
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--matmul", default="256,512,1024,2048,4096,8192", help="comma list of n")
    p.add_argument("--elems", type=int, default=1 << 26, help="f32 elements of the other rows")
    p.add_argument("--reps", type=int, default=10, help="timed calls (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls first")
    p.add_argument("--budget-s", type=float, default=3.0, help="fewer timed calls past this")
    p.add_argument("--out", help="append tab-separated rows to this file")
    return p.parse_args()


def main():
    args = parse_args()
    try:
        import numpy as np
        import jax
        import jax.numpy as jnp
    except Exception as e:  # ImportError, or a broken install
        print(f"jax not available ({type(e).__name__}: {e})")
        return 0

    sizes = [int(s) for s in args.matmul.split(",") if s.strip()]
    n_el = args.elems
    dev = jax.devices()[0]
    platform = dev.platform
    label = f"jax:{platform}"
    print(f"# JAX {jax.__version__} on {dev.device_kind} ({platform}); "
          f"median of up to {args.reps} timed calls after {args.warmup} warm-up")
    out = open(args.out, "a") if args.out else None
    rows = []

    def timed(f, reps=None):
        """(median s, first-call s, runs) of f(), f finishing its own work."""
        reps = reps or args.reps
        t = time.perf_counter()
        f()
        first = time.perf_counter() - t
        for _ in range(max(args.warmup - 1, 0)):
            f()
        ts = []
        start = time.perf_counter()
        for _ in range(reps):
            t = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t)
            if time.perf_counter() - start > args.budget_s:
                break
        ts.sort()
        return ts[len(ts) // 2], first, len(ts)

    def row(rid, what, size, m, amount, unit):
        med, first, runs = m
        rate = amount / med / 1e9 if amount else med * 1e6
        rows.append((what, size, med, rate, unit))
        if out:
            out.write(f"{label}\t{rid}\t{med * 1e3:.6f}\t{first * 1e3:.6f}\t{rate:.6f}\t{unit}\t{runs}\n")
            out.flush()
        print(f"  {what} {size}: {med * 1e3:.3f} ms, {rate:.2f} {unit}", flush=True)

    rng = np.random.default_rng(1)
    hi = jax.lax.Precision.HIGHEST
    mm_hi = jax.jit(lambda a, b: jnp.matmul(a, b, precision=hi))
    mm_def = jax.jit(lambda a, b: jnp.matmul(a, b))

    # Which arithmetic the default precision uses: error against an f64 product (one size).
    n_chk = min(sizes, key=lambda n: abs(n - 1024)) if sizes else 0
    for n in sizes:
        a = jax.device_put(rng.uniform(-1, 1, (n, n)).astype(np.float32))
        b = jax.device_put(rng.uniform(-1, 1, (n, n)).astype(np.float32))
        flops = 2.0 * n**3
        for rid, what, f in (
            (f"matmul_{n}", "matmul f32, precision=HIGHEST (fp32)", mm_hi),
            (f"matmul_default_{n}", "matmul f32, default precision (TF32 likely on GPU)", mm_def),
        ):
            m = timed(lambda: f(a, b).block_until_ready())
            row(rid, what, f"{n}×{n}×{n}", m, flops, "GFLOP/s")
        if n == n_chk:
            a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
            ref, mag = a64 @ b64, np.abs(a64) @ np.abs(b64)
            for name, f in (("HIGHEST", mm_hi), ("default", mm_def)):
                err = np.max(np.abs(np.asarray(f(a, b), np.float64) - ref) / mag)
                print(f"  error check n={n}, precision {name}: max |c - c_f64| / (|a|·|b|) = "
                      f"{err:.2e} (fp32 ~1e-7, TF32 ~1e-4)")
        del a, b

    xh = rng.uniform(-1, 1, n_el).astype(np.float32)
    yh = rng.uniform(-1, 1, n_el).astype(np.float32)
    x, y = jax.device_put(xh), jax.device_put(yh)
    size = f"{n_el} f32"
    fused = jax.jit(lambda x, y: jnp.tanh(jnp.exp(x * 1.5 + 2)) * y)
    m = timed(lambda: fused(x, y).block_until_ready())
    row("elementwise", "fused tanh(exp(x*1.5+2))*y (3×4 B/elem)", size, m, 12.0 * n_el, "GB/s")
    total = jax.jit(jnp.sum)
    m = timed(lambda: total(x).block_until_ready())
    row("sum", "full sum of x (4 B/elem)", size, m, 4.0 * n_el, "GB/s")
    neg = jax.jit(lambda x: -x)
    m = timed(lambda: neg(x).block_until_ready())
    row("copy_neg", "copy-like -x (read + write, 8 B/elem)", size, m, 8.0 * n_el, "GB/s")

    mib = f"{4 * n_el / 2**20:.0f} MiB"
    m = timed(lambda: jax.device_put(xh, dev).block_until_ready())
    row("upload", "host→device (device_put)", mib, m, 4.0 * n_el, "GB/s")
    # np.asarray of a JAX array caches the host copy: read a distinct array each call.
    count = args.warmup + args.reps
    pool = [x + float(i) for i in range(count)]
    for p in pool:
        p.block_until_ready()
    it = iter(pool)
    m = timed(lambda: np.asarray(next(it)))
    row("readback", "device→host (np.asarray, fresh array each call)", mib, m, 4.0 * n_el, "GB/s")
    del pool
    if platform == "cpu":
        print("  note: on the cpu platform device_put and np.asarray may share memory (no copy)")

    print(f"\n## JAX {jax.__version__} on {dev.device_kind} ({platform})")
    print("| benchmark | size | time (median) | rate |")
    print("|---|---|---|---|")
    for what, size, med, rate, unit in rows:
        t = f"{med * 1e6:.1f} µs" if med < 1e-3 else f"{med * 1e3:.3f} ms"
        print(f"| {what} | {size} | {t} | {rate:.2f} {unit} |")
    if out:
        out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
