#!/usr/bin/env python3
"""Print JAX's PRNG outputs as Rust constants: the reference vectors of tests/random.rs.

    python3 scripts/jax_prng_vectors.py > tests/data/prng_vectors.rs

Runs JAX on the CPU in its default configuration (32-bit mode, threefry2x32, partitionable
threefry). Floats are written as their bit patterns (u32) so the tests compare bits, not decimals.
"""
import shutil
import subprocess
import sys

import jax

jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import random  # noqa: E402

assert jax.config.jax_threefry_partitionable, "the vectors assume partitionable threefry"
assert not jax.config.jax_enable_x64, "the vectors assume JAX's default 32-bit mode"

SEEDS = [0, 42, 2**32 + 7, -1]
out = []


def emit(name, doc, values, ty, shape=None):
    a = np.asarray(values)
    if a.dtype == np.float32:
        a = a.view(np.uint32)
    flat = a.reshape(-1)
    if ty == "bool":
        items = ["true" if v else "false" for v in flat]
    elif ty in ("u32", "u64"):
        items = [f"0x{int(v):08x}" for v in flat]
    else:
        items = [str(int(v)) for v in flat]
    shape = list(a.shape) if shape is None else shape
    lines, line = [], "    "
    for it in items:
        if len(line) + len(it) + 2 > 100:
            lines.append(line.rstrip())
            line = "    "
        line += it + ", "
    lines.append(line.rstrip())
    body = "\n".join(lines)
    out.append(f"/// {doc} (shape {shape})\npub const {name}: [{ty}; {len(items)}] = [\n{body}\n];")


def f32_bits(x):
    return int(np.float32(x).view(np.uint32))


def checksum(a):
    """Sum (mod 2^64) of (index + 1) * word over the 32-bit words of `a`: order-sensitive."""
    w = np.asarray(a).reshape(-1).view(np.uint32).astype(np.uint64)
    return int(np.sum(w * (np.arange(w.size, dtype=np.uint64) + np.uint64(1)), dtype=np.uint64))


keys = [random.PRNGKey(s) for s in SEEDS]
emit("SEEDS", "Seeds of the keys below, as i64", SEEDS, "i64")
emit("KEYS", "random.PRNGKey(seed) for each seed", np.stack(keys), "u32")

k0, k42 = keys[0], keys[1]
for tag, k in (("K0", k0), ("K42", k42)):
    desc = f"PRNGKey({0 if tag == 'K0' else 42})"
    emit(f"{tag}_SPLIT3", f"random.split({desc}, 3)", random.split(k, 3), "u32")
    emit(f"{tag}_FOLD_IN_7", f"random.fold_in({desc}, 7)", random.fold_in(k, 7), "u32")
    emit(f"{tag}_FOLD_IN_MAX", f"random.fold_in({desc}, 0xffffffff)",
         random.fold_in(k, np.uint32(0xFFFFFFFF)), "u32")
    emit(f"{tag}_BITS_2X3", f"random.bits({desc}, (2, 3))", random.bits(k, (2, 3)), "u32")
    emit(f"{tag}_UNIFORM_5", f"random.uniform({desc}, (5,)), f32 bits", random.uniform(k, (5,)), "u32")

MINVAL, MAXVAL = np.float32(-3.7), np.float32(5.3)
out.append(f"/// minval and maxval of the ranged uniform vectors, f32 bits\n"
           f"pub const UNIFORM_MINVAL: u32 = 0x{f32_bits(MINVAL):08x};\n"
           f"pub const UNIFORM_MAXVAL: u32 = 0x{f32_bits(MAXVAL):08x};")
emit("K42_UNIFORM_RANGE_7", "random.uniform(PRNGKey(42), (7,), minval=-3.7, maxval=5.3), f32 bits",
     random.uniform(k42, (7,), minval=MINVAL, maxval=MAXVAL), "u32")

n4 = random.normal(k0, (4,))
expect = np.array([1.6226422, 2.0252647, -0.43359444, -0.07861735], np.float32)
assert np.array_equal(np.asarray(n4), expect), n4
emit("K0_NORMAL_4", "random.normal(PRNGKey(0), (4,)), f32 bits", n4, "u32")
emit("K42_NORMAL_3X4", "random.normal(PRNGKey(42), (3, 4)), f32 bits", random.normal(k42, (3, 4)), "u32")

emit("K42_BERNOULLI_03_12", "random.bernoulli(PRNGKey(42), 0.3, (12,))",
     random.bernoulli(k42, 0.3, (12,)), "bool")
emit("K42_RANDINT_M5_17_10", "random.randint(PRNGKey(42), (10,), -5, 17)",
     random.randint(k42, (10,), -5, 17), "i32")
emit("K0_RANDINT_FULL_6", "random.randint(PRNGKey(0), (6,), -2**31, 2**31 - 1)",
     random.randint(k0, (6,), -(2**31), 2**31 - 1, dtype=jnp.int32), "i32")
emit("K0_RANDINT_EMPTY_4", "random.randint(PRNGKey(0), (4,), 9, 3) (maxval <= minval)",
     random.randint(k0, (4,), 9, 3), "i32")
emit("K42_PERMUTATION_10", "random.permutation(PRNGKey(42), 10)", random.permutation(k42, 10), "i32")
emit("K0_PERMUTATION_1700", "random.permutation(PRNGKey(0), 1700) (two sorting rounds)",
     random.permutation(k0, 1700), "i32")

# Gumbel noise and categorical draws (the Gumbel-max trick). Gumbel goes through two logs, so
# devices agree with it to a few ULP rather than bit for bit; the logits are spread so that no
# draw is a near-tie.
emit("K42_GUMBEL_3X4", "random.gumbel(PRNGKey(42), (3, 4)), f32 bits", random.gumbel(k42, (3, 4)), "u32")
cat_logits = np.log(np.linspace(0.05, 1.0, 6 * 8, dtype=np.float32)).reshape(6, 8)
cat_logits[1, :3] = -np.inf
emit("CAT_LOGITS_6X8", "logits of the categorical draws, f32 bits", cat_logits.astype(np.float32), "u32")
emit("K0_CATEGORICAL_6X8", "random.categorical(PRNGKey(0), CAT_LOGITS_6X8)",
     random.categorical(k0, jnp.asarray(cat_logits)), "i32")
emit("K42_CATEGORICAL_6X8_AXIS0", "random.categorical(PRNGKey(42), CAT_LOGITS_6X8, axis=0)",
     random.categorical(k42, jnp.asarray(cat_logits), axis=0), "i32")
many = np.tile(np.log(np.array([0.1, 0.2, 0.3, 0.4], np.float32)), (4000, 1))
emit("K42_CATEGORICAL_4000_COUNTS", "class counts of random.categorical(PRNGKey(42), log([.1,.2,.3,.4]) x 4000 rows)",
     np.bincount(np.asarray(random.categorical(k42, jnp.asarray(many))), minlength=4), "i32")

# Large draws, compared by an order-sensitive checksum of their bits.
N = 1 << 20
sums = {
    "K0_BITS_1M_SUM": ("random.bits(PRNGKey(0), (2**20,))", random.bits(k0, (N,))),
    "K0_UNIFORM_RANGE_1M_SUM": ("random.uniform(PRNGKey(0), (2**20,), -3.7, 5.3)",
                                random.uniform(k0, (N,), minval=MINVAL, maxval=MAXVAL)),
    "K0_NORMAL_1M_SUM": ("random.normal(PRNGKey(0), (2**20,))", random.normal(k0, (N,))),
}
for name, (doc, a) in sums.items():
    out.append(f"/// checksum(bits of {doc}): sum of (i + 1) * word_i mod 2^64\n"
               f"pub const {name}: u64 = 0x{checksum(a):016x};")

text = "\n".join([
    f"// Generated by scripts/jax_prng_vectors.py from JAX {jax.__version__} on the CPU; do not edit.",
    "// Regenerate: python3 scripts/jax_prng_vectors.py > tests/data/prng_vectors.rs",
    "// Float vectors are f32 bit patterns; shapes are row-major.",
    "#![allow(dead_code)]",
    "",
    "\n\n".join(out),
    "",
])
# Format like the rest of the crate when rustfmt is there (`cargo fmt --check` covers tests/).
if shutil.which("rustfmt"):
    text = subprocess.run(["rustfmt", "--edition", "2024", "--emit", "stdout"], input=text,
                          capture_output=True, text=True, check=True).stdout
sys.stdout.write(text)
