// The program behind every demo of the page: the brigade program it really runs (Rust, lines taken
// verbatim from web/src/*.rs; tests/page_listings.rs, a plain test of the default run,
// checks every line still appears there) beside the JAX program a learner would write.
// attachPrograms() fills every element with data-programs="NAME" with a collapsible <details>.
//
// A line "// …" in a Rust listing marks left-out lines (the page's timing, JSON and checks).

import { t } from './i18n.js';

export const PROGRAMS = {
  debug_errors: {
    file: 'cards.rs',
    rust: String.raw`fn column_sum(a: &[Tensor]) -> Vec<Tensor> {
    vec![psum(&a[0].sum(0, false), "i")]
}

fn host_if(a: &[Tensor]) -> Vec<Tensor> {
    let total = a[0].sum_all();
    let positive = total
        .to_array()
        .is_ok_and(|t| t.host().is_some_and(|h| h.to_f64()[0] > 0.0));
    vec![if positive { a[0].clone() } else { -&a[0] }]
}

fn with_cond(a: &[Tensor]) -> Vec<Tensor> {
    let positive = a[0].sum_all().gt(&Tensor::scalar(0.0f32));
    cond(&positive, |x| vec![x[0].clone()], |x| vec![-&x[0]], &a[..1])
}

// 1. The batch does not divide over the devices; the fix pads it with zero rows.
let rows = 4 * n + 1;
let f = shard_map(column_sum)
    .axis_name("i")
    .out_axes(&[None])
    .devices(&s.devices)
let split_error = f.call_async(std::slice::from_ref(&x)).await.err();
let padded_rows = rows.div_ceil(n) * n;
padded.resize(padded_rows * 2, 0.0);
let got = host(&f.call_async(std::slice::from_ref(&padded)).await?[0]).await?;
// 2. A host if on a traced value, then cond.
let branchy = pmap(host_if).devices(&s.devices).named("host if");
let if_error = branchy.call_async(std::slice::from_ref(&xs)).await.err();
let selecty = pmap(with_cond).devices(&s.devices).named("cond");
let out = selecty.call_async(std::slice::from_ref(&xs)).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp
from jax import lax

n = jax.device_count()
x = jnp.arange((4 * n + 1) * 2.0).reshape(4 * n + 1, 2)

# 1. pmap needs the leading axis to equal the device count:
#    x.reshape(n, -1, 2) fails for 4n+1 rows. Pad with zeros first.
rows = -(-x.shape[0] // n) * n
xp = jnp.pad(x, ((0, rows - x.shape[0]), (0, 0)))
sums = jax.pmap(lambda b: lax.psum(b.sum(0), "i"), axis_name="i")(
    xp.reshape(n, -1, 2))

# 2. A Python if on a traced value raises a ConcretizationTypeError:
def host_if(x):
    return x if x.sum() > 0 else -x        # fails under pmap

def with_cond(x):                          # the fix
    return lax.cond(x.sum() > 0, lambda v: v, lambda v: -v, x)

y = jax.pmap(with_cond)(jnp.arange(n * 3.0).reshape(n, 3) - 2)`,
  },

  debug_prints: {
    file: 'cards.rs',
    rust: String.raw`fn talk(a: &[Tensor]) -> Vec<Tensor> {
    let mine = a[0].sum_all();
    debug_print(
        "my rows sum to {}, all rows to {}",
        &[&mine, &psum(&mine, "i")],
    );
    vec![mine]
}

fn centered(a: &[Tensor]) -> Vec<Tensor> {
    let n = brigade::axis_size("i").unwrap_or(1) as f32;
    vec![&a[0] - &(psum(&a[0], "i") / n)]
}

let p = pmap(talk).axis_name("i").devices(&s.devices).named("talk");
let (res, lines) = captured(p.call_async(std::slice::from_ref(&x))).await;
// …
let program = pmap(centered)
    .axis_name("i")
    .devices(&s.devices)
let real = program.call_async(std::slice::from_ref(&x)).await?;
let one = program.emulate(&s.devices[0], std::slice::from_ref(&x))?;
let want = host_of(&program.emulate(&s.cpu, std::slice::from_ref(&x))?, 0)?.to_f64();`,
    jax: String.raw`import jax, jax.numpy as jnp
from jax import lax

def talk(x):
    mine = x.sum()
    jax.debug.print("my rows sum to {}, all rows to {}", mine, lax.psum(mine, "i"))
    return mine

def centered(x):
    return x - lax.pmean(x, "i")

n = jax.device_count()
x = jnp.arange(n * 4.0).reshape(n, 4)
jax.pmap(talk, axis_name="i")(x)            # one line per device

real = jax.pmap(centered, axis_name="i")(x)
# Run it on one device first: vmap with the same axis name.
one = jax.vmap(centered, axis_name="i")(x)
assert jnp.allclose(real, one)`,
  },

  planner: {
    file: 'cards.rs',
    rust: String.raw`fn outer_softmax(a: &[Tensor]) -> Vec<Tensor> {
    let n = a[0].shape()[0] as i64;
    let v = a[0].reshape(&[n, 1]);
    vec![v.matmul(&v.reshape(&[1, n])).softmax(-1)]
}

let dev = &s.devices[0];
let p = plan(
    outer_softmax,
    &[Aval::new(vec![features], DType::F32)],
    batch_total,
    dev,
)?;
// …
let batched = vmap(outer_softmax).on(dev).named("outer softmax");
let got = host(&batched.call(std::slice::from_ref(&x))?[0]).await?;`,
    jax: String.raw`import math, jax, jax.numpy as jnp

def outer_softmax(v):
    return jax.nn.softmax(jnp.outer(v, v), axis=-1)

features, B_total = 256, 1_000_000
# JAX has no planner: measure one example's memory from the compiled program…
batched = jax.jit(jax.vmap(outer_softmax))
mem = batched.lower(jnp.zeros((1, features))).compile().memory_analysis()
per_example = mem.output_size_in_bytes
# …and divide the device's memory by it.
b_cap = (16 << 30) // per_example          # e.g. a 16 GiB card
N = math.ceil(B_total / b_cap)`,
  },

  random_keys: {
    file: 'cards.rs',
    rust: String.raw`fn noisy(a: &[Tensor]) -> Vec<Tensor> {
    let noise = random::normal(&a[1], &[a[0].shape()[0]]);
    vec![&a[0] + &(&noise * 0.1), noise]
}

fn noisy_fold(a: &[Tensor]) -> Vec<Tensor> {
    let key = random::fold_in_tensor(&a[1], &brigade::axis_index("i"));
    let noise = random::normal(&key, &[a[0].shape()[0]]);
    vec![&a[0] + &(&noise * 0.1), noise]
}

let key = Array::from_vec(vec![0u32, seed], &[2])?;
let split_fn = move |a: &[Tensor]| vec![random::split(&a[0], n)];
let per_key = pmap(body(noisy))
    .devices(&s.devices)
    .named("noise (key per device)");
let folded = pmap(body(noisy_fold))
    .axis_name("i")
    .in_axes(&[Some(0), None])
    .devices(&s.devices)
("same", &per_key, &same),
("split", &per_key, &split),
("fold_in", &folded, &key),
let out = prog.call_async(&args).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp

def noisy(x, key):
    noise = jax.random.normal(key, x.shape)
    return x + 0.1 * noise, noise

n = jax.device_count()
x = jnp.ones((n, 6))
key = jax.random.PRNGKey(0)

same = jnp.stack([key] * n)                # the pitfall: identical noise
_, a = jax.pmap(noisy)(x, same)

keys = jax.random.split(key, n)            # the fix: one key per device
_, b = jax.pmap(noisy)(x, keys)

def noisy_fold(x, key):                    # or fold in the device index
    k = jax.random.fold_in(key, jax.lax.axis_index("i"))
    return noisy(x, k)
_, c = jax.pmap(noisy_fold, axis_name="i", in_axes=(0, None))(x, key)`,
  },

  placement: {
    file: 'cards.rs',
    rust: String.raw`fn scale_rows(a: &[Tensor]) -> Vec<Tensor> {
    vec![(&a[0] * 2.0).tanh()]
}

let mesh = Mesh::new(&s.devices, &[("data", n)])?;
let prog = shard_map(scale_rows)
    .mesh(&mesh)
    .in_specs(&[P!["data", None]])
    .out_specs(&[P!["data", None]])
let on_last = device_put(&x, last)?;
let sharding = NamedSharding::new(&mesh, P!["data", None])?;
let placed = device_put(&x, &sharding)?;
for (name, input) in [("host", &x), ("placed", &placed)] {
    let out = prog.call_async(std::slice::from_ref(input)).await?;
// …
let stacked = device_put_sharded(&pieces, &s.devices)?;`,
    jax: String.raw`import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

devs = jax.devices()
n = len(devs)
x = jnp.ones((n * 64, 32))

on_last = jax.device_put(x, devs[-1])      # the whole array on one device
mesh = Mesh(devs, ("data",))
placed = jax.device_put(x, NamedSharding(mesh, P("data", None)))  # a row block each

f = jax.jit(jax.shard_map(lambda a: jnp.tanh(2 * a), mesh=mesh,
                          in_specs=P("data", None), out_specs=P("data", None)))
y1 = f(x)        # x is moved at call time
y2 = f(placed)   # nothing moves: the blocks are already there

stacked = jax.device_put_sharded([jnp.ones(32) * i for i in range(n)], devs)`,
  },

  model_parallel: {
    file: 'cards.rs',
    rust: String.raw`fn layer(a: &[Tensor]) -> Vec<Tensor> {
    vec![(a[0].matmul(&a[1]) + &a[2]).tanh()]
}

let dev = &s.devices[st % n];
Ok((device_put(w, dev)?, device_put(b, dev)?))
let stages: Vec<_> = (0..STAGES)
    .map(|st| jit(layer).on(&s.devices[st % n]).named("layer"))
for t in 0..micro + STAGES - 1 {
    for (st, f) in stages.iter().enumerate() {
        let Some(m) = t.checked_sub(st).filter(|&m| m < micro) else {
            continue;
        };
        let input = device_put(&acts[m], &s.devices[st % n])?;
        let out = f.call(&[input, placed[st].0.clone(), placed[st].1.clone()])?;
        running.push((st, m, out.into_iter().next().expect("one output")));
    }
    let reads = running.iter().map(|(_, _, a)| async move {
        let h = a.to_host_async().await;
// …
        acts[*m] = Array::from_host_array(h)?;`,
    jax: String.raw`import jax, jax.numpy as jnp

devs = jax.devices()
n, STAGES, width, micro = len(devs), 4, 128, 4

def layer(x, w, b):
    return jnp.tanh(x @ w + b)

# Layer s and its parameters on device s mod n.
params = [(jax.device_put(jnp.eye(width), devs[s % n]),
           jax.device_put(jnp.zeros(width), devs[s % n])) for s in range(STAGES)]
step = jax.jit(layer)                      # runs where its inputs live

acts = list(jnp.ones((256, width)).reshape(micro, -1, width))
for t in range(micro + STAGES - 1):        # GPipe: tick t, stage s, microbatch t-s
    for s in reversed(range(STAGES)):
        m = t - s
        if 0 <= m < micro:
            x = jax.device_put(acts[m], devs[s % n])
            acts[m] = step(x, *params[s])`,
  },
  // ---- the four modes (web/src/session.rs builds their programs) ----
  basics: {
    file: 'session.rs',
    rust: String.raw`fn dish(a: &[Tensor]) -> Vec<Tensor> {
    // One table's order: its features through one layer (the "recipe" is the same for all).
    vec![(a[0].matmul(&a[1]) + &a[2]).tanh()]
}

dish_split: shard_map(body(dish))
    .in_axes(&[Some(0), None, None])
    .devices(&devices)
    .named("dish (split)"),
dish_one: shard_map(body(dish))
    .in_axes(&[Some(0), None, None])
    .devices(std::slice::from_ref(&dev0))
    .named("dish (one device)"),
dish_vmap: vmap(body(dish))
    .in_axes(&[Some(0), None, None])
    .named("dish (vmap)")
    .on(&dev0),
// …
s.dish_split.call_async(&args).await
// The one-chef baseline: the same split program on device 0 alone.
s.dish_one.call_async(&args).await
let vm = timed("basics-vmap", 1, reps, async || s.dish_vmap.call(&args)).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp

def dish(x, w, b):                 # one table's order
    return jnp.tanh(x @ w + b)

n = jax.device_count()
B, D = 1200, 64
x, w, b = jnp.ones((B, D)), jnp.eye(D) * 0.25, jnp.zeros(D)

# pmap: one block of tables per device (B must divide by n)
split = jax.pmap(jax.vmap(dish, in_axes=(0, None, None)), in_axes=(0, None, None))
y1 = split(x.reshape(n, B // n, D), w, b).reshape(B, D)

# vmap: one fast chef, the whole batch at once on one device
y2 = jax.vmap(dish, in_axes=(0, None, None))(x, w, b)`,
  },

  divisibility: {
    file: 'advanced.rs',
    rust: String.raw`let prog = shard_map(body(|a| {
    let per_table = a[0].sum(1, false);
    let total = brigade::psum(&per_table.sum_all(), "tables");
    vec![per_table, total]
}))
.axis_name("tables")
.out_axes(&[Some(0), None])
.axis_size(shards)
.devices(&s.devices)
.named("tables");
// …
let out = match p.call_async(std::slice::from_ref(&x)).await {`,
    jax: String.raw`import jax, jax.numpy as jnp
from jax import lax

def tables(x):
    per_table = x.sum(1)
    return per_table, lax.psum(per_table.sum(), "tables")

n, B = jax.device_count(), 1000
x = jnp.ones((B, 8))
# B = n × b_local: the reshape fails when n does not divide B.
per, total = jax.pmap(tables, axis_name="tables")(x.reshape(n, B // n, 8))`,
  },

  in_axes: {
    file: 'session.rs',
    rust: String.raw`bcast: pmap(body(|a| vec![a[0].matmul(&a[1]).relu()]))
    .in_axes(&[Some(0), None])
    .devices(&devices)
    .named("in_axes (Some(0), None)"),
// …
bcast_all_mapped: pmap(body(|a| vec![a[0].matmul(&a[1]).relu()]))
    .devices(&devices)
// …
let out = s.bcast.call_async(&args).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp

n = jax.device_count()
x = jnp.ones((n, 3, 4))      # cut: one (3, 4) block per device
w = jnp.ones((4, 5))         # broadcast: every device gets all of w

f = lambda x, w: jax.nn.relu(x @ w)
y = jax.pmap(f, in_axes=(0, None))(x, w)     # (n, 3, 5)`,
  },

  nesting: {
    file: 'session.rs',
    rust: String.raw`nested: pmap(body(|a| {
    vmap(|e: &[Tensor]| vec![e[0].matmul(&e[1]).tanh()])
        .in_axes(&[Some(0), None])
        .apply(&[a[0].clone(), a[1].clone()])
}))
.in_axes(&[Some(0), None])
.devices(&devices)
.named("pmap(vmap(f))"),
// …
let out = s.nested.call_async(&args).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp

f = lambda e, w: jnp.tanh(e @ w)          # written for one example

n = jax.device_count()
x, w = jnp.ones((n, 3, 4)), jnp.eye(4) * 0.5
inner = jax.vmap(f, in_axes=(0, None))    # the examples of one device
y = jax.pmap(inner, in_axes=(0, None))(x, w)   # the devices`,
  },

  barrier: {
    file: 'session.rs',
    rust: String.raw`center: pmap(body(|a| {
    let h = a[0].matmul(&a[1]).tanh();
    let m = pmean(&h.mean(0, false), "i");
    vec![&h - &m]
}))
.axis_name("i")
.in_axes(&[Some(0), None])
.devices(&devices)
.named("center"),
// …
let out = s.center.call_async(&args).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp
from jax import lax

def center(x, w):
    h = jnp.tanh(x @ w)
    m = lax.pmean(h.mean(0), "i")     # every device waits here for all the others
    return h - m

n = jax.device_count()
y = jax.pmap(center, axis_name="i", in_axes=(0, None))(jnp.ones((n, 4, 8)), jnp.eye(8))`,
  },

  training: {
    file: 'training.rs',
    rust: String.raw`fn forward(p: &[Tensor], x: &Tensor) -> Tensor {
    let h = (x.matmul(&p[0]) + &p[1]).tanh();
    h.matmul(&p[2]) + &p[3]
}

fn loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Tensor {
    let logp = forward(p, x).log_softmax(-1);
    -(&logp * &y.one_hot(10).cast(DType::F32)).sum_all() / x.shape()[0] as f32
}

fn train_step_body(a: &[Tensor]) -> Vec<Tensor> {
    let (x, y) = (&a[15], &a[16]);
    let vg = value_and_grad(loss_fn).argnums(&[0, 1, 2, 3]).apply(&[
    // …
    let local: Vec<Tensor> = vg[1..5].to_vec();
    let grads: Vec<Tensor> = local.iter().map(|g| pmean(g, "batch")).collect();
    let (params, state) = Adam::new(LR).update(&a[..4], &grads, &state);
    // …
}

carried.push(device_put_replicated(&t.to_array()?, &s.devices)?);
step: pmap(body(train_step_body))
    .axis_name("batch")
    .devices(&s.devices)
let out = t.step.call_async(&args).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp, optax
from jax import lax

def forward(p, x):
    h = jnp.tanh(x @ p[0] + p[1])
    return h @ p[2] + p[3]

def loss(p, x, y):
    logp = jax.nn.log_softmax(forward(p, x))
    return -(logp * jax.nn.one_hot(y, 10)).sum() / x.shape[0]

opt = optax.adam(0.02)

def train_step(p, state, x, y):
    l, g = jax.value_and_grad(loss)(p, x, y)     # this device's gradient
    g = lax.pmean(g, "batch")                    # the AllReduce
    updates, state = opt.update(g, state, p)
    return optax.apply_updates(p, updates), state, lax.pmean(l, "batch")

step = jax.pmap(train_step, axis_name="batch")
# params and state replicated: jax.device_put_replicated(p, jax.devices())`,
  },

  matmul: {
    file: 'session.rs',
    rust: String.raw`mm_split: shard_map(body(|a| vec![a[0].matmul(&a[1])]))
    .in_axes(&[Some(0), None])
    .devices(&devices)
    .named("row-split matmul"),
// …
let out = s.mm_split.call_async(&args).await?;`,
    jax: String.raw`import jax, jax.numpy as jnp

n_dev = jax.device_count()
n = 256
A, B = jnp.ones((n, n)), jnp.ones((n, n))
C = jax.pmap(lambda a, b: a @ b, in_axes=(0, None))(
    A.reshape(n_dev, n // n_dev, n), B).reshape(n, n)   # C_i = A_i B, stacked`,
  },

  sweep: {
    file: 'session.rs',
    rust: String.raw`mm_split: shard_map(body(|a| vec![a[0].matmul(&a[1])]))
    .in_axes(&[Some(0), None])
    .devices(&devices)
mm_one: jit(body(|a| vec![a[0].matmul(&a[1])]))
    .named("matmul")
    .on(&dev0),
// …
let c = s.mm_one.call(&args)?;
let c = s.mm_split.call_async(&args).await?;`,
    jax: String.raw`import time, jax, jax.numpy as jnp

one = jax.jit(lambda a, b: a @ b)
split = jax.pmap(lambda a, b: a @ b, in_axes=(0, None))
k = jax.device_count()
for n in (64, 128, 256, 512):
    A, B = jnp.ones((n, n)), jnp.ones((n, n))
    t = time.perf_counter(); one(A, B).block_until_ready(); t1 = time.perf_counter() - t
    t = time.perf_counter(); split(A.reshape(k, -1, n), B).block_until_ready()
    print(n, t1, time.perf_counter() - t)`,
  },

  timeline: {
    file: 'matmul.rs',
    rust: String.raw`mm_dev: per_device(|a| vec![a[0].matmul(&a[1])], "matmul block"),
// …
let ad = blk.to_device(dev)?;
let bd = b.to_device(dev)?;
dev.idle().await?;
let c = kernel.call(&[ad, bd])?;
let h = c[0].to_host_async().await?;`,
    jax: String.raw`import time, jax, jax.numpy as jnp

devs = jax.devices()
n, k = 256, len(devs)
A, B = jnp.ones((n, n)), jnp.ones((n, n))
for d, blk in zip(devs, jnp.split(A, k)):
    t0 = time.perf_counter()
    a, b = jax.device_put(blk, d), jax.device_put(B, d)      # upload
    c = (a @ b).block_until_ready()                          # compute
    c = jax.device_get(c)                                    # read back
    print(d, time.perf_counter() - t0)`,
  },
};

// ---- a tiny highlighter (Rust and Python) --------------------------------------------------------

const KEYWORDS = {
  rust: new Set('as async await break const continue else enum fn for if impl in let loop match mod move mut pub ref return self Self static struct trait type use where while Some None Ok Err true false'.split(' ')),
  py: new Set('and as assert def del elif else for from if import in is lambda not or pass return while with yield True False None'.split(' ')),
};

const esc = (s) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** `code` as HTML with spans for comments, strings, numbers, keywords, macros and types. */
export function highlight(code, lang) {
  const comment = lang === 'rust' ? '//[^\\n]*' : '#[^\\n]*';
  const re = new RegExp(`(${comment})|("(?:[^"\\\\]|\\\\.)*"|'(?:[^'\\\\\\n]|\\\\.)*')|(\\b\\d[\\d_]*(?:\\.\\d+)?(?:e-?\\d+)?(?:f32|f64|u32|usize|i64)?\\b)|([A-Za-z_][A-Za-z0-9_]*!?)`, 'g');
  let out = '';
  let at = 0;
  for (const m of code.matchAll(re)) {
    out += esc(code.slice(at, m.index));
    at = m.index + m[0].length;
    const [whole, com, str, num, word] = m;
    // A Rust lifetime or char literal is rare here; a lone quote in Rust is left plain.
    if (com) out += `<span class="com">${esc(com)}</span>`;
    else if (str && !(lang === 'rust' && str.startsWith("'"))) out += `<span class="str">${esc(str)}</span>`;
    else if (num) out += `<span class="num">${esc(num)}</span>`;
    else if (word && word.endsWith('!')) out += `<span class="mac">${esc(word)}</span>`;
    else if (word && KEYWORDS[lang].has(word)) out += `<span class="kw">${esc(word)}</span>`;
    else if (word && lang === 'rust' && /^[A-Z]/.test(word)) out += `<span class="ty">${esc(word)}</span>`;
    else out += esc(whole);
  }
  return out + esc(code.slice(at));
}

function listing(code, lang) {
  const pre = document.createElement('pre');
  pre.className = `listing ${lang}`;
  pre.innerHTML = highlight(code, lang);
  return pre;
}

/** Fill every [data-programs] element under `root` (again on a language change: titles only). */
export function attachPrograms(root = document) {
  for (const host of root.querySelectorAll('[data-programs]')) {
    const p = PROGRAMS[host.dataset.programs];
    if (!p) continue;
    let box = host.querySelector('details.programs-box');
    if (!box) {
      box = document.createElement('details');
      box.className = 'programs-box';
      const pair = document.createElement('div');
      pair.className = 'programs-pair';
      const left = document.createElement('div');
      const right = document.createElement('div');
      left.append(document.createElement('h4'), listing(p.rust, 'rust'));
      right.append(document.createElement('h4'), listing(p.jax, 'py'));
      pair.append(left, right);
      box.append(document.createElement('summary'), pair);
      host.replaceChildren(box);
    }
    box.querySelector('summary').textContent = t('prog.summary');
    const [hr, hj] = box.querySelectorAll('h4');
    hr.textContent = t('prog.rust', { file: p.file });
    hj.textContent = t('prog.jax');
  }
}
