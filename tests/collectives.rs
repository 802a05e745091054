//! Every collective (psum, pmean, pmax, pmin, all_gather, psum_scatter, ppermute, all_to_all,
//! axis_index, axis_size) under `pmap` and `shard_map`, on 1, 2, 3 and 4 Vulkan devices, on a mixed
//! Vulkan + GL mesh and on 3 cpu devices (the reference interpreter as executor).
//!
//! Expected values never come from brigade: each device's view of the global input is cut out on
//! the host with plain index loops ([`Nd`]), the collective's definition is applied to those views
//! in f64 (JAX semantics, written out element by element), and the result is compared with every
//! shard and with the gathered global array. Float sums are compared with `Tol::REDUCE` (1e-4
//! relative + 1e-4 absolute: a handful of f32 additions against the f64 sum); max, min, gathers and
//! permutations move values unchanged and are compared exactly; i32 results are always exact.

mod common;

use std::cell::Cell;

use brigade::{
    Array, DType, Device, Error, HostArray, HostData, Parallel, ShardLayout, Tensor, all_gather,
    all_to_all, axis_index, axis_size, pmap, pmax, pmean, pmin, ppermute, psum, psum_scatter,
    shard_map,
};
use common::{Lcg, Tol, assert_close, device_guard, devices_with, host, rand_f32, rand_i32};

// ---- device meshes ------------------------------------------------------------------------------

/// The meshes every collective runs on, with the number of devices each must have.
const MESHES: [(&str, usize); 6] = [
    ("vulkan:1", 1),
    ("vulkan:2", 2),
    ("vulkan:3", 3),
    ("vulkan:4", 4),
    ("vulkan:1,gl:1", 2),
    ("cpu:3", 3),
];

/// Run `body` on every mesh of [`MESHES`], holding the GL lock (see `common::device_guard`) while
/// a mesh with a GL device is used, so that everything created on it is also dropped under it.
fn for_each_mesh(mut body: impl FnMut(&str, &[Device])) {
    for (layout, count) in MESHES {
        let devs = devices_with(layout);
        assert_eq!(
            devs.len(),
            count,
            "layout {layout}: device count ({devs:?})"
        );
        let _guard = devs.iter().find_map(device_guard);
        body(layout, &devs);
    }
}

// ---- host reference arrays ----------------------------------------------------------------------

/// A row-major n-dimensional array of f64 for the host references (i32 data is exact in f64).
#[derive(Clone, Debug, PartialEq)]
struct Nd {
    shape: Vec<usize>,
    v: Vec<f64>,
}

impl Nd {
    fn of(h: &HostArray) -> Nd {
        Nd {
            shape: h.shape.clone(),
            v: h.to_f64(),
        }
    }

    /// The array of `shape` whose element at multi-index `idx` is `f(idx)`.
    fn from_fn(shape: &[usize], f: impl Fn(&[usize]) -> f64) -> Nd {
        let len: usize = shape.iter().product();
        let mut idx = vec![0usize; shape.len()];
        let mut v = Vec::with_capacity(len);
        for flat in 0..len {
            let mut rest = flat;
            for k in (0..shape.len()).rev() {
                idx[k] = rest % shape[k];
                rest /= shape[k];
            }
            v.push(f(&idx));
        }
        Nd {
            shape: shape.to_vec(),
            v,
        }
    }

    fn at(&self, idx: &[usize]) -> f64 {
        assert_eq!(idx.len(), self.shape.len(), "index rank");
        let mut flat = 0;
        for (i, s) in idx.iter().zip(&self.shape) {
            assert!(i < s, "index {idx:?} outside {:?}", self.shape);
            flat = flat * s + i;
        }
        self.v[flat]
    }

    fn map(&self, f: impl Fn(f64) -> f64) -> Nd {
        Nd {
            shape: self.shape.clone(),
            v: self.v.iter().map(|&x| f(x)).collect(),
        }
    }

    fn zip(&self, o: &Nd, f: impl Fn(f64, f64) -> f64) -> Nd {
        assert_eq!(self.shape, o.shape);
        Nd {
            shape: self.shape.clone(),
            v: self.v.iter().zip(&o.v).map(|(&a, &b)| f(a, b)).collect(),
        }
    }

    /// Elementwise fold of equally shaped arrays.
    fn fold(parts: &[Nd], f: impl Fn(f64, f64) -> f64) -> Nd {
        let mut acc = parts[0].clone();
        for p in &parts[1..] {
            acc = acc.zip(p, &f);
        }
        acc
    }

    /// Entry `i` along `axis`, that axis removed.
    fn index(&self, axis: usize, i: usize) -> Nd {
        let mut shape = self.shape.clone();
        shape.remove(axis);
        Nd::from_fn(&shape, |idx| {
            let mut full = idx.to_vec();
            full.insert(axis, i);
            self.at(&full)
        })
    }

    /// Entries `start..start + len` along `axis`.
    fn block(&self, axis: usize, start: usize, len: usize) -> Nd {
        let mut shape = self.shape.clone();
        shape[axis] = len;
        Nd::from_fn(&shape, |idx| {
            let mut full = idx.to_vec();
            full[axis] += start;
            self.at(&full)
        })
    }

    /// The parts stacked along a new axis `axis`.
    fn stack(parts: &[Nd], axis: usize) -> Nd {
        let mut shape = parts[0].shape.clone();
        shape.insert(axis, parts.len());
        Nd::from_fn(&shape, |idx| {
            let mut rest = idx.to_vec();
            let k = rest.remove(axis);
            parts[k].at(&rest)
        })
    }

    /// The parts concatenated along the existing axis `axis`.
    fn concat(parts: &[Nd], axis: usize) -> Nd {
        let mut shape = parts[0].shape.clone();
        shape[axis] = parts.iter().map(|p| p.shape[axis]).sum();
        Nd::from_fn(&shape, |idx| {
            let mut rest = idx.to_vec();
            let mut k = 0;
            while rest[axis] >= parts[k].shape[axis] {
                rest[axis] -= parts[k].shape[axis];
                k += 1;
            }
            parts[k].at(&rest)
        })
    }

    fn zeros(shape: &[usize]) -> Nd {
        Nd::from_fn(shape, |_| 0.0)
    }

    /// As host data of `dtype` (i32 values must be integral).
    fn to_host(&self, dtype: DType) -> HostArray {
        let data = match dtype {
            DType::F32 => HostData::F32(self.v.iter().map(|&x| x as f32).collect()),
            DType::I32 => HostData::I32(
                self.v
                    .iter()
                    .map(|&x| {
                        assert_eq!(x.fract(), 0.0, "i32 reference value {x}");
                        x as i32
                    })
                    .collect(),
            ),
            other => panic!("no reference for {other}"),
        };
        HostArray::new(self.shape.clone(), data).unwrap()
    }
}

// ---- the collectives, written out on the devices' views -----------------------------------------

fn ref_psum(views: &[Nd]) -> Vec<Nd> {
    vec![Nd::fold(views, |a, b| a + b); views.len()]
}

fn ref_pmean(views: &[Nd]) -> Vec<Nd> {
    let n = views.len() as f64;
    vec![Nd::fold(views, |a, b| a + b).map(|s| s / n); views.len()]
}

fn ref_pmax(views: &[Nd]) -> Vec<Nd> {
    vec![Nd::fold(views, f64::max); views.len()]
}

fn ref_pmin(views: &[Nd]) -> Vec<Nd> {
    vec![Nd::fold(views, f64::min); views.len()]
}

fn ref_all_gather(views: &[Nd], axis: usize, tiled: bool) -> Vec<Nd> {
    let g = if tiled {
        Nd::concat(views, axis)
    } else {
        Nd::stack(views, axis)
    };
    vec![g; views.len()]
}

fn ref_psum_scatter(views: &[Nd], dim: usize, tiled: bool) -> Vec<Nd> {
    let n = views.len();
    let sum = Nd::fold(views, |a, b| a + b);
    (0..n)
        .map(|i| {
            if tiled {
                let b = sum.shape[dim] / n;
                sum.block(dim, i * b, b)
            } else {
                sum.index(dim, i)
            }
        })
        .collect()
}

fn ref_ppermute(views: &[Nd], perm: &[(usize, usize)]) -> Vec<Nd> {
    let mut outs: Vec<Nd> = views.iter().map(|v| Nd::zeros(&v.shape)).collect();
    for &(src, dst) in perm {
        outs[dst] = views[src].clone();
    }
    outs
}

/// JAX's all_to_all: device `i` receives chunk `i` (along `split`) of every device `j`, in device
/// order, stacked (untiled: the unit split axis dropped, a new axis at `concat`) or concatenated
/// (tiled) along `concat`.
fn ref_all_to_all(views: &[Nd], split: usize, concat: usize, tiled: bool) -> Vec<Nd> {
    let n = views.len();
    (0..n)
        .map(|i| {
            if tiled {
                let c = views[0].shape[split] / n;
                let chunks: Vec<Nd> = views.iter().map(|v| v.block(split, i * c, c)).collect();
                Nd::concat(&chunks, concat)
            } else {
                let mut shape = views[0].shape.clone();
                assert_eq!(shape[split], n);
                shape.remove(split);
                shape.insert(concat, n);
                Nd::from_fn(&shape, |idx| {
                    let mut src = idx.to_vec();
                    let j = src.remove(concat);
                    src.insert(split, i);
                    views[j].at(&src)
                })
            }
        })
        .collect()
}

// ---- permutations (functions of the axis size, used by the mapped functions and the references) --

/// d -> d + 1 (mod n).
fn shift_right(n: usize) -> Vec<(usize, usize)> {
    (0..n).map(|d| (d, (d + 1) % n)).collect()
}
/// d -> d - 1 (mod n).
fn shift_left(n: usize) -> Vec<(usize, usize)> {
    (0..n).map(|d| (d, (d + n - 1) % n)).collect()
}
/// d -> n - 1 - d.
fn reverse(n: usize) -> Vec<(usize, usize)> {
    (0..n).map(|d| (d, n - 1 - d)).collect()
}
/// d -> d + 1 without wrapping: device 0 is nobody's destination and receives zeros.
fn shift_no_wrap(n: usize) -> Vec<(usize, usize)> {
    (0..n.saturating_sub(1)).map(|d| (d, d + 1)).collect()
}
/// Only devices 0 and 1 swap (when there are two); every other device receives zeros.
fn swap_first_two(n: usize) -> Vec<(usize, usize)> {
    if n >= 2 { vec![(0, 1), (1, 0)] } else { vec![] }
}

fn n_of_axis() -> usize {
    axis_size("i").expect("axis 'i' is bound while the mapped function is traced")
}

// ---- running a case and checking its outputs ----------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Pmap,
    Split,
}

type Body = fn(&[Tensor]) -> Vec<Tensor>;

/// Each device's expected result from every device's view.
type Reference = dyn Fn(&[Nd]) -> Vec<Nd>;

fn parallel(mode: Mode, body: Body, devs: &[Device]) -> Parallel<Body> {
    match mode {
        Mode::Pmap => pmap(body),
        Mode::Split => shard_map(body),
    }
    .axis_name("i")
    .devices(devs)
}

/// The mapped layout of outputs with the default `out_axes`.
fn mapped_layout(mode: Mode) -> ShardLayout {
    match mode {
        Mode::Pmap => ShardLayout::Stacked { axis: 0 },
        Mode::Split => ShardLayout::Blocks { axis: 0 },
    }
}

/// The global input whose per-device view has shape `view` (pmap: the device axis in front; split:
/// `view[0]` rows per device), and those views cut out on the host.
fn global_and_views(
    mode: Mode,
    view: &[usize],
    n: usize,
    x: impl Fn(&[usize]) -> Array,
) -> (Array, Vec<Nd>) {
    let mut shape = view.to_vec();
    match mode {
        Mode::Pmap => shape.insert(0, n),
        Mode::Split => shape[0] *= n,
    }
    let a = x(&shape);
    let g = Nd::of(&host(&a));
    let views = (0..n)
        .map(|d| match mode {
            Mode::Pmap => g.index(0, d),
            Mode::Split => g.block(0, d * view[0], view[0]),
        })
        .collect();
    (a, views)
}

fn data(dtype: DType, shape: &[usize], seed: u64) -> Array {
    match dtype {
        DType::F32 => rand_f32(shape, seed),
        DType::I32 => rand_i32(shape, seed, -50, 50),
        other => panic!("no test data for {other}"),
    }
}

/// What one output must be: its layout and each device's value.
struct Want {
    layout: ShardLayout,
    per_device: Vec<HostArray>,
    tol: Tol,
}

impl Want {
    fn new(layout: ShardLayout, per_device: &[Nd], dtype: DType, tol: Tol) -> Want {
        Want {
            layout,
            per_device: per_device.iter().map(|p| p.to_host(dtype)).collect(),
            tol,
        }
    }
}

/// The global value the shards of `per_device` make under `layout`, assembled on the host.
fn global_of(layout: ShardLayout, per_device: &[HostArray]) -> HostArray {
    let dtype = per_device[0].dtype();
    let nds: Vec<Nd> = per_device.iter().map(Nd::of).collect();
    let g = match layout {
        ShardLayout::Stacked { axis } => Nd::stack(&nds, axis),
        ShardLayout::Blocks { axis } => Nd::concat(&nds, axis),
        ShardLayout::Replicated => {
            assert!(
                nds.iter().all(|p| *p == nds[0]),
                "a replicated reference differs between devices"
            );
            nds[0].clone()
        }
        ShardLayout::Named(_) => unreachable!("one-axis maps give one-axis layouts"),
    };
    g.to_host(dtype)
}

/// Check the outputs of a parallel call: count, layout, one shard per device on that device,
/// every shard's shape and value, the global shape and the gathered global value.
fn check_outputs(outs: &[Array], devs: &[Device], want: &[Want], ctx: &str) {
    assert_eq!(outs.len(), want.len(), "{ctx}: number of outputs");
    let n = devs.len();
    for (k, (o, w)) in outs.iter().zip(want).enumerate() {
        let ctx = format!("{ctx}, output {k}");
        assert_eq!(
            o.shard_layout(),
            Some(w.layout.clone()),
            "{ctx}: shard_layout"
        );
        assert_eq!(o.shard_devices(), devs, "{ctx}: shard_devices");
        let shards = o
            .shards()
            .unwrap_or_else(|| panic!("{ctx}: the output is not sharded ({o:?})"));
        assert_eq!(shards.len(), n, "{ctx}: number of shards");
        assert_eq!(w.per_device.len(), n, "{ctx}: reference per device");
        for (d, (s, e)) in shards.iter().zip(&w.per_device).enumerate() {
            let dev = &devs[d];
            assert_eq!(s.shape(), e.shape.as_slice(), "{ctx}: shape of shard {d}");
            if !dev.is_cpu() {
                assert_eq!(
                    s.device(),
                    Some(dev),
                    "{ctx}: shard {d} lives on device {d}"
                );
            }
            assert_close(
                &host(s),
                e,
                w.tol,
                &format!("{ctx}: shard {d} (on {})", dev.name()),
            );
        }
        let g = global_of(w.layout.clone(), &w.per_device);
        assert_eq!(o.shape(), g.shape.as_slice(), "{ctx}: global shape");
        assert_close(
            &host(o),
            &g,
            w.tol,
            &format!("{ctx}: gathered global value"),
        );
    }
}

/// One collective applied to the single argument.
struct Case {
    name: &'static str,
    /// The primitive the traced program must show.
    prim: &'static str,
    body: Body,
    /// The per-device view's shape for `n` devices.
    view: fn(usize) -> Vec<usize>,
    /// Each device's expected result from every device's view.
    reference: Box<Reference>,
    dtypes: &'static [DType],
    /// Output dtype for an input dtype.
    out_dtype: fn(DType) -> DType,
    /// Tolerance of f32 outputs (integer outputs are compared exactly).
    tol: Tol,
}

const BOTH: &[DType] = &[DType::F32, DType::I32];
const F32_ONLY: &[DType] = &[DType::F32];

fn same(d: DType) -> DType {
    d
}

fn case(
    name: &'static str,
    prim: &'static str,
    body: Body,
    view: fn(usize) -> Vec<usize>,
    reference: impl Fn(&[Nd]) -> Vec<Nd> + 'static,
    tol: Tol,
) -> Case {
    Case {
        name,
        prim,
        body,
        view,
        reference: Box::new(reference),
        dtypes: BOTH,
        out_dtype: same,
        tol,
    }
}

/// Run every case in `mode` on every mesh, for each of its dtypes (one parallel object per case
/// and mesh, called for every dtype), and check it against its host reference.
fn run_cases(mode: Mode, cases: &[Case]) {
    for_each_mesh(|layout, devs| {
        let n = devs.len();
        for (ci, c) in cases.iter().enumerate() {
            let p = parallel(mode, c.body, devs);
            for (ti, &dtype) in c.dtypes.iter().enumerate() {
                let ctx = format!("{mode:?} {} on {layout}, {dtype}", c.name);
                let seed = 1000 * ci as u64 + 100 * ti as u64 + n as u64;
                let (x, views) = global_and_views(mode, &(c.view)(n), n, |s| data(dtype, s, seed));
                let args = [x];
                let text = format!(
                    "{}",
                    p.graph(&args).unwrap_or_else(|e| panic!("{ctx}: {e}"))
                );
                assert!(
                    text.contains(c.prim),
                    "{ctx}: the traced program shows no {}:\n{text}",
                    c.prim
                );
                assert_eq!(
                    p.stage_count(&args).unwrap(),
                    (2, 1),
                    "{ctx}: one collective is two stages and one exchange\n{text}"
                );
                let outs = p
                    .call(&args)
                    .unwrap_or_else(|e| panic!("{ctx}: call failed: {e}\n{text}"));
                let want = (c.reference)(&views);
                let out_dtype = (c.out_dtype)(dtype);
                let tol = if out_dtype == DType::F32 {
                    c.tol
                } else {
                    Tol::EXACT
                };
                check_outputs(
                    &outs,
                    devs,
                    &[Want::new(mapped_layout(mode), &want, out_dtype, tol)],
                    &ctx,
                );
            }
        }
    });
}

// ---- the tests ----------------------------------------------------------------------------------

#[test]
fn meshes_have_the_requested_backends() {
    for (layout, count) in MESHES {
        let devs = devices_with(layout);
        assert_eq!(devs.len(), count, "{layout}: {devs:?}");
        let backends: Vec<String> = devs
            .iter()
            .map(|d| {
                if d.is_cpu() {
                    "cpu".to_string()
                } else {
                    d.info().backend.to_string()
                }
            })
            .collect();
        let want: Vec<String> = layout
            .split(',')
            .flat_map(|part| {
                let (b, k) = part.split_once(':').unwrap();
                vec![b.to_string(); k.parse().unwrap()]
            })
            .collect();
        assert_eq!(backends, want, "{layout}: device backends");
        for (i, a) in devs.iter().enumerate() {
            for b in &devs[i + 1..] {
                assert_ne!(a, b, "{layout}: the devices of a mesh are distinct");
            }
        }
    }
}

#[test]
fn psum_matches_the_host_sum() {
    let pm = |views: &[Nd]| ref_psum(views);
    run_cases(
        Mode::Pmap,
        &[case(
            "psum",
            "psum",
            |a| vec![psum(&a[0], "i")],
            |_| vec![3, 4],
            pm,
            Tol::REDUCE,
        )],
    );
    run_cases(
        Mode::Split,
        &[case(
            "psum",
            "psum",
            |a| vec![psum(&a[0], "i")],
            |_| vec![2, 3],
            pm,
            Tol::REDUCE,
        )],
    );
}

#[test]
fn psum_with_out_axes_none_is_replicated() {
    // pmap over (n, 3, 4) and shard_map over (2n, 3): the sum returned once, every shard holding it.
    for mode in [Mode::Pmap, Mode::Split] {
        let view: &[usize] = match mode {
            Mode::Pmap => &[3, 4],
            Mode::Split => &[2, 3],
        };
        for_each_mesh(|layout, devs| {
            let n = devs.len();
            let p = parallel(mode, |a| vec![psum(&a[0], "i")], devs).out_axes(&[None]);
            for dtype in BOTH {
                let (x, views) = global_and_views(mode, view, n, |s| data(*dtype, s, 7 + n as u64));
                let outs = p.call(&[x]).unwrap();
                let tol = if *dtype == DType::F32 {
                    Tol::REDUCE
                } else {
                    Tol::EXACT
                };
                check_outputs(
                    &outs,
                    devs,
                    &[Want::new(
                        ShardLayout::Replicated,
                        &ref_psum(&views),
                        *dtype,
                        tol,
                    )],
                    &format!("{mode:?} psum out_axes None on {layout}, {dtype}"),
                );
                assert_eq!(outs[0].shape(), view, "replicated: the per-device shape");
            }
        });
    }
}

#[test]
fn pmean_matches_the_host_mean() {
    // f32: one pmean collective; i32: psum, cast to f32, divided by n. Both give f32.
    let cases = |view: fn(usize) -> Vec<usize>| {
        let mut f = case(
            "pmean",
            "pmean",
            |a| vec![pmean(&a[0], "i")],
            view,
            ref_pmean,
            Tol::REDUCE,
        );
        f.dtypes = F32_ONLY;
        let mut i = case(
            "pmean of i32 (through psum)",
            "psum",
            |a| vec![pmean(&a[0], "i")],
            view,
            ref_pmean,
            Tol::REDUCE,
        );
        i.dtypes = &[DType::I32];
        i.out_dtype = |_| DType::F32;
        vec![f, i]
    };
    run_cases(Mode::Pmap, &cases(|_| vec![3, 4]));
    run_cases(Mode::Split, &cases(|_| vec![2, 3]));
}

#[test]
fn pmax_and_pmin_match_the_host_extrema() {
    run_cases(
        Mode::Pmap,
        &[
            case(
                "pmax",
                "pmax",
                |a| vec![pmax(&a[0], "i")],
                |_| vec![3, 4],
                ref_pmax,
                Tol::EXACT,
            ),
            case(
                "pmin",
                "pmin",
                |a| vec![pmin(&a[0], "i")],
                |_| vec![3, 4],
                ref_pmin,
                Tol::EXACT,
            ),
        ],
    );
    run_cases(
        Mode::Split,
        &[
            case(
                "pmax",
                "pmax",
                |a| vec![pmax(&a[0], "i")],
                |_| vec![2, 3],
                ref_pmax,
                Tol::EXACT,
            ),
            case(
                "pmin",
                "pmin",
                |a| vec![pmin(&a[0], "i")],
                |_| vec![2, 3],
                ref_pmin,
                Tol::EXACT,
            ),
        ],
    );
}

#[test]
fn all_gather_stacked_and_tiled() {
    run_cases(
        Mode::Pmap,
        &[
            case(
                "all_gather axis 0",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 0, false)],
                |_| vec![3, 4],
                |v: &[Nd]| ref_all_gather(v, 0, false),
                Tol::EXACT,
            ),
            case(
                "all_gather axis 1",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 1, false)],
                |_| vec![3, 4],
                |v: &[Nd]| ref_all_gather(v, 1, false),
                Tol::EXACT,
            ),
            case(
                "all_gather axis 2 (last)",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 2, false)],
                |_| vec![3, 4],
                |v: &[Nd]| ref_all_gather(v, 2, false),
                Tol::EXACT,
            ),
            case(
                "all_gather tiled axis 0",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 0, true)],
                |_| vec![3, 4],
                |v: &[Nd]| ref_all_gather(v, 0, true),
                Tol::EXACT,
            ),
            case(
                "all_gather tiled axis 1",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 1, true)],
                |_| vec![3, 4],
                |v: &[Nd]| ref_all_gather(v, 1, true),
                Tol::EXACT,
            ),
        ],
    );
    run_cases(
        Mode::Split,
        &[
            case(
                "all_gather axis 0",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 0, false)],
                |_| vec![2, 3],
                |v: &[Nd]| ref_all_gather(v, 0, false),
                Tol::EXACT,
            ),
            case(
                "all_gather tiled axis 0 (every device sees the whole batch)",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 0, true)],
                |_| vec![2, 3],
                |v: &[Nd]| ref_all_gather(v, 0, true),
                Tol::EXACT,
            ),
            case(
                "all_gather tiled axis 1",
                "all_gather",
                |a| vec![all_gather(&a[0], "i", 1, true)],
                |_| vec![2, 3],
                |v: &[Nd]| ref_all_gather(v, 1, true),
                Tol::EXACT,
            ),
        ],
    );
}

#[test]
fn psum_scatter_untiled_and_tiled() {
    run_cases(
        Mode::Pmap,
        &[
            case(
                "psum_scatter dim 0",
                "psum_scatter",
                |a| vec![psum_scatter(&a[0], "i", 0, false)],
                |n| vec![n, 3],
                |v: &[Nd]| ref_psum_scatter(v, 0, false),
                Tol::REDUCE,
            ),
            case(
                "psum_scatter dim 1",
                "psum_scatter",
                |a| vec![psum_scatter(&a[0], "i", 1, false)],
                |n| vec![3, n],
                |v: &[Nd]| ref_psum_scatter(v, 1, false),
                Tol::REDUCE,
            ),
            case(
                "psum_scatter tiled dim 0",
                "psum_scatter",
                |a| vec![psum_scatter(&a[0], "i", 0, true)],
                |n| vec![2 * n, 3],
                |v: &[Nd]| ref_psum_scatter(v, 0, true),
                Tol::REDUCE,
            ),
            case(
                "psum_scatter tiled dim 1",
                "psum_scatter",
                |a| vec![psum_scatter(&a[0], "i", 1, true)],
                |n| vec![2, 2 * n],
                |v: &[Nd]| ref_psum_scatter(v, 1, true),
                Tol::REDUCE,
            ),
        ],
    );
    // Split mode: a block of n rows per device, scattered back one summed row per device.
    run_cases(
        Mode::Split,
        &[case(
            "psum_scatter tiled dim 0",
            "psum_scatter",
            |a| vec![psum_scatter(&a[0], "i", 0, true)],
            |n| vec![n, 3],
            |v: &[Nd]| ref_psum_scatter(v, 0, true),
            Tol::REDUCE,
        )],
    );
}

#[test]
fn ppermute_cyclic_reversed_and_partial() {
    let cases = |view: fn(usize) -> Vec<usize>| {
        vec![
            case(
                "ppermute shift +1 (cyclic)",
                "ppermute",
                |a| vec![ppermute(&a[0], "i", &shift_right(n_of_axis()))],
                view,
                |v: &[Nd]| ref_ppermute(v, &shift_right(v.len())),
                Tol::EXACT,
            ),
            case(
                "ppermute shift -1 (cyclic)",
                "ppermute",
                |a| vec![ppermute(&a[0], "i", &shift_left(n_of_axis()))],
                view,
                |v: &[Nd]| ref_ppermute(v, &shift_left(v.len())),
                Tol::EXACT,
            ),
            case(
                "ppermute reverse",
                "ppermute",
                |a| vec![ppermute(&a[0], "i", &reverse(n_of_axis()))],
                view,
                |v: &[Nd]| ref_ppermute(v, &reverse(v.len())),
                Tol::EXACT,
            ),
            case(
                "ppermute shift +1 without wrap (device 0 gets zeros)",
                "ppermute",
                |a| vec![ppermute(&a[0], "i", &shift_no_wrap(n_of_axis()))],
                view,
                |v: &[Nd]| ref_ppermute(v, &shift_no_wrap(v.len())),
                Tol::EXACT,
            ),
            case(
                "ppermute swap of devices 0 and 1 only",
                "ppermute",
                |a| vec![ppermute(&a[0], "i", &swap_first_two(n_of_axis()))],
                view,
                |v: &[Nd]| ref_ppermute(v, &swap_first_two(v.len())),
                Tol::EXACT,
            ),
        ]
    };
    run_cases(Mode::Pmap, &cases(|_| vec![3, 4]));
    run_cases(Mode::Split, &cases(|_| vec![2, 3]));
}

#[test]
fn all_to_all_untiled_and_tiled() {
    run_cases(
        Mode::Pmap,
        &[
            case(
                "all_to_all split 0 concat 1",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 0, 1, false)],
                |n| vec![n, 3, 2],
                |v: &[Nd]| ref_all_to_all(v, 0, 1, false),
                Tol::EXACT,
            ),
            case(
                "all_to_all split 1 concat 0",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 1, 0, false)],
                |n| vec![3, n],
                |v: &[Nd]| ref_all_to_all(v, 1, 0, false),
                Tol::EXACT,
            ),
            case(
                "all_to_all split 0 concat 0",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 0, 0, false)],
                |n| vec![n, 3],
                |v: &[Nd]| ref_all_to_all(v, 0, 0, false),
                Tol::EXACT,
            ),
            case(
                "all_to_all split 2 concat 1",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 2, 1, false)],
                |n| vec![2, 3, n],
                |v: &[Nd]| ref_all_to_all(v, 2, 1, false),
                Tol::EXACT,
            ),
            case(
                "all_to_all tiled split 0 concat 1",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 0, 1, true)],
                |n| vec![2 * n, 3],
                |v: &[Nd]| ref_all_to_all(v, 0, 1, true),
                Tol::EXACT,
            ),
            case(
                "all_to_all tiled split 1 concat 0",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 1, 0, true)],
                |n| vec![3, 2 * n],
                |v: &[Nd]| ref_all_to_all(v, 1, 0, true),
                Tol::EXACT,
            ),
            case(
                "all_to_all tiled split 1 concat 1",
                "all_to_all",
                |a| vec![all_to_all(&a[0], "i", 1, 1, true)],
                |n| vec![3, 2 * n],
                |v: &[Nd]| ref_all_to_all(v, 1, 1, true),
                Tol::EXACT,
            ),
        ],
    );
    // Split mode: the block has n rows per device, exchanged row i to device i.
    run_cases(
        Mode::Split,
        &[case(
            "all_to_all tiled split 0 concat 1",
            "all_to_all",
            |a| vec![all_to_all(&a[0], "i", 0, 1, true)],
            |n| vec![n, 3],
            |v: &[Nd]| ref_all_to_all(v, 0, 1, true),
            Tol::EXACT,
        )],
    );
}

#[test]
fn axis_index_and_axis_size() {
    for mode in [Mode::Pmap, Mode::Split] {
        let view: &[usize] = match mode {
            Mode::Pmap => &[3],
            Mode::Split => &[2, 3],
        };
        for_each_mesh(|layout, devs| {
            let n = devs.len();
            let ctx = format!("{mode:?} axis_index/axis_size on {layout}");
            let seen = Cell::new(usize::MAX);
            let unbound = Cell::new(false);
            let f = |a: &[Tensor]| {
                let size = axis_size("i").expect("axis 'i' is bound");
                seen.set(size);
                unbound.set(matches!(axis_size("j"), Err(Error::UnboundAxis { .. })));
                let idx = axis_index("i");
                let shifted = &a[0] + idx.cast(DType::F32) * 10.0 + size as f32;
                // The index as a one-element vector, so split mode can concatenate it too.
                vec![idx.reshape(&[1]), shifted]
            };
            let p = match mode {
                Mode::Pmap => pmap(f),
                Mode::Split => shard_map(f),
            }
            .axis_name("i")
            .devices(devs);
            let (x, views) = global_and_views(mode, view, n, |s| rand_f32(s, 40 + n as u64));
            let args = [x];
            assert_eq!(
                p.stage_count(&args).unwrap(),
                (1, 0),
                "{ctx}: axis_index needs no exchange"
            );
            assert_eq!(seen.get(), n, "{ctx}: axis_size while tracing");
            assert!(
                unbound.get(),
                "{ctx}: axis_size of an unbound name is UnboundAxis"
            );
            let outs = p.call(&args).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let index: Vec<Nd> = (0..n).map(|d| Nd::from_fn(&[1], |_| d as f64)).collect();
            let shifted: Vec<Nd> = views
                .iter()
                .enumerate()
                .map(|(d, v)| v.map(|x| x + 10.0 * d as f64 + n as f64))
                .collect();
            let l = mapped_layout(mode);
            check_outputs(
                &outs,
                devs,
                &[
                    Want::new(l.clone(), &index, DType::I32, Tol::EXACT),
                    Want::new(l.clone(), &shifted, DType::F32, Tol::ARITH),
                ],
                &ctx,
            );
        });
    }
}

#[test]
fn collective_between_stages() {
    // y = 2x + 1; s = psum(y); z = exp(s - y); out = pmax(z): three stages, two exchanges.
    fn body(a: &[Tensor]) -> Vec<Tensor> {
        let y = &a[0] * 2.0 + 1.0;
        let s = psum(&y, "i");
        let z = (&s - &y).exp();
        vec![pmax(&z, "i")]
    }
    for mode in [Mode::Pmap, Mode::Split] {
        let view: &[usize] = match mode {
            Mode::Pmap => &[3, 4],
            Mode::Split => &[2, 3],
        };
        for_each_mesh(|layout, devs| {
            let n = devs.len();
            let ctx = format!("{mode:?} y=2x+1, z=exp(psum(y)-y), pmax(z) on {layout}");
            let p = parallel(mode, body, devs);
            let (x, views) = global_and_views(mode, view, n, |s| {
                common::rand_f32_in(s, 50 + n as u64, -1.0, 1.0)
            });
            let args = [x];
            assert_eq!(p.stage_count(&args).unwrap(), (3, 2), "{ctx}: stages");
            let ys: Vec<Nd> = views.iter().map(|v| v.map(|x| 2.0 * x + 1.0)).collect();
            let s = Nd::fold(&ys, |a, b| a + b);
            let zs: Vec<Nd> = ys.iter().map(|y| s.zip(y, |s, y| (s - y).exp())).collect();
            let want = ref_pmax(&zs);
            let outs = p.call(&args).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            check_outputs(
                &outs,
                devs,
                &[Want::new(
                    mapped_layout(mode),
                    &want,
                    DType::F32,
                    Tol::REDUCE,
                )],
                &ctx,
            );
        });
    }
}

#[test]
fn two_independent_collectives_share_one_exchange() {
    // psum(2x) and pmin(exp(x)) depend only on the input: one exchange carries both.
    fn body(a: &[Tensor]) -> Vec<Tensor> {
        let s = psum(&(&a[0] * 2.0), "i");
        let m = pmin(&a[0].exp(), "i");
        vec![&s + &m, m]
    }
    for_each_mesh(|layout, devs| {
        let n = devs.len();
        let ctx = format!("pmap psum(2x) + pmin(exp x) on {layout}");
        let p = parallel(Mode::Pmap, body, devs);
        let (x, views) = global_and_views(Mode::Pmap, &[3, 4], n, |s| rand_f32(s, 60 + n as u64));
        let args = [x];
        assert_eq!(
            p.stage_count(&args).unwrap(),
            (2, 1),
            "{ctx}: two stages, one exchange"
        );
        let s = Nd::fold(&views, |a, b| a + b).map(|v| 2.0 * v);
        let m = Nd::fold(
            &views.iter().map(|v| v.map(f64::exp)).collect::<Vec<_>>(),
            f64::min,
        );
        let sum = s.zip(&m, |a, b| a + b);
        let outs = p.call(&args).unwrap_or_else(|e| panic!("{ctx}: {e}"));
        let layout_out = mapped_layout(Mode::Pmap);
        check_outputs(
            &outs,
            devs,
            &[
                Want::new(layout_out.clone(), &vec![sum; n], DType::F32, Tol::REDUCE),
                // exp on the device: Tol::TRANS (1e-5 relative).
                Want::new(layout_out.clone(), &vec![m; n], DType::F32, Tol::TRANS),
            ],
            &ctx,
        );
    });
}

#[test]
fn collective_result_feeds_later_stages_and_is_an_output() {
    // s = psum(x) is used by stage 1 (u = s * x), by stage 2 (w = pmax(u) - s) and returned.
    fn body(a: &[Tensor]) -> Vec<Tensor> {
        let s = psum(&a[0], "i");
        let u = &s * &a[0];
        let w = pmax(&u, "i") - &s;
        vec![s, u, w]
    }
    for mode in [Mode::Pmap, Mode::Split] {
        let view: &[usize] = match mode {
            Mode::Pmap => &[3, 4],
            Mode::Split => &[2, 3],
        };
        for_each_mesh(|layout, devs| {
            let n = devs.len();
            let ctx = format!("{mode:?} s=psum(x), u=s*x, w=pmax(u)-s on {layout}");
            let p = parallel(mode, body, devs);
            let (x, views) = global_and_views(mode, view, n, |s| rand_f32(s, 70 + n as u64));
            let args = [x];
            assert_eq!(p.stage_count(&args).unwrap(), (3, 2), "{ctx}: stages");
            let s = Nd::fold(&views, |a, b| a + b);
            let us: Vec<Nd> = views.iter().map(|v| s.zip(v, |s, x| s * x)).collect();
            let w = Nd::fold(&us, f64::max).zip(&s, |m, s| m - s);
            let outs = p.call(&args).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            let l = mapped_layout(mode);
            check_outputs(
                &outs,
                devs,
                &[
                    Want::new(l.clone(), &vec![s; n], DType::F32, Tol::REDUCE),
                    Want::new(l.clone(), &us, DType::F32, Tol::REDUCE),
                    Want::new(l.clone(), &vec![w; n], DType::F32, Tol::REDUCE),
                ],
                &ctx,
            );
        });
    }
}

#[test]
fn back_to_back_collectives_without_compute_between() {
    // all_gather(ppermute(x, d -> d + 1)): the second exchange reads the first one's result.
    fn body(a: &[Tensor]) -> Vec<Tensor> {
        let shifted = ppermute(&a[0], "i", &shift_right(n_of_axis()));
        vec![all_gather(&shifted, "i", 0, false)]
    }
    for_each_mesh(|layout, devs| {
        let n = devs.len();
        let p = parallel(Mode::Pmap, body, devs);
        for dtype in BOTH {
            let ctx = format!("pmap all_gather(ppermute(x)) on {layout}, {dtype}");
            let (x, views) =
                global_and_views(Mode::Pmap, &[3, 4], n, |s| data(*dtype, s, 80 + n as u64));
            let args = [x];
            assert_eq!(p.stage_count(&args).unwrap(), (3, 2), "{ctx}: stages");
            let want = ref_all_gather(&ref_ppermute(&views, &shift_right(n)), 0, false);
            let outs = p.call(&args).unwrap_or_else(|e| panic!("{ctx}: {e}"));
            check_outputs(
                &outs,
                devs,
                &[Want::new(
                    mapped_layout(Mode::Pmap),
                    &want,
                    *dtype,
                    Tol::EXACT,
                )],
                &ctx,
            );
        }
    });
}

/// f32 values of mixed magnitude (1e-3 .. 1e7, both signs): sums of them depend on the order.
fn mixed_magnitudes(shape: &[usize], seed: u64) -> Array {
    let mut r = Lcg::new(seed);
    let len: usize = shape.iter().product();
    let v: Vec<f32> = (0..len)
        .map(|_| {
            let scale = [1e-3f64, 1.0, 1e3, 1e7][(r.next_u32() % 4) as usize];
            let sign = if r.next_u32().is_multiple_of(2) {
                1.0
            } else {
                -1.0
            };
            (sign * scale * r.range(1.0, 2.0)) as f32
        })
        .collect();
    Array::from_vec(v, shape).unwrap()
}

#[test]
fn psum_of_mixed_magnitudes_is_bitwise_deterministic() {
    for layout in ["vulkan:4", "vulkan:1,gl:1", "cpu:3"] {
        let devs = devices_with(layout);
        let _guard = devs.iter().find_map(device_guard);
        let n = devs.len();
        let ctx = format!("pmap psum of mixed magnitudes on {layout}");
        let p = parallel(Mode::Pmap, |a| vec![psum(&a[0], "i")], &devs);
        let x = mixed_magnitudes(&[n, 64], 90 + n as u64);
        let xs: Vec<f32> = x.to_vec().unwrap();
        let runs: Vec<Vec<u32>> = (0..3)
            .map(|_| {
                let out = p
                    .call(std::slice::from_ref(&x))
                    .unwrap_or_else(|e| panic!("{ctx}: {e}"));
                assert_eq!(out[0].shape(), &[n, 64], "{ctx}: shape");
                out[0]
                    .to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            })
            .collect();
        assert_eq!(runs[0], runs[1], "{ctx}: runs 1 and 2 differ bitwise");
        assert_eq!(runs[0], runs[2], "{ctx}: runs 1 and 3 differ bitwise");
        // The documented order: the host adds the operands in device order, in f32.
        let in_order: Vec<f32> = (0..64)
            .map(|k| {
                let mut acc = xs[k];
                for d in 1..n {
                    acc += xs[d * 64 + k];
                }
                acc
            })
            .collect();
        for d in 0..n {
            for k in 0..64 {
                assert_eq!(
                    runs[0][d * 64 + k],
                    in_order[k].to_bits(),
                    "{ctx}: device {d} element {k}: got {}, device-order f32 sum {}",
                    f32::from_bits(runs[0][d * 64 + k]),
                    in_order[k]
                );
            }
        }
        if n >= 3 {
            // The data is order-sensitive: adding in reverse order gives other bits somewhere.
            let reversed = (0..64).any(|k| {
                let mut acc = xs[(n - 1) * 64 + k];
                for d in (0..n - 1).rev() {
                    acc += xs[d * 64 + k];
                }
                acc.to_bits() != in_order[k].to_bits()
            });
            assert!(
                reversed,
                "{ctx}: the test data should be sensitive to summation order"
            );
        }
    }
}

/// JAX's `psum(1, 'i')` idiom (the axis size) and a collective of a captured constant array: the
/// operand is a constant, rebuilt inside stages rather than carried, and must still reach the
/// exchange (regression: it was missing from every device's values).
#[test]
fn collectives_of_constants() {
    for (layout, n) in [("vulkan:3", 3usize), ("vulkan:1,gl:1", 2), ("cpu:2", 2)] {
        let devs = devices_with(layout);
        let _guard = devs.iter().find_map(device_guard);
        let captured = Array::from_vec(vec![1.5f32, -2.0, 4.0], &[3]).unwrap();
        let f = pmap(move |a: &[Tensor]| {
            let one = Tensor::from(Array::scalar(1i32));
            vec![
                psum(&one, "i"),
                &a[0] * psum(&Tensor::from(captured.clone()), "i"),
            ]
        })
        .axis_name("i")
        .devices(&devs);
        let x = rand_f32(&[n, 3], 41);
        let out = f.call(std::slice::from_ref(&x)).unwrap();
        assert_eq!(
            out[0].to_vec::<i32>().unwrap(),
            vec![n as i32; n],
            "{layout}"
        );
        let xs = host(&x).to_f64();
        let want: Vec<f64> = xs
            .iter()
            .enumerate()
            .map(|(i, v)| v * [1.5, -2.0, 4.0][i % 3] * n as f64)
            .collect();
        let got = host(&out[1]).to_f64();
        for (g, w) in got.iter().zip(&want) {
            assert!(
                (g - w).abs() <= 1e-5 * w.abs().max(1.0),
                "{layout}: {got:?} vs {want:?}"
            );
        }
    }
}
