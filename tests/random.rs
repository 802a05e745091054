//! `brigade::random` against JAX: every vector in `prng_vectors.rs` was printed by JAX 0.10.2
//! (`scripts/jax_prng_vectors.py`), and each function must reproduce it bit for bit on the CPU
//! reference device and on every GPU device (lavapipe Vulkan, llvmpipe GL). Then the properties
//! the tutorial teaches: one key replicated over `pmap` devices gives every device the same noise,
//! split keys or `fold_in(key, axis_index)` give different noise; `vmap` over keys equals a loop.

mod common;
#[path = "data/prng_vectors.rs"]
mod prng_vectors;

use brigade::{Array, DType, Device, Error, HostArray, HostData, Tensor, jit, pmap, random, vmap};
use common::{device_guard, devices_with, gpu_devices, host, run_on};
use prng_vectors as jv;

/// The CPU reference device, then every GPU device.
fn all_devices() -> Vec<Device> {
    let mut d = devices_with("cpu:1");
    d.extend(gpu_devices());
    d
}

fn key_arr(words: &[u32]) -> Array {
    Array::from_vec(words.to_vec(), &[2]).unwrap()
}

/// The 32-bit words of any output (f32 as bits), for exact comparison with JAX's vectors.
fn words(h: &HostArray) -> Vec<u32> {
    match &h.data {
        HostData::F32(v) => v.iter().map(|x| x.to_bits()).collect(),
        HostData::U32(v) => v.clone(),
        HostData::I32(v) => v.iter().map(|&x| x as u32).collect(),
        HostData::Bool(v) => v.iter().map(|&x| x as u32).collect(),
        HostData::F64(v) => panic!("no random primitive gives f64 ({} values)", v.len()),
    }
}

/// Assert `got` has `shape` and exactly the words `want` (JAX's bits).
fn assert_words(got: &HostArray, shape: &[usize], want: &[u32], what: &str, dev: &Device) {
    assert_eq!(got.shape, shape, "{what} on {}: shape", dev.name());
    let g = words(got);
    let bad: Vec<usize> = (0..want.len()).filter(|&i| g[i] != want[i]).collect();
    assert!(
        bad.is_empty(),
        "{what} on {}: {} of {} words differ from JAX, first at {}: got {:#010x}, JAX {:#010x}\n got  {g:08x?}\n want {want:08x?}",
        dev.name(),
        bad.len(),
        want.len(),
        bad[0],
        g[bad[0]],
        want[bad[0]],
    );
}

fn f32_words(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

/// Order-sensitive checksum of 32-bit words, as the vector script computes it.
fn checksum(w: &[u32]) -> u64 {
    w.iter().enumerate().fold(0u64, |s, (i, &x)| {
        s.wrapping_add((i as u64 + 1).wrapping_mul(x as u64))
    })
}

/// Distance in units in the last place between two finite f32 (0 when bitwise equal).
fn ulps(a: f32, b: f32) -> u64 {
    let key = |x: f32| {
        let b = x.to_bits() as i64;
        if b & 0x8000_0000 != 0 {
            -(b & 0x7fff_ffff)
        } else {
            b
        }
    };
    (key(a) - key(b)).unsigned_abs()
}

#[test]
fn keys_match_jax() {
    for (i, &seed) in jv::SEEDS.iter().enumerate() {
        let k = random::key(seed);
        assert_eq!(k.shape(), &[2]);
        assert_eq!(k.dtype(), DType::U32);
        assert_eq!(
            k.to_vec::<u32>().unwrap(),
            jv::KEYS[2 * i..2 * i + 2],
            "key({seed}) differs from jax.random.PRNGKey({seed})"
        );
    }
}

#[test]
fn split_fold_in_and_bits_match_jax_on_every_device() {
    let f = |a: &[Tensor]| {
        vec![
            random::split(&a[0], 3),
            random::fold_in(&a[0], 7),
            random::fold_in(&a[0], u32::MAX),
            random::random_bits(&a[0], &[2, 3]),
        ]
    };
    let cases: [(&[u32], [&[u32]; 4]); 2] = [
        (
            &jv::KEYS[0..2],
            [
                &jv::K0_SPLIT3,
                &jv::K0_FOLD_IN_7,
                &jv::K0_FOLD_IN_MAX,
                &jv::K0_BITS_2X3,
            ],
        ),
        (
            &jv::KEYS[2..4],
            [
                &jv::K42_SPLIT3,
                &jv::K42_FOLD_IN_7,
                &jv::K42_FOLD_IN_MAX,
                &jv::K42_BITS_2X3,
            ],
        ),
    ];
    let shapes: [&[usize]; 4] = [&[3, 2], &[2], &[2], &[2, 3]];
    let names = [
        "split(key, 3)",
        "fold_in(key, 7)",
        "fold_in(key, 2^32-1)",
        "bits(key, (2, 3))",
    ];
    for dev in all_devices() {
        for (k, want) in &cases {
            let outs = run_on(&dev, f, &[key_arr(k)]);
            for i in 0..4 {
                let what = format!("{} of key {k:?}", names[i]);
                assert_words(&outs[i], shapes[i], want[i], &what, &dev);
            }
        }
    }
}

#[test]
fn uniform_matches_jax_on_every_device() {
    let (lo, hi) = (
        f32::from_bits(jv::UNIFORM_MINVAL),
        f32::from_bits(jv::UNIFORM_MAXVAL),
    );
    let f = move |a: &[Tensor]| {
        vec![
            random::uniform(&a[0], &[5], 0.0, 1.0),
            random::uniform(&a[0], &[7], lo, hi),
        ]
    };
    for dev in all_devices() {
        let o0 = run_on(&dev, f, &[key_arr(&jv::KEYS[0..2])]);
        assert_words(
            &o0[0],
            &[5],
            &jv::K0_UNIFORM_5,
            "uniform(key(0), (5,))",
            &dev,
        );
        let o42 = run_on(&dev, f, &[key_arr(&jv::KEYS[2..4])]);
        assert_words(
            &o42[0],
            &[5],
            &jv::K42_UNIFORM_5,
            "uniform(key(42), (5,))",
            &dev,
        );
        assert_words(
            &o42[1],
            &[7],
            &jv::K42_UNIFORM_RANGE_7,
            "uniform(key(42), (7,), -3.7, 5.3)",
            &dev,
        );
    }
}

#[test]
fn normal_matches_jax_on_every_device() {
    let f = |a: &[Tensor]| vec![random::normal(&a[0], &[4]), random::normal(&a[0], &[3, 4])];
    for dev in all_devices() {
        let o0 = run_on(&dev, f, &[key_arr(&jv::KEYS[0..2])]);
        assert_words(&o0[0], &[4], &jv::K0_NORMAL_4, "normal(key(0), (4,))", &dev);
        let o42 = run_on(&dev, f, &[key_arr(&jv::KEYS[2..4])]);
        assert_words(
            &o42[1],
            &[3, 4],
            &jv::K42_NORMAL_3X4,
            "normal(key(42), (3, 4))",
            &dev,
        );
    }
}

#[test]
fn bernoulli_and_randint_match_jax_on_every_device() {
    let f = |a: &[Tensor]| {
        vec![
            random::bernoulli(&a[0], 0.3, &[12]),
            random::randint(&a[0], &[10], -5, 17),
            random::randint(&a[0], &[6], i32::MIN, i32::MAX),
            random::randint(&a[0], &[4], 9, 3),
        ]
    };
    let as_words = |v: &[i32]| v.iter().map(|&x| x as u32).collect::<Vec<u32>>();
    for dev in all_devices() {
        let o0 = run_on(&dev, f, &[key_arr(&jv::KEYS[0..2])]);
        let o42 = run_on(&dev, f, &[key_arr(&jv::KEYS[2..4])]);
        assert_eq!(o42[0].dtype(), DType::Bool);
        let bern: Vec<u32> = jv::K42_BERNOULLI_03_12.iter().map(|&b| b as u32).collect();
        assert_words(
            &o42[0],
            &[12],
            &bern,
            "bernoulli(key(42), 0.3, (12,))",
            &dev,
        );
        assert_eq!(o42[1].dtype(), DType::I32);
        assert_words(
            &o42[1],
            &[10],
            &as_words(&jv::K42_RANDINT_M5_17_10),
            "randint(key(42), (10,), -5, 17)",
            &dev,
        );
        assert_words(
            &o0[2],
            &[6],
            &as_words(&jv::K0_RANDINT_FULL_6),
            "randint(key(0), (6,), i32::MIN, i32::MAX)",
            &dev,
        );
        assert_words(
            &o0[3],
            &[4],
            &as_words(&jv::K0_RANDINT_EMPTY_4),
            "randint(key(0), (4,), 9, 3)",
            &dev,
        );
    }
}

#[test]
fn permutation_matches_jax_on_every_device() {
    let as_words = |v: &[i32]| v.iter().map(|&x| x as u32).collect::<Vec<u32>>();
    for dev in all_devices() {
        let small = run_on(
            &dev,
            |a: &[Tensor]| vec![random::permutation(&a[0], 10)],
            &[key_arr(&jv::KEYS[2..4])],
        );
        assert_words(
            &small[0],
            &[10],
            &as_words(&jv::K42_PERMUTATION_10),
            "permutation(key(42), 10)",
            &dev,
        );
        // Past 1625 elements JAX sorts twice, with two different subkeys.
        let big = run_on(
            &dev,
            |a: &[Tensor]| vec![random::permutation(&a[0], 1700)],
            &[key_arr(&jv::KEYS[0..2])],
        );
        assert_words(
            &big[0],
            &[1700],
            &as_words(&jv::K0_PERMUTATION_1700),
            "permutation(key(0), 1700)",
            &dev,
        );
    }
}

/// 2^20 draws each: the CPU reference must reproduce JAX's checksums; the GPU devices must give
/// the CPU's bits (measured: identical for all three on lavapipe and llvmpipe GL).
#[test]
fn million_draws_match_jax_checksums_and_the_devices_agree() {
    const N: usize = 1 << 20;
    let (lo, hi) = (
        f32::from_bits(jv::UNIFORM_MINVAL),
        f32::from_bits(jv::UNIFORM_MAXVAL),
    );
    let f = move |a: &[Tensor]| {
        vec![
            random::random_bits(&a[0], &[N]),
            random::uniform(&a[0], &[N], lo, hi),
            random::normal(&a[0], &[N]),
        ]
    };
    let key = [key_arr(&jv::KEYS[0..2])];
    let cpu = run_on(&devices_with("cpu:1")[0], f, &key);
    let names = ["bits", "uniform(-3.7, 5.3)", "normal"];
    let sums = [
        jv::K0_BITS_1M_SUM,
        jv::K0_UNIFORM_RANGE_1M_SUM,
        jv::K0_NORMAL_1M_SUM,
    ];
    let want: Vec<Vec<u32>> = cpu.iter().map(words).collect();
    for i in 0..3 {
        assert_eq!(
            checksum(&want[i]),
            sums[i],
            "{}(key(0), (2^20,)) on the CPU reference: checksum differs from JAX's",
            names[i]
        );
    }
    for dev in gpu_devices() {
        let got = run_on(&dev, f, &key);
        for i in 0..3 {
            let g = words(&got[i]);
            let bad = (0..N).filter(|&j| g[j] != want[i][j]).count();
            let worst = (0..N)
                .map(|j| ulps(f32::from_bits(g[j]), f32::from_bits(want[i][j])))
                .max()
                .unwrap_or(0);
            assert_eq!(
                bad,
                0,
                "{}(key(0), (2^20,)) on {}: {bad} of {N} values differ from the CPU reference (worst {worst} ulp)",
                names[i],
                dev.name()
            );
        }
    }
}

#[test]
fn eager_calls_match_jax() {
    let k0 = random::key(0);
    let z = random::normal(&k0, &[4]);
    assert_eq!(f32_words(&z.to_vec::<f32>().unwrap()), jv::K0_NORMAL_4);
    let k42 = random::key(42);
    assert_eq!(
        random::split(&k42, 3).to_vec::<u32>().unwrap(),
        jv::K42_SPLIT3
    );
    assert_eq!(
        random::fold_in(&k42, 7).to_vec::<u32>().unwrap(),
        jv::K42_FOLD_IN_7
    );
    let u = random::uniform(&k42, &[5], 0.0, 1.0)
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(f32_words(&u), jv::K42_UNIFORM_5);
    let r = random::randint(&k42, &[10], -5, 17)
        .to_vec::<i32>()
        .unwrap();
    assert_eq!(r, jv::K42_RANDINT_M5_17_10);
}

/// Rows of a `[n, m]` pmap output.
fn rows(a: &Array) -> Vec<Vec<u32>> {
    let h = host(a);
    let m = h.shape[1];
    words(&h).chunks(m).map(|c| c.to_vec()).collect()
}

#[test]
fn pmap_one_replicated_key_gives_every_device_the_same_noise() {
    let devs = devices_with("vulkan:2");
    let key = random::key(0).to_array().unwrap();
    let noise = pmap(|a: &[Tensor]| vec![random::normal(&a[0], &[5])])
        .axis_name("i")
        .in_axes(&[None])
        .axis_size(2)
        .devices(&devs);
    let out = noise.call(std::slice::from_ref(&key)).unwrap();
    assert_eq!(out[0].shape(), &[2, 5]);
    let r = rows(&out[0]);
    // The pitfall: both devices drew exactly the same numbers, those of the one key.
    assert_eq!(r[0], r[1], "a replicated key must give identical noise");
    assert_eq!(
        r[0],
        f32_words(
            &random::normal(&random::key(0), &[5])
                .to_vec::<f32>()
                .unwrap()
        )
    );
}

#[test]
fn pmap_split_keys_or_fold_in_axis_index_give_different_noise() {
    let devs = devices_with("vulkan:2");
    let key = random::key(0);
    // Split keys, one per device (in_axes Some(0) over u32[2, 2]: each device sees a u32[2]).
    let keys = random::split(&key, 2).to_array().unwrap();
    let per_key = pmap(|a: &[Tensor]| vec![random::normal(&a[0], &[5])])
        .axis_name("i")
        .devices(&devs);
    let out = per_key.call(&[keys]).unwrap();
    let r = rows(&out[0]);
    assert_ne!(r[0], r[1], "split keys must give different noise");
    for (d, row) in r.iter().enumerate() {
        let k = random::split(&key, 2).slice_axis(0, d, d + 1).reshape(&[2]);
        let want = random::normal(&k, &[5]).to_vec::<f32>().unwrap();
        assert_eq!(
            *row,
            f32_words(&want),
            "device {d}: normal of split key {d}"
        );
    }
    // One key, folded with the device index.
    let folded = pmap(|a: &[Tensor]| {
        let k = random::fold_in_tensor(&a[0], &brigade::axis_index("i"));
        vec![random::normal(&k, &[5])]
    })
    .axis_name("i")
    .in_axes(&[None])
    .axis_size(2)
    .devices(&devs);
    let out = folded.call(&[key.to_array().unwrap()]).unwrap();
    let r = rows(&out[0]);
    assert_ne!(
        r[0], r[1],
        "fold_in(key, axis_index) must give different noise"
    );
    for (d, row) in r.iter().enumerate() {
        let want = random::normal(&random::fold_in(&key, d as u32), &[5]);
        assert_eq!(
            *row,
            f32_words(&want.to_vec::<f32>().unwrap()),
            "device {d}"
        );
    }
}

#[test]
fn vmap_over_keys_equals_a_loop_of_single_calls() {
    let keys = random::split(&random::key(7), 4);
    let draw = |a: &[Tensor]| {
        vec![
            random::normal(&a[0], &[3]),
            random::uniform(&a[0], &[2, 2], -1.0, 2.5),
            random::randint(&a[0], &[5], 0, 1000),
            random::split(&a[0], 2),
            random::fold_in(&a[0], 11),
        ]
    };
    for dev in all_devices() {
        let _g = device_guard(&dev);
        let batched = vmap(draw)
            .on(&dev)
            .call(&[keys.to_array().unwrap()])
            .unwrap();
        for b in 0..4 {
            let k = keys
                .slice_axis(0, b, b + 1)
                .reshape(&[2])
                .to_array()
                .unwrap();
            let single = jit(draw).on(&dev).call(&[k]).unwrap();
            for (o, (bo, so)) in batched.iter().zip(&single).enumerate() {
                let bh = host(bo);
                let sh = host(so);
                let n = sh.len();
                assert_eq!(bh.shape[0], 4);
                assert_eq!(&bh.shape[1..], &sh.shape[..]);
                assert_eq!(
                    words(&bh)[b * n..(b + 1) * n],
                    words(&sh),
                    "on {}: output {o} of example {b}",
                    dev.name()
                );
            }
        }
    }
    // One shared key, the data batched (fold_in broadcasts the key over the batch).
    let shared = random::key(5);
    let steps = Array::from_vec(vec![3u32, 0, 4_000_000_000], &[3]).unwrap();
    let k = shared.clone();
    let per_step = vmap(move |a: &[Tensor]| vec![random::fold_in_tensor(&k, &a[0])])
        .call(std::slice::from_ref(&steps))
        .unwrap();
    let got = per_step[0].to_vec::<u32>().unwrap();
    for (b, d) in [3u32, 0, 4_000_000_000].into_iter().enumerate() {
        let want = random::fold_in(&shared, d).to_vec::<u32>().unwrap();
        assert_eq!(got[2 * b..2 * b + 2], want, "fold_in(key, {d}) under vmap");
    }
    // Two levels of vmap: keys u32[2, 3, 2], data folded in per example.
    let grid = random::split(&random::key(1), 6).reshape(&[2, 3, 2]);
    let inner = |a: &[Tensor]| vec![random::normal(&random::fold_in_tensor(&a[0], &a[1]), &[2])];
    let data = Array::from_vec((0..6u32).collect(), &[2, 3]).unwrap();
    let nested = vmap(move |a: &[Tensor]| vmap(inner).apply(a));
    let got = nested
        .call(&[grid.to_array().unwrap(), data.clone()])
        .unwrap();
    let g = words(&host(&got[0]));
    assert_eq!(got[0].shape(), &[2, 3, 2]);
    for i in 0..2 {
        for j in 0..3 {
            let k = grid
                .slice(&[i, j, 0], &[i + 1, j + 1, 2], None)
                .reshape(&[2]);
            let d = (3 * i + j) as u32;
            let want = random::normal(&random::fold_in(&k, d), &[2]);
            let w = f32_words(&want.to_vec::<f32>().unwrap());
            assert_eq!(
                g[(3 * i + j) * 2..(3 * i + j + 1) * 2],
                w,
                "example ({i}, {j})"
            );
        }
    }
}

#[test]
fn a_long_chain_of_keys_in_jit_matches_eager_and_stays_small() {
    // Each key is computed from the previous one: kernels store every key instead of inlining
    // the whole chain (which would recompute the hashes 2^depth times).
    const DEPTH: u32 = 24;
    let chain = |a: &[Tensor]| {
        let mut k = a[0].clone();
        for step in 0..DEPTH {
            k = if step % 2 == 0 {
                random::fold_in(&k, step)
            } else {
                random::split(&k, 3).slice_axis(0, 2, 3).reshape(&[2])
            };
        }
        vec![random::uniform(&k, &[4], 0.0, 1.0)]
    };
    let key = random::key(3);
    let want = chain(std::slice::from_ref(&key))[0]
        .to_vec::<f32>()
        .unwrap();
    for dev in all_devices() {
        let got = run_on(&dev, chain, &[key.to_array().unwrap()]);
        assert_eq!(words(&got[0]), f32_words(&want), "on {}", dev.name());
    }
    let gpu = &gpu_devices()[0];
    let program = jit(chain).program(&[key.to_array().unwrap()], gpu).unwrap();
    let wgsl: usize = program.launches.iter().map(|l| l.wgsl.len()).sum();
    assert!(
        program.launches.iter().all(|l| l.wgsl.len() < 20_000),
        "a kernel of the key chain is {} bytes of WGSL",
        program
            .launches
            .iter()
            .map(|l| l.wgsl.len())
            .max()
            .unwrap_or(0)
    );
    assert!(
        wgsl < 400_000,
        "{wgsl} bytes of WGSL for a chain of {DEPTH} keys"
    );
}

#[test]
fn wrong_keys_are_typed_errors_that_name_the_shape() {
    let x = random::normal(&Tensor::from_vec(vec![1u32, 2, 3], &[3]), &[2]);
    match x.error() {
        Some(Error::BadShapeArg { op, shape, detail }) => {
            assert_eq!(*op, "random::normal");
            assert_eq!(shape, &[3]);
            assert!(detail.contains("[2]") && detail.contains("[3]"), "{detail}");
        }
        e => panic!("expected BadShapeArg for a u32[3] key, got {e:?}"),
    }
    let batched = random::split(&random::key(0), 4);
    let x = random::uniform(&batched, &[2], 0.0, 1.0);
    let msg = x
        .error()
        .expect("a u32[4, 2] key array is refused")
        .to_string();
    assert!(msg.contains("[4, 2]") && msg.contains("vmap"), "{msg}");
    let x = random::split(&Tensor::from_vec(vec![0.0f32, 1.0], &[2]), 2);
    match x.error() {
        Some(Error::BadDType { dtype, shapes, .. }) => {
            assert_eq!(*dtype, DType::F32);
            assert_eq!(shapes, &vec![vec![2]]);
        }
        e => panic!("expected BadDType for an f32 key, got {e:?}"),
    }
    let x = random::fold_in_tensor(&random::key(0), &Tensor::from_vec(vec![1u32, 2], &[2]));
    let msg = x.error().expect("array data is refused").to_string();
    assert!(msg.contains("[2]") && msg.contains("scalar"), "{msg}");
    // Inside jit the error fails the call, with the same message.
    let f = jit(|a: &[Tensor]| vec![random::randint(&a[0], &[3], 0, 5)]);
    let err = f
        .call(&[Array::from_vec(vec![1i32, 2], &[2]).unwrap()])
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadDType {
                dtype: DType::I32,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn graphs_show_the_random_primitives() {
    let f = jit(|a: &[Tensor]| {
        vec![
            random::split(&a[0], 3),
            random::fold_in(&a[0], 1),
            random::normal(&a[0], &[2, 3]),
        ]
    });
    let g = format!(
        "{}",
        f.graph(&[random::key(0).to_array().unwrap()]).unwrap()
    );
    for name in [
        "random_split[shape=[3]]",
        "random_fold_in",
        "random_bits[shape=[2, 3]]",
        "fma",
        "erf_inv",
    ] {
        assert!(g.contains(name), "{name} missing from\n{g}");
    }
}

#[test]
fn gradients_flow_through_noise_but_not_into_keys() {
    let key = random::key(9);
    let noise = random::normal(&key, &[3]).to_vec::<f32>().unwrap();
    let k = key.clone();
    let df = brigade::grad(move |a: &[Tensor]| vec![(&a[0] * &random::normal(&k, &[3])).sum_all()]);
    let x = Array::from_vec(vec![0.5f32, -1.0, 2.0], &[3]).unwrap();
    let g = df.call(&[x]).unwrap()[0].to_vec::<f32>().unwrap();
    assert_eq!(f32_words(&g), f32_words(&noise), "d/dx sum(x * z) = z");
}

/// The fused multiply-add behind `uniform` and `normal` is computed with integer arithmetic on
/// devices; check it against the CPU's `f32::mul_add` on adversarial operands: cancellation, huge
/// and tiny exponents, subnormal results, overflow, ties.
#[test]
fn fma_is_one_rounding_on_every_device() {
    use brigade::ops::{ElementwiseOp, Prim};
    use brigade::trace::graph::{Aval, Eqn, Graph};
    let n = 1 << 14;
    let mut r = common::Lcg::new(77);
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..n {
        let pick = |r: &mut common::Lcg, class: usize| -> f32 {
            let v = r.next_u32() ^ (r.next_u32() << 16);
            match class % 5 {
                0 => f32::from_bits(v & 0x807f_ffff | 0x3f80_0000), // [1, 2)
                1 => f32::from_bits(v & 0x87ff_ffff | 0x3800_0000), // wide exponents
                2 => f32::from_bits((v & 0x8fff_ffff) | 0x1000_0000), // tiny
                3 => f32::from_bits((v & 0x8fff_ffff) | 0x6000_0000), // huge
                _ => (v % 33) as f32 - 16.0,                        // small integers: exact ties
            }
        };
        let (x, y) = (pick(&mut r, i), pick(&mut r, i / 5));
        let z = match i % 4 {
            // The exact negated product, or one ulp off: massive cancellation.
            0 => -(x * y),
            1 => -(x * y) * f32::from_bits(0x3f80_0001),
            _ => pick(&mut r, i / 25),
        };
        a.push(x);
        b.push(y);
        c.push(z);
    }
    let mut g = Graph::default();
    let ins: Vec<_> = (0..3)
        .map(|_| g.new_var(Aval::new(vec![n], DType::F32)))
        .collect();
    let out = g.new_var(Aval::new(vec![n], DType::F32));
    g.inputs = ins.clone();
    g.eqns
        .push(Eqn::new(Prim::Elementwise(ElementwiseOp::Fma), ins, out));
    g.outputs = vec![out];
    let hosts: Vec<HostArray> = [a.clone(), b.clone(), c.clone()]
        .into_iter()
        .map(|v| HostArray::from_vec(v, &[n]).unwrap())
        .collect();
    let want: Vec<u32> = (0..n).map(|i| a[i].mul_add(b[i], c[i]).to_bits()).collect();
    let reference = brigade::reference::eval_graph(&g, &hosts).unwrap();
    assert_eq!(
        words(&reference[0]),
        want,
        "the CPU reference is f32::mul_add"
    );
    for dev in gpu_devices() {
        let p = brigade::lower::lower(&g, dev.limits()).unwrap();
        let got = words(&common::run_program(&dev, &p, &hosts)[0]);
        let bad: Vec<usize> = (0..n)
            .filter(|&i| {
                got[i] != want[i]
                    && !(f32::from_bits(got[i]).is_nan() && f32::from_bits(want[i]).is_nan())
            })
            .collect();
        assert!(
            bad.is_empty(),
            "fma on {}: {} of {n} differ; first: fma({:e}, {:e}, {:e}) = {:e}, got {:e}",
            dev.name(),
            bad.len(),
            a[bad[0]],
            b[bad[0]],
            c[bad[0]],
            f32::from_bits(want[bad[0]]),
            f32::from_bits(got[bad[0]])
        );
    }
}

/// `gumbel` is `-log(-log(u))` of JAX's uniform bits: the same to a few ULP on every device (two
/// logs, each within 2 ULP of JAX's), and `categorical`'s Gumbel-max draws are JAX's draws, class
/// for class, along either axis, with -inf logits never drawn. Over 4000 rows the class counts
/// are JAX's up to 2 (a draw whose two best noisy logits are within a few ULP may flip).
#[test]
fn gumbel_and_categorical_match_jax_on_every_device() {
    let logits = Array::from_vec(
        jv::CAT_LOGITS_6X8
            .iter()
            .map(|&b| f32::from_bits(b))
            .collect(),
        &[6, 8],
    )
    .unwrap();
    let many = Array::from_vec(
        [0.1f32, 0.2, 0.3, 0.4]
            .iter()
            .map(|p| p.ln())
            .cycle()
            .take(16_000)
            .collect(),
        &[4000, 4],
    )
    .unwrap();
    let f = |a: &[Tensor]| {
        vec![
            random::gumbel(&a[0], &[3, 4]),
            random::categorical(&a[1], &a[2], -1),
            random::categorical(&a[0], &a[2], 0),
            random::categorical(&a[0], &a[3], 1),
        ]
    };
    let args = [
        key_arr(&jv::KEYS[2..4]),
        key_arr(&jv::KEYS[0..2]),
        logits,
        many,
    ];
    for dev in all_devices() {
        let o = run_on(&dev, f, &args);
        let g = o[0].to_vec::<f32>().unwrap();
        for (k, (&got, &want)) in g.iter().zip(&jv::K42_GUMBEL_3X4).enumerate() {
            let d = ulps(got, f32::from_bits(want));
            assert!(
                d <= 8,
                "gumbel[{k}] on {}: {got} is {d} ULP from JAX",
                dev.name()
            );
        }
        assert_eq!(
            o[1].to_vec::<i32>().unwrap(),
            jv::K0_CATEGORICAL_6X8,
            "on {}",
            dev.name()
        );
        assert_eq!(
            o[2].to_vec::<i32>().unwrap(),
            jv::K42_CATEGORICAL_6X8_AXIS0,
            "axis 0 on {}",
            dev.name()
        );
        let draws = o[3].to_vec::<i32>().unwrap();
        assert!(draws.iter().all(|c| (0..4).contains(c)));
        for (c, &want) in jv::K42_CATEGORICAL_4000_COUNTS.iter().enumerate() {
            let n = draws.iter().filter(|&&d| d == c as i32).count() as i32;
            assert!(
                (n - want).abs() <= 2,
                "class {c} on {}: {n} draws, JAX {want}",
                dev.name()
            );
        }
    }
}
