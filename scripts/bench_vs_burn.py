#!/usr/bin/env python3
"""brigade against Burn on the same adapter: alternating rounds, one table of ratios.

Runs N rounds (default 3). Each round runs Burn's peer benchmark (../shared/peers/burn, built in
release) and brigade's `cargo bench --bench bench` restricted to the same rows, alternating which
goes first, then prints one markdown table: per row the median time of each over the rounds and
the median of the per-round brigade/Burn throughput ratios (above 1: brigade is faster).

Both do the same work with the same accounting: matmul n×n·n×n f32 (2n³ FLOP), the fused
tanh(exp(x*1.5+2))*y on ELEMS f32 (3 × 4 bytes per element), the full sum of ELEMS f32 (4 bytes per
element), upload and readback of ELEMS f32, a tiny op (1024 f32 plus a scalar) and a wait; medians of
RUNS timed runs after WARMUP untimed ones on both sides.

    scripts/bench_vs_burn.py                      # 3 rounds, matmul 256,512,1024,2048
    scripts/bench_vs_burn.py --rounds 5 --sizes 256,512,1024
    BURN_BIN=/path/to/burn_peer_bench scripts/bench_vs_burn.py

Needs: the Burn binary (default /tmp/burn-peer/target/release/burn_peer_bench; see
shared/peers/burn/README.md for how to build it), cargo, lavapipe. Logs of every run go to
--log-dir (a fresh temporary directory by default). Python 3.8+, standard library only.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BURN = "/tmp/burn-peer/target/release/burn_peer_bench"
# brigade's row groups covering Burn's rows (the copy and memcpy references come with them).
BRIGADE_GROUPS = "matmul,elementwise,sum,upload,readback,tiny"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    env = os.environ.get
    p.add_argument("--rounds", type=int, default=int(env("ROUNDS", "3")))
    p.add_argument("--sizes", default=env("SIZES", "256,512,1024,2048"),
                   help="matmul sizes, comma list")
    p.add_argument("--runs", type=int, default=int(env("RUNS", "7")),
                   help="timed runs per row (median); Burn takes at least 5")
    p.add_argument("--warmup", type=int, default=int(env("WARMUP", "2")))
    p.add_argument("--elems", type=int, default=int(env("ELEMS", str(16 * 1024 * 1024))))
    p.add_argument("--burn", default=env("BURN_BIN", DEFAULT_BURN), help="Burn peer binary")
    p.add_argument("--devices", default=env("BRIGADE_DEVICES", "vulkan:1"),
                   help="brigade's BRIGADE_DEVICES (Burn always takes the Vulkan CPU adapter)")
    p.add_argument("--log-dir", default=None)
    p.add_argument("--timeout", type=int, default=1800, help="seconds per program run")
    p.add_argument("--warm-cache", action="store_true",
                   help="let brigade use its usual on-disk cache (default: a fresh BRIGADE_CACHE_DIR "
                        "per round, so its first-call rows include compiling and the matmul search)")
    a = p.parse_args()
    if a.rounds < 1 or a.runs < 1 or a.warmup < 1 or a.elems < 4 or a.elems % 4:
        p.error("rounds, runs, warmup >= 1; elems a multiple of 4")
    try:
        a.size_list = [int(s) for s in a.sizes.split(",") if s.strip()]
    except ValueError:
        p.error(f"--sizes {a.sizes!r}: want a comma list of integers")
    # Burn runs at least 5 timed runs: brigade runs as many.
    a.runs = max(a.runs, 5)
    return a


def brigade_executable():
    """Builds brigade's bench in release and returns the path of its executable."""
    cmd = ["cargo", "bench", "--bench", "bench", "--no-run", "--message-format=json"]
    r = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       encoding="utf-8", errors="replace")
    if r.returncode != 0:
        sys.exit(f"building brigade's bench failed:\n{r.stderr[-4000:]}")
    exe = None
    for line in r.stdout.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        t = msg.get("target") or {}
        if msg.get("reason") == "compiler-artifact" and t.get("name") == "bench" \
                and "bench" in t.get("kind", []) and msg.get("executable"):
            exe = msg["executable"]
    if not exe:
        sys.exit("cargo did not report the bench executable")
    return exe


# Burn's printed lines (src/main.rs of the peer crate) -> row keys, times in ms.
BURN_PATTERNS = [
    (re.compile(r"^matmul\s+(\d+): median ([\d.]+) ms.*first call incl\. autotune/compile: ([\d.]+) ms"), "matmul"),
    (re.compile(r"^elementwise .*: median ([\d.]+) ms"), "elementwise"),
    (re.compile(r"^sum \d+: median ([\d.]+) ms"), "sum"),
    (re.compile(r"^sum \d+ \+ into_scalar readback: median ([\d.]+) ms"), "sum_scalar"),
    (re.compile(r"^upload .*: median ([\d.]+) ms"), "upload"),
    (re.compile(r"^readback .*: median ([\d.]+) ms"), "readback"),
    (re.compile(r"^tiny op .*: median ([\d.]+) ms"), "tiny_sync"),
    (re.compile(r"^idle device\.sync\(\): median ([\d.]+) ms"), "idle_wait"),
]


def parse_burn(text):
    rows = {}
    for line in text.splitlines():
        for pat, key in BURN_PATTERNS:
            m = pat.match(line.strip())
            if not m:
                continue
            if key == "matmul":
                n = int(m.group(1))
                rows[f"matmul_{n}"] = float(m.group(2))
                rows[f"matmul_{n}_first"] = float(m.group(3))
            else:
                rows[key] = float(m.group(1))
            break
    return rows


def parse_brigade(path):
    """Rows of the first GPU device in brigade's BRIGADE_BENCH_OUT file: id -> (median, first) ms."""
    rows, device = {}, None
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 7 or cols[0].startswith(("cpu", "numpy")):
                continue
            if device is None:
                device = cols[0]
            if cols[0] != device:
                continue
            rows[cols[1]] = (float(cols[2]), float(cols[3]), float(cols[4]), cols[5])
    return rows


def run(cmd, env, log_path, timeout):
    t = time.time()
    try:
        r = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           encoding="utf-8", errors="replace", timeout=timeout)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        rc = "timeout"
    with open(log_path, "w", encoding="utf-8") as f:
        f.write(out)
    return rc, out, time.time() - t


def main():
    a = parse_args()
    if not os.access(a.burn, os.X_OK):
        sys.exit(f"no Burn binary at {a.burn}: build it first (shared/peers/burn/README.md), "
                 "or name it with --burn / BURN_BIN")
    exe = brigade_executable()
    log_dir = a.log_dir or tempfile.mkdtemp(prefix="bench_vs_burn.")
    os.makedirs(log_dir, exist_ok=True)
    base = dict(os.environ)
    if not base.get("XDG_RUNTIME_DIR"):
        base["XDG_RUNTIME_DIR"] = "/tmp/xdg-rt"
    os.makedirs(base["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)
    sizes = ",".join(str(n) for n in a.size_list)
    print(f"# brigade vs Burn: {a.rounds} rounds, matmul {sizes}, {a.elems} f32, "
          f"median of {a.runs} runs after {a.warmup} warm-up; logs in {log_dir}", flush=True)

    burn_rounds, brig_rounds, failures = [], [], []
    try:
        rounds(a, exe, log_dir, base, sizes, burn_rounds, brig_rounds, failures)
    except KeyboardInterrupt:
        # Ctrl-C: the table of the rounds finished so far.
        n = min(len(burn_rounds), len(brig_rounds))
        del burn_rounds[n:], brig_rounds[n:]
        failures.append(f"interrupted after {n} complete round(s)")
    table_of(a, burn_rounds, brig_rounds, failures)


def rounds(a, exe, log_dir, base, sizes, burn_rounds, brig_rounds, failures):
    for r in range(1, a.rounds + 1):
        # Alternate who goes first, so drift in the machine's load favours neither.
        order = ["burn", "brigade"] if r % 2 else ["brigade", "burn"]
        for who in order:
            if who == "burn":
                env = dict(base, RUNS=str(a.runs), WARMUP=str(a.warmup), SIZES=sizes,
                           ELEMS=str(a.elems), VERIFY="1" if r == 1 else "0")
                rc, out, secs = run([a.burn], env, f"{log_dir}/burn.{r}.log", a.timeout)
                rows = parse_burn(out) if rc == 0 else {}
                burn_rounds.append(rows)
            else:
                tsv = f"{log_dir}/brigade.{r}.tsv"
                if os.path.exists(tsv):
                    os.remove(tsv)
                env = dict(base, BRIGADE_DEVICES=a.devices, BRIGADE_BENCH=BRIGADE_GROUPS,
                           BRIGADE_BENCH_MATMUL=sizes, BRIGADE_BENCH_ELEMS=str(a.elems),
                           BRIGADE_BENCH_REPS=str(a.runs), BRIGADE_BENCH_WARMUP=str(a.warmup),
                           BRIGADE_BENCH_BUDGET_S="1000", BRIGADE_BENCH_OUT=tsv)
                if not a.warm_cache:
                    env["BRIGADE_CACHE_DIR"] = f"{log_dir}/brigade-cache.{r}"
                rc, out, secs = run([exe, "--bench"], env, f"{log_dir}/brigade.{r}.log", a.timeout)
                rows = parse_brigade(tsv) if rc == 0 and os.path.exists(tsv) else {}
                brig_rounds.append(rows)
            status = "ok" if rc == 0 else f"FAILED ({rc})"
            if rc != 0:
                failures.append(f"round {r} {who}: exit {rc}, see {log_dir}/{who}.{r}.log")
            print(f"round {r}: {who:<7} {secs:6.0f} s  {status}", flush=True)


def table_of(a, burn_rounds, brig_rounds, failures):
    # Rows: (label, brigade id, Burn key, field of brigade's row, work for the rate, unit).
    e = a.elems
    size = f"{4 * e >> 20} MiB" if 4 * e >= 1 << 20 else f"{4 * e >> 10} KiB"
    table = []
    for n in a.size_list:
        table.append((f"matmul {n}", f"matmul_{n}", f"matmul_{n}", 0, 2 * n ** 3, "GFLOP/s"))
    table += [
        ("fused elementwise tanh(exp(x*1.5+2))*y", "elementwise", "elementwise", 0, 12 * e, "GB/s"),
        ("full sum", "sum", "sum", 0, 4 * e, "GB/s"),
        ("full sum + scalar readback", "sum_scalar", "sum_scalar", 0, 4 * e, "GB/s"),
        (f"upload {size}", "upload", "upload", 0, 4 * e, "GB/s"),
        (f"readback {size} (to_host / into_data)", "readback", "readback", 0, 4 * e, "GB/s"),
        (f"readback {size} (read_into / into_data)", "readback_into", "readback", 0, 4 * e, "GB/s"),
        (f"readback {size} (read_with / into_data)", "readback_view", "readback", 0, 4 * e, "GB/s"),
        ("tiny op (1024 f32) + wait", "tiny_sync", "tiny_sync", 0, None, "ms"),
        ("idle wait", "idle_wait", "idle_wait", 0, None, "ms"),
    ]
    for n in a.size_list:
        table.append((f"matmul {n}: first call (compile, search)", f"matmul_{n}", f"matmul_{n}_first", 1, None, "ms"))

    def rate(ms, work, unit):
        if work is None:
            return f"{ms * 1e3:.1f} µs" if ms < 1 else f"{ms:.1f} ms"
        return f"{work / (ms * 1e-3) / 1e9:.2f} {unit} ({ms:.2f} ms)"

    print()
    print("| row | brigade (median) | Burn (median) | brigade / Burn | per round |")
    print("|---|---|---|---|---|")
    for label, bid, key, field, work, unit in table:
        ours = [rows[bid][field] for rows in brig_rounds if bid in rows]
        theirs = [rows[key] for rows in burn_rounds if key in rows]
        ratios = [b_rows[key] / g_rows[bid][field]
                  for g_rows, b_rows in zip(brig_rounds, burn_rounds)
                  if bid in g_rows and key in b_rows and g_rows[bid][field] > 0]
        if not ours or not theirs:
            print(f"| {label} | {'n/a' if not ours else rate(statistics.median(ours), work, unit)} | "
                  f"{'n/a' if not theirs else rate(statistics.median(theirs), work, unit)} | n/a | |")
            continue
        ratio = f"**{statistics.median(ratios):.2f}**" if ratios else "n/a"
        print(f"| {label} | {rate(statistics.median(ours), work, unit)} | "
              f"{rate(statistics.median(theirs), work, unit)} | {ratio} | "
              f"{' / '.join(f'{x:.2f}' for x in ratios)} |")
    # brigade's in-run references, for scale.
    refs = [("copy_vec4_x1", "vec4 copy kernel, 1 per invocation"),
            ("copy_vec4_x4s", "vec4 copy kernel, 4 strided"),
            ("copy_vec4_x4", "vec4 copy kernel, 4 consecutive"),
            ("memcpy_warm", "warm host memcpy")]
    for rid, label in refs:
        vals = [rows[rid][2] for rows in brig_rounds if rid in rows]
        if vals:
            print(f"| brigade reference: {label} | {statistics.median(vals):.2f} GB/s | | | |")
    print("\nbrigade / Burn is Burn's time over brigade's (throughput ratio): above 1, brigade is faster.")
    print("First calls: brigade " + ("with its usual on-disk cache" if a.warm_cache else
          "with an empty on-disk cache each round") + "; Burn with whatever autotune cache it keeps.")
    if failures:
        print("\nfailed runs:\n  " + "\n  ".join(failures))
    if not any(brig_rounds) or not any(burn_rounds):
        sys.exit(1)


if __name__ == "__main__":
    main()
