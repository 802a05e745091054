//! Multi-process meshes over MPI (feature `mpi`): `mpirun -n 2` and `-n 4` on this test binary
//! itself as the worker (env `BRIGADE_MPI_WORKER` selects what [`worker`] runs), on cpu and
//! lavapipe (Vulkan) devices, each run under a wall-clock timeout (killed on expiry: a failure,
//! never a hang).
//!
//! Every collective's result on every global device is compared with the same program run by
//! one process (this one) holding as many devices as the processes hold together: the bits must
//! be equal, since both combine in global device order. The reference comes from brigade itself
//! on purpose — what is checked here is that the processes reproduce the one-process run; the
//! one-process collectives are checked against host-written definitions in tests/collectives.rs.
//! Also: processes that trace different shapes all fail with `ProcessDivergence`, a process
//! that stalls before an exchange makes the others fail within `BRIGADE_MPI_TIMEOUT`, and the
//! example `multihost_training` under `mpirun -n 4` ends with parameters bit-identical on every
//! process and equal to a one-process 4-device run.
#![cfg(feature = "mpi")]

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brigade::{
    Array, DType, Device, Mesh, NamedSharding, P, PartitionSpec, Result, Runtime, Tensor,
    all_gather, all_to_all, axis_index, device_put, pmap, pmax, pmean, pmin, ppermute, psum,
    psum_axes, psum_scatter, shard_map,
};

/// Env var naming the worker's task; unset when the test harness runs normally.
const WORKER: &str = "BRIGADE_MPI_WORKER";

/// Wall-clock limit of one `mpirun`.
const LIMIT: Duration = Duration::from_secs(240);

// ---- the program every process runs -----------------------------------------------------------

/// FNV-1a of the bytes: a short, exact fingerprint of a result.
fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

/// Deterministic, non-trivial data in [-1, 1) for global device `g` (never all zeros).
fn data(n: usize, g: usize) -> Vec<f32> {
    let mut s = (g as u32 + 1).wrapping_mul(2654435761).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1664525).wrapping_add(1013904223);
            (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Every collective over `devices`, which are global devices `offset..offset + devices.len()` of
/// `total`: one line per result and global device, `name g fingerprint`, plus one per
/// replicated result (`name * fingerprint`). `wide` gives this process another shape (the
/// divergence test).
fn collectives(devices: &[Device], offset: usize, total: usize, wide: bool) -> Result<Vec<String>> {
    let n = devices.len();
    let cols = if wide { 4 } else { 3 };
    let rows = 2 * total;
    let mut x = Vec::new();
    for d in 0..n {
        x.extend(data(rows * cols, offset + d));
    }
    let x = Array::from_vec(x, &[n, rows, cols])?;
    let ring: Vec<(usize, usize)> = (0..total).map(|k| (k, (k + 1) % total)).collect();
    let names = [
        "psum",
        "pmean",
        "pmax",
        "pmin",
        "psum_i32",
        "all_gather",
        "all_gather_tiled",
        "psum_scatter",
        "ppermute",
        "all_to_all",
        "axis_index",
        "axis_index_psum",
    ];
    let f = pmap(move |a: &[Tensor]| {
        let x = &a[0];
        let k = axis_index("i");
        vec![
            psum(x, "i"),
            pmean(x, "i"),
            pmax(x, "i"),
            pmin(x, "i"),
            psum(&(x * 1000.0).cast(DType::I32), "i"),
            all_gather(x, "i", 0, false),
            all_gather(x, "i", 1, true),
            psum_scatter(x, "i", 0, true),
            ppermute(x, "i", &ring),
            all_to_all(x, "i", 0, 1, true),
            k.clone(),
            psum(&(x * k.cast(DType::F32)), "i"),
        ]
    })
    .axis_name("i")
    .devices(devices);
    let outs = f.call(&[x])?;
    let mut lines = Vec::new();
    for (name, out) in names.iter().zip(&outs) {
        let shards = out.shards().expect("pmap outputs are sharded");
        for (d, s) in shards.iter().enumerate() {
            let h = s.to_host()?;
            lines.push(format!(
                "{name} {} {:016x}",
                offset + d,
                fingerprint(&h.data.to_bytes())
            ));
        }
    }
    // Split mode: each process passes its devices' blocks; the replicated sum is one value.
    let blocks: Vec<f32> = (0..n)
        .flat_map(|d| data(4 * cols, 100 + offset + d))
        .collect();
    let xb = Array::from_vec(blocks, &[4 * n, cols])?;
    let s = shard_map(|a: &[Tensor]| vec![psum(&a[0].sum(0i64, false), "s")])
        .axis_name("s")
        .out_axes(&[None])
        .devices(devices);
    let total_sum = s.call(&[xb])?.remove(0).to_host()?;
    lines.push(format!(
        "shard_map_psum * {:016x}",
        fingerprint(&total_sum.data.to_bytes())
    ));
    Ok(lines)
}

/// Fast mode's program: one exchange of all-reduces only (so MPI_Allreduce takes it).
fn all_reduces(devices: &[Device], offset: usize) -> Result<Vec<String>> {
    let n = devices.len();
    let x: Vec<f32> = (0..n).flat_map(|d| data(24, offset + d)).collect();
    let x = Array::from_vec(x, &[n, 8, 3])?;
    let f = pmap(|a: &[Tensor]| {
        let x = &a[0];
        vec![
            psum(&(x * 1000.0).cast(DType::I32), "i"),
            pmax(x, "i"),
            pmin(x, "i"),
            psum(x, "i"),
        ]
    })
    .axis_name("i")
    .devices(devices);
    let mut lines = Vec::new();
    for (name, out) in ["psum_i32", "pmax", "pmin", "psum"]
        .iter()
        .zip(f.call(&[x])?)
    {
        for (d, s) in out.shards().expect("sharded").iter().enumerate() {
            let h = s.to_host()?;
            lines.push(format!(
                "{name} {} {:016x}",
                offset + d,
                fingerprint(&h.data.to_bytes())
            ));
        }
    }
    Ok(lines)
}

/// One line per shard of `a` (global device `offset + d` for shard `d`): `name g fingerprint`.
fn shard_lines(lines: &mut Vec<String>, name: &str, offset: usize, a: &Array) -> Result<()> {
    for (d, s) in a.shards().expect("sharded").iter().enumerate() {
        lines.push(format!(
            "{name} {} {:016x}",
            offset + d,
            fingerprint(&s.to_host()?.data.to_bytes())
        ));
    }
    Ok(())
}

/// Arrays spanning processes: this process's part of a stacked `[total, 4, 3]` array and of a
/// `[4 * total, 3]` array in blocks, made global with `Array::from_process_local` when `spanning`
/// (else `devices` are all the devices and the arrays are built whole, the one-process
/// reference), fed to a pmap and a split shard_map, and gathered whole with
/// `process_allgather`. Lines as in [`collectives`].
fn global_arrays(
    devices: &[Device],
    offset: usize,
    total: usize,
    spanning: bool,
) -> Result<Vec<String>> {
    use brigade::ShardLayout;
    let n = devices.len();
    let stacked: Vec<f32> = (offset..offset + n)
        .flat_map(|g| data(12, 200 + g))
        .collect();
    let blocks: Vec<f32> = (offset..offset + n)
        .flat_map(|g| data(12, 300 + g))
        .collect();
    let (x, xb) = (
        Array::from_vec(stacked, &[n, 4, 3])?,
        Array::from_vec(blocks, &[4 * n, 3])?,
    );
    let mut lines = Vec::new();
    let check = |ok: bool, what: String| {
        if !ok {
            fail(brigade::Error::ProcessFailure {
                op: "global_arrays test",
                detail: what,
            })
        }
    };
    let (x, xb) = if spanning {
        let x = Array::from_process_local(&x, &ShardLayout::Stacked { axis: 0 })?;
        let xb = Array::from_process_local(&xb, &ShardLayout::Blocks { axis: 0 })?;
        check(
            x.shape() == [total, 4, 3] && xb.shape() == [4 * total, 3],
            format!("global shapes {:?} {:?}", x.shape(), xb.shape()),
        );
        check(
            !x.is_fully_addressable() && !xb.is_fully_addressable(),
            "the arrays span processes".into(),
        );
        // Reading whole is a typed error naming the fix; the addressable shards are this
        // process's devices' data.
        match x.to_vec::<f32>() {
            Err(e @ brigade::Error::NotFullyAddressable { .. }) => check(
                e.to_string().contains("process_allgather"),
                format!("the error names the fix: {e}"),
            ),
            other => check(false, format!("reading whole: {other:?}")),
        }
        let shards = x.shards().expect("sharded");
        check(shards.len() == n, format!("{} shards", shards.len()));
        for (d, s) in shards.iter().enumerate() {
            let got = s.to_vec::<f32>()?;
            check(
                got == data(12, 200 + offset + d),
                format!("shard {d} holds another device's data: {got:?}"),
            );
        }
        (x, xb)
    } else {
        (x, xb)
    };
    let f = pmap(|a: &[Tensor]| vec![psum(&a[0], "i"), all_gather(&(&a[0] * 2.0), "i", 0, false)])
        .axis_name("i")
        .devices(devices);
    let outs = f.call(std::slice::from_ref(&x))?;
    for (name, out) in ["g_psum", "g_all_gather"].iter().zip(&outs) {
        shard_lines(&mut lines, name, offset, out)?;
    }
    // pmap's outputs across processes are global arrays: every process's devices' entries,
    // this process holding its own; reading whole is the typed error; gathered whole they are
    // the one-process value; fed to the next pmap as they are.
    if spanning {
        let out = &outs[0];
        check(
            out.shape() == [total, 4, 3] && !out.is_fully_addressable(),
            format!(
                "pmap output global: shape {:?}, fully addressable {}",
                out.shape(),
                out.is_fully_addressable()
            ),
        );
        check(
            out.process_local().shape() == [n, 4, 3],
            format!("process_local shape {:?}", out.process_local().shape()),
        );
        check(
            matches!(
                out.to_vec::<f32>(),
                Err(brigade::Error::NotFullyAddressable { .. })
            ),
            "reading a pmap output whole is NotFullyAddressable".into(),
        );
    }
    for (name, a) in [("g_psum_whole", &outs[0]), ("g_all_gather_whole", &outs[1])] {
        let whole = brigade::distributed::process_allgather(a)?.to_host()?;
        lines.push(format!(
            "{name} * {:016x}",
            fingerprint(&whole.data.to_bytes())
        ));
    }
    let again = pmap(|a: &[Tensor]| vec![psum(&(&a[0] * 0.5), "i")])
        .axis_name("i")
        .devices(devices)
        .call(std::slice::from_ref(&outs[0]))?
        .remove(0);
    shard_lines(&mut lines, "g_again", offset, &again)?;
    let s = shard_map(|a: &[Tensor]| vec![psum(&a[0].sum(0i64, false), "s")])
        .axis_name("s")
        .out_axes(&[None])
        .devices(devices);
    let sum = s.call(std::slice::from_ref(&xb))?.remove(0).to_host()?;
    lines.push(format!(
        "g_blocks_psum * {:016x}",
        fingerprint(&sum.data.to_bytes())
    ));
    // Arguments laid out otherwise than the call maps them are resharded (gathered over MPI,
    // then each process takes its part): the stacked `x` cut into blocks by a split shard_map,
    // `xb` broadcast whole to a pmap that does not map it, `x` placed over a mesh of every
    // device that cuts its second axis, and that array fed to a mesh call cutting the first.
    let sum_s = s.call(std::slice::from_ref(&x))?.remove(0).to_host()?;
    lines.push(format!(
        "g_reshard_split * {:016x}",
        fingerprint(&sum_s.data.to_bytes())
    ));
    let bcast = pmap(|a: &[Tensor]| vec![&a[0] * &a[1].sum(0i64, false)])
        .axis_name("i")
        .in_axes(&[Some(0), None])
        .devices(devices)
        .call(&[x.clone(), xb.clone()])?
        .remove(0);
    let mesh = match spanning {
        true => Mesh::new_global(&[("data", total)])?,
        false => Mesh::new(devices, &[("data", total)])?,
    };
    let cut = NamedSharding::new(&mesh, P![None, "data"])?;
    let y = x.to_sharding(&cut)?;
    shard_lines(&mut lines, "g_reshard_bcast", offset, &bcast)?;
    shard_lines(&mut lines, "g_reshard_mesh", offset, &y)?;
    let rows = shard_map(|a: &[Tensor]| vec![psum(&a[0].sum(0i64, false), "data")])
        .mesh(&mesh)
        .in_specs(&[P!["data"]])
        .out_specs(&[P![]])
        .call(std::slice::from_ref(&y))?
        .remove(0)
        .to_host()?;
    lines.push(format!(
        "g_reshard_mesh_sum * {:016x}",
        fingerprint(&rows.data.to_bytes())
    ));
    // That array (blocks over the mesh) fed to a pmap mapping its first axis.
    let tripled = pmap(|a: &[Tensor]| vec![psum(&(&a[0] * 3.0), "i")])
        .axis_name("i")
        .devices(devices)
        .call(std::slice::from_ref(&y))?
        .remove(0);
    shard_lines(&mut lines, "g_reshard_named", offset, &tripled)?;
    if spanning {
        // The sharding of a one-axis global array spans every process's devices.
        for (name, a, block) in [
            ("x", &x, vec![1, 4, 3]),
            ("xb", &xb, vec![4, 3]),
            ("pmap output", &outs[0], vec![1, 4, 3]),
        ] {
            let sh = a.sharding().expect("a sharded array has a sharding");
            check(
                sh.mesh().size() == total
                    && sh.mesh().is_spanning()
                    && sh.mesh().devices().len() == n
                    && sh.shard_shape(a.shape())? == block,
                format!(
                    "{name}: sharding over {} devices (spanning {}), blocks {:?}",
                    sh.mesh().size(),
                    sh.mesh().is_spanning(),
                    sh.shard_shape(a.shape())
                ),
            );
        }
        check(
            y.sharding().is_some_and(|s| s == cut) && !y.is_fully_addressable(),
            "the resharded array has the sharding it was given".into(),
        );
        // A spanning argument whose mapped axis does not split over the processes: the typed
        // error on every process, before any exchange.
        let odd = Array::from_vec(data(3 * total, 400), &[3, total])?.to_sharding(&cut)?;
        let per_device = pmap(|a: &[Tensor]| vec![&a[0] * 2.0])
            .axis_name("i")
            .devices(devices)
            .call(std::slice::from_ref(&odd));
        match per_device {
            Err(e @ brigade::Error::BadParallelArg { .. }) => check(
                e.to_string()
                    .contains("3 entries do not split evenly over 2 processes"),
                format!("the error names the sizes: {e}"),
            ),
            other => check(false, format!("an uneven reshard: {other:?}")),
        }
    }
    // The whole values, on every process.
    for (name, a) in [("g_whole", &x), ("g_blocks_whole", &xb)] {
        let whole = brigade::distributed::process_allgather(a)?.to_host()?;
        lines.push(format!(
            "{name} * {:016x}",
            fingerprint(&whole.data.to_bytes())
        ));
    }
    Ok(lines)
}

/// The global `[4 * data, 3 * model]` input of [`mesh_program`] (the same on every process).
fn mesh_input(data_size: usize, model_size: usize) -> Result<Array> {
    let (rows, cols) = (4 * data_size, 3 * model_size);
    Array::from_vec(data(rows * cols, 500), &[rows, cols])
}

/// `shard_map` over `mesh`, a `("data", D) × ("model", M)` grid: a mesh spanning the processes
/// when `spanning` (made with `Mesh::new_global`, "data" crossing the processes and "model"
/// within each), else one process holding every device (the reference). This process's devices
/// are grid positions `offset..`. Collectives over "data", over "model" and over both; each
/// output's shards (one line per grid position), its whole value (`process_allgather`), and a
/// second `shard_map` fed the outputs as they are. In the spanning run it also checks what is
/// global: shapes, `is_fully_addressable`, `process_local` and the typed errors of bad input.
fn mesh_program(mesh: &Mesh, offset: usize, spanning: bool) -> Result<Vec<String>> {
    let check = |ok: bool, what: String| {
        if !ok {
            fail(brigade::Error::ProcessFailure {
                op: "mesh test",
                detail: what,
            })
        }
    };
    let (dn, mn) = (
        mesh.axis_size("data").expect("data axis"),
        mesh.axis_size("model").expect("model axis"),
    );
    let whole = mesh_input(dn, mn)?;
    let (rows, cols) = (4 * dn, 3 * mn);
    let s = NamedSharding::new(mesh, P!["data", "model"])?;
    let x = if spanning {
        // This process is data = p: its part is row block p, every column.
        let p = brigade::distributed::process_index();
        let h = whole.to_vec::<f32>()?;
        let mine = h[p * 4 * cols..(p + 1) * 4 * cols].to_vec();
        let x = Array::from_process_local(&Array::from_vec(mine, &[4, cols])?, &s)?;
        check(
            x.shape() == [rows, cols] && !x.is_fully_addressable(),
            format!(
                "from_process_local: global shape {:?}, fully addressable {}",
                x.shape(),
                x.is_fully_addressable()
            ),
        );
        // device_put of the whole value places the same blocks on this process's devices.
        let y = device_put(&whole, &s)?;
        let (xs, ys) = (x.shards().expect("sharded"), y.shards().expect("sharded"));
        check(
            xs.len() == mesh.devices().len() && ys.len() == xs.len(),
            format!("{} and {} shards", xs.len(), ys.len()),
        );
        for (a, b) in xs.iter().zip(ys) {
            check(
                a.to_vec::<f32>()? == b.to_vec::<f32>()?,
                "from_process_local and device_put place the same blocks".into(),
            );
        }
        bad_mesh_input(mesh, &s, cols)?;
        x
    } else {
        device_put(&whole, &s)?
    };
    let ring: Vec<(usize, usize)> = (0..dn).map(|k| (k, (k + 1) % dn)).collect();
    let names = [
        "m_psum_data",
        "m_psum_model",
        "m_psum_both",
        "m_gather_model",
        "m_gather_data",
        "m_ppermute_data",
        "m_pmax_data",
        "m_index",
    ];
    let specs: Vec<PartitionSpec> = vec![
        P![None, "model"],
        P!["data", None],
        P![],
        P!["data", None],
        P![None, "model"],
        P!["data", "model"],
        P![None, "model"],
        P!["data", "model"],
    ];
    let f = shard_map(move |a: &[Tensor]| {
        let x = &a[0];
        let idx = (&(&axis_index("data") * 10) + &axis_index("model")).cast(DType::F32);
        vec![
            psum(x, "data"),
            psum(x, "model"),
            psum_axes(x, &["data", "model"]),
            all_gather(x, "model", 1, true),
            all_gather(x, "data", 0, true),
            ppermute(x, "data", &ring),
            pmax(x, "data"),
            &(x * 2.0) + &idx,
        ]
    })
    .mesh(mesh)
    .in_specs(&[P!["data", "model"]])
    .out_specs(&specs);
    let outs = f.call(std::slice::from_ref(&x))?;
    let mut lines = Vec::new();
    for ((name, out), spec) in names.iter().zip(&outs).zip(&specs) {
        for (d, sh) in out.shards().expect("sharded").iter().enumerate() {
            lines.push(format!(
                "{name} {} {:016x}",
                offset + d,
                fingerprint(&sh.to_host()?.data.to_bytes())
            ));
        }
        let all = brigade::distributed::process_allgather(out)?.to_host()?;
        lines.push(format!(
            "{name}_whole * {:016x}",
            fingerprint(&all.data.to_bytes())
        ));
        if spanning {
            // Blocks along "data" are other processes'; values whole along it are read here.
            let crosses = spec.named_axes().contains(&"data") && dn > 1;
            check(
                out.is_fully_addressable() != crosses,
                format!(
                    "{name} ({spec}): fully addressable {}",
                    out.is_fully_addressable()
                ),
            );
            check(
                out.shape() == all.shape.as_slice(),
                format!("{name}: global shape {:?} vs {:?}", out.shape(), all.shape),
            );
            if crosses {
                check(
                    matches!(
                        out.to_vec::<f32>(),
                        Err(brigade::Error::NotFullyAddressable { .. })
                    ),
                    format!("{name}: reading whole is NotFullyAddressable"),
                );
                let part = out.process_local();
                let mut want = out.shape().to_vec();
                want[0] /= dn;
                check(
                    part.shape() == want.as_slice() && part.is_fully_addressable(),
                    format!("{name}: process_local shape {:?}", part.shape()),
                );
            } else {
                check(
                    out.to_host()?.data.to_bytes() == all.data.to_bytes(),
                    format!("{name}: read here equals the gathered value"),
                );
            }
        }
    }
    // Outputs fed on as they are: psum over "data" of the blocks, and a chained sum over "model".
    let g =
        shard_map(|a: &[Tensor]| vec![psum(&(&a[0] * 3.0), "data"), psum(&(&a[1] - 1.0), "model")])
            .mesh(mesh)
            .in_specs(&[P!["data", "model"], P!["data", None]])
            .out_specs(&[P![None, "model"], P!["data", None]]);
    let next = g.call(&[outs[7].clone(), outs[1].clone()])?;
    for (name, out) in ["m_next_data", "m_next_model"].iter().zip(&next) {
        for (d, sh) in out.shards().expect("sharded").iter().enumerate() {
            lines.push(format!(
                "{name} {} {:016x}",
                offset + d,
                fingerprint(&sh.to_host()?.data.to_bytes())
            ));
        }
        let all = brigade::distributed::process_allgather(out)?.to_host()?;
        lines.push(format!(
            "{name}_whole * {:016x}",
            fingerprint(&all.data.to_bytes())
        ));
    }
    Ok(lines)
}

/// Bad input over a spanning mesh: typed errors naming the sizes (the spanning run only).
fn bad_mesh_input(mesh: &Mesh, s: &NamedSharding, cols: usize) -> Result<()> {
    let expect = |what: &str, r: std::result::Result<String, String>, words: &[&str]| match r {
        Err(msg) if words.iter().all(|w| msg.contains(w)) => {}
        other => fail(brigade::Error::ProcessFailure {
            op: "mesh bad input",
            detail: format!("{what}: want an error naming {words:?}, got {other:?}"),
        }),
    };
    let global = brigade::distributed::devices()?.len();
    let three = Mesh::new_global(&[("data", 3)])
        .map(|m| m.to_string())
        .map_err(|e| e.to_string());
    expect(
        "a mesh of 3 over the global devices",
        three,
        &[
            "Mesh::from_global",
            "multiply to 3",
            &format!("{global} global devices"),
        ],
    );
    let mut reversed = brigade::distributed::devices()?;
    reversed.reverse();
    let shuffled = Mesh::from_global(&reversed, &[("data", global)])
        .map(|m| m.to_string())
        .map_err(|e| e.to_string());
    expect("a list not process-major", shuffled, &["process-major"]);
    let unknown = NamedSharding::new(mesh, P!["rows", None])
        .map(|n| n.to_string())
        .map_err(|e| e.to_string());
    expect(
        "a spec naming an unknown axis",
        unknown,
        &["'rows'", "'data'", "'model'"],
    );
    let unknown_in = shard_map(|a: &[Tensor]| vec![a[0].clone()])
        .mesh(mesh)
        .in_specs(&[P!["batch"]])
        .out_specs(&[P!["batch"]])
        .call(&[Array::from_vec(data(4 * cols, 9), &[4, cols])?])
        .map(|o| format!("{o:?}"))
        .map_err(|e| e.to_string());
    expect(
        "shard_map in_specs naming an unknown axis",
        unknown_in,
        &["'batch'"],
    );
    // With several devices here, 5 columns do not split over the local "model" axis of 2 (a
    // process of one device takes any local shape: its block is the whole part).
    if mesh.devices().len() > 1 {
        let odd = Array::from_vec(data(4 * 5, 8), &[4, 5])?;
        let wrong = Array::from_process_local(&odd, s)
            .map(|a| format!("{:?}", a.shape()))
            .map_err(|e| e.to_string());
        expect(
            "local data of the wrong shape",
            wrong,
            &[
                "Array::from_process_local",
                "local data (shape [4, 5]",
                "has 5 entries",
                "pad it to 6",
            ],
        );
    }
    Ok(())
}

/// Report `e` for the launching test and leave at once (after a failed exchange MPI cannot
/// finalize).
fn fail(e: brigade::Error) -> ! {
    println!(
        "ERROR process {}: {e}",
        brigade::distributed::process_index()
    );
    std::process::exit(3);
}

/// The worker, under `mpirun`: runs the task named by [`WORKER`] and prints `LINE ...` per result
/// and `ERROR process p: ...` for an error (then exits with status 3 without finalizing).
#[test]
fn worker() {
    let Ok(task) = std::env::var(WORKER) else {
        return;
    };
    brigade::distributed::initialize().unwrap_or_else(|e| fail(e));
    let p = brigade::distributed::process_index();
    let count = brigade::distributed::process_count();
    let devices = brigade::distributed::local_devices().unwrap_or_else(|e| fail(e));
    let global = brigade::distributed::devices().unwrap_or_else(|e| fail(e));
    let n = devices.len();
    // The global list is process-major and only this process's devices are addressable.
    assert_eq!(global.len(), n * count, "global device list");
    for g in &global {
        assert_eq!(g.process_index, g.id / n, "process-major order");
        assert_eq!(g.is_addressable(), g.process_index == p);
        if !g.is_addressable() {
            assert!(matches!(
                g.device(),
                Err(brigade::Error::NotAddressable { .. })
            ));
        }
    }
    let wide = task == "diverge" && p == count - 1;
    if task == "stall" && p == count - 1 {
        // Never reaches the exchange (mpirun ends this process once the others fail).
        println!("STALLED process {p}");
        std::thread::sleep(STALL);
        brigade::distributed::shutdown();
        return;
    }
    let before = brigade::distributed::counters();
    let lines = match task.as_str() {
        "fast" => {
            brigade::distributed::set_fast(true);
            all_reduces(&devices, p * n)
        }
        "global" => global_arrays(&devices, p * n, count * n, true),
        "mesh" => Mesh::new_global(&[("data", count), ("model", n)])
            .and_then(|m| mesh_program(&m, p * n, true)),
        _ => collectives(&devices, p * n, count * n, wide),
    }
    .unwrap_or_else(|e| fail(e));
    for l in lines {
        println!("LINE {l}");
    }
    let work = brigade::distributed::counters().since(&before);
    println!(
        "COUNTS process {p} gathered {} all_reduced {}",
        work.gathered, work.all_reduced
    );
    brigade::distributed::shutdown();
}

/// Per process, `(gathered, all_reduced)` from the worker's `COUNTS` lines.
fn counts(stdout: &str) -> Vec<(u64, u64)> {
    stdout
        .lines()
        .filter_map(|l| {
            let w: Vec<&str> = l[l.find("COUNTS ")?..].split(' ').collect();
            Some((w.get(4)?.parse().ok()?, w.get(6)?.parse().ok()?))
        })
        .collect()
}

// ---- launching ---------------------------------------------------------------------------------

/// What one `mpirun` printed, and how it ended.
struct Run {
    stdout: String,
    stderr: String,
    success: bool,
    took: Duration,
}

/// `mpirun -n procs program args` with `env`, killed (its whole process group) after [`LIMIT`]:
/// a run that does not end in time fails the test.
fn mpirun(procs: usize, program: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Run {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new("mpirun");
    cmd.args(["-n", &procs.to_string(), "--oversubscribe"])
        .arg(program)
        .args(args)
        // As root in a container (CI): allowed explicitly; no single-copy mechanism there.
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let t0 = Instant::now();
    let mut child = cmd
        .spawn()
        .expect("mpirun not found: install Open MPI (apt-get install openmpi-bin libopenmpi-dev)");
    let out = child.stdout.take().expect("piped");
    let err = child.stderr.take().expect("piped");
    let read = |mut r: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let (out, err) = (read(Box::new(out)), read(Box::new(err)));
    let status = loop {
        if let Some(s) = child.try_wait().expect("waiting for mpirun") {
            break s;
        }
        if t0.elapsed() > LIMIT {
            // `--`: without it `kill` reads `-PGID` as an option and kills nothing.
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", child.id())])
                .status();
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "mpirun -n {procs} {} did not end within {} s (killed): a hang\nstdout:\n{}\nstderr:\n{}",
                program.display(),
                LIMIT.as_secs(),
                out.join().unwrap_or_default(),
                err.join().unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        success: status.success(),
        took: t0.elapsed(),
    }
}

/// This test binary under `mpirun`, running `task` with `layout` as each process's devices.
fn run_workers(procs: usize, layout: &str, task: &str, timeout_s: &str) -> Run {
    let me = std::env::current_exe().expect("test binary path");
    let run = mpirun(
        procs,
        &me,
        &["--exact", "worker", "--nocapture", "--test-threads=1"],
        &[
            (WORKER, task),
            ("BRIGADE_DEVICES", layout),
            ("BRIGADE_MPI_TIMEOUT", timeout_s),
        ],
    );
    eprintln!(
        "mpirun -n {procs} ({layout} each, {task}): {:.1} s",
        run.took.as_secs_f64()
    );
    run
}

/// The one-process result of [`collectives`] on `layout` (all the devices in this process).
fn reference(layout: &str) -> BTreeSet<String> {
    let rt = pollster::block_on(
        Runtime::builder()
            .layout_str(layout)
            .allow_cpu_fallback(false)
            .build(),
    )
    .unwrap_or_else(|e| panic!("devices {layout}: {e}"));
    let devs = rt.devices().to_vec();
    collectives(&devs, 0, devs.len(), false)
        .unwrap_or_else(|e| panic!("one process on {layout}: {e}"))
        .into_iter()
        .collect()
}

/// `procs` processes with `layout` each give exactly the lines of one process on `one`.
fn check_collectives(procs: usize, layout: &str, one: &str) {
    let want = reference(one);
    let run = run_workers(procs, layout, "collectives", "60");
    assert!(
        run.success,
        "mpirun -n {procs} ({layout} each) failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let got: BTreeSet<String> = run
        .stdout
        .lines()
        // The harness's `test worker ... ` may stand before the first line, unterminated.
        .filter_map(|l| l.split_once("LINE ").map(|(_, r)| r.to_string()))
        .collect();
    let missing: Vec<&String> = want.difference(&got).collect();
    let extra: Vec<&String> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{procs} processes × {layout} differ from one process on {one}:\nmissing (one-process lines): {missing:#?}\nextra (multi-process lines): {extra:#?}\nstdout:\n{}",
        run.stdout
    );
    // The default mode combined every exchange by gathering, never by MPI_Allreduce.
    let c = counts(&run.stdout);
    assert!(
        c.len() == procs && c.iter().all(|&(g, r)| g >= 2 && r == 0),
        "every process gathers (pmap and shard_map: 2 exchanges at least) and never all-reduces: {c:?}\n{}",
        run.stdout
    );
    // A line per result and device (12 results × devices) plus the shard_map line: every
    // process contributed.
    let devices: usize = want.iter().filter(|l| l.starts_with("psum ")).count();
    assert_eq!(want.len(), 12 * devices + 1, "reference lines");
}

#[test]
fn collectives_cpu_2_processes() {
    check_collectives(2, "cpu:2", "cpu:4");
}

#[test]
fn collectives_cpu_4_processes() {
    check_collectives(4, "cpu:1", "cpu:4");
}

#[test]
fn collectives_vulkan_2_processes() {
    check_collectives(2, "vulkan:1", "vulkan:2");
}

#[test]
fn collectives_vulkan_4_processes() {
    check_collectives(4, "vulkan:1", "vulkan:4");
}

/// Fast mode (MPI_Allreduce): integer sums, max and min are exact whatever MPI's order, so they
/// equal the one-process bits; the float sum is only promised equal on every process.
#[test]
fn fast_mode_all_reduces() {
    let rt = pollster::block_on(Runtime::builder().layout_str("cpu:4").build()).expect("cpu:4");
    let want: BTreeSet<String> = all_reduces(rt.devices(), 0)
        .expect("one process")
        .into_iter()
        .collect();
    let run = run_workers(4, "cpu:1", "fast", "60");
    assert!(
        run.success,
        "fast mode failed\n{}\n{}",
        run.stdout, run.stderr
    );
    let got: BTreeSet<String> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once("LINE ").map(|(_, r)| r.to_string()))
        .collect();
    let exact = |l: &&String| !l.starts_with("psum ");
    let (w, g): (BTreeSet<_>, BTreeSet<_>) = (
        want.iter().filter(exact).collect(),
        got.iter().filter(exact).collect(),
    );
    assert_eq!(w, g, "exact all-reduces in fast mode\n{}", run.stdout);
    // The fast path really ran: 4 collectives, each one MPI_Allreduce, and no gathered exchange.
    let c = counts(&run.stdout);
    assert_eq!(
        c,
        vec![(0, 4); 4],
        "per process (gathered, all_reduced) in fast mode\n{}",
        run.stdout
    );
    let sums: BTreeSet<&str> = got
        .iter()
        .filter(|l| l.starts_with("psum "))
        .map(|l| l.rsplit(' ').next().unwrap_or(""))
        .collect();
    let n_sums = got.iter().filter(|l| l.starts_with("psum ")).count();
    assert!(
        n_sums == 4 && sums.len() == 1,
        "the float sum is one value on all 4 devices: {sums:?}\n{}",
        run.stdout
    );
}

/// The last process traces a wider operand: every process fails with the divergence error,
/// naming the shapes, well within the timeout.
#[test]
fn divergence_is_an_error_on_every_process() {
    let run = run_workers(2, "cpu:1", "diverge", "60");
    assert!(!run.success, "a divergent run must fail\n{}", run.stdout);
    let errors: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.find("ERROR process").map(|i| &l[i..]))
        .collect();
    assert_eq!(errors.len(), 2, "one error per process:\n{}", run.stdout);
    for e in &errors {
        assert!(
            e.contains("processes diverged at exchange #1")
                && e.contains("[4, 3]")
                && e.contains("[4, 4]"),
            "the error names the exchange and both shapes: {e}"
        );
    }
    assert!(
        run.took < Duration::from_secs(50),
        "divergence is found at once, not by the 60 s timeout ({:.1} s)",
        run.took.as_secs_f64()
    );
}

/// How long the stalled process of [`stalled_process_fails_the_others_within_the_timeout`] waits.
const STALL: Duration = Duration::from_secs(120);

/// The last process never reaches the first exchange: the others fail after the timeout with a
/// message that says so, and mpirun then ends the job (well before the stalled process would
/// have gone on).
///
/// The process stalls rather than exits: one that calls `MPI_Finalize` while the job aborts
/// makes Open MPI 4.1's `mpirun` crash or hang in its own teardown (`PMIx_server_finalize`) in
/// about 1 run of 20 here, after every worker has ended as it should.
#[test]
fn stalled_process_fails_the_others_within_the_timeout() {
    let run = run_workers(3, "cpu:1", "stall", "3");
    assert!(
        !run.success,
        "a run with a stalled process must fail\n{}",
        run.stdout
    );
    assert!(run.stdout.contains("STALLED process 2"), "{}", run.stdout);
    assert!(
        run.took < STALL / 2,
        "the job ends once the others fail, not when the stalled process goes on ({:.1} s)",
        run.took.as_secs_f64()
    );
    let errors: Vec<&str> = run
        .stdout
        .lines()
        .filter_map(|l| l.find("ERROR process").map(|i| &l[i..]))
        .collect();
    assert!(
        !errors.is_empty() && errors.iter().all(|e| e.contains("waited 3.0 s")),
        "the waiting processes report the timeout:\n{}\nstderr:\n{}",
        run.stdout,
        run.stderr
    );
}

/// `Array::from_process_local` over 2 processes × 2 cpu devices: the addressable shards hold
/// this process's data, reading whole is a typed error, and pmap, split shard_map and
/// `process_allgather` give the bits of one process holding the whole arrays on `cpu:4`.
#[test]
fn process_local_arrays_match_one_process() {
    let rt = pollster::block_on(Runtime::builder().layout_str("cpu:4").build()).expect("cpu:4");
    let want: BTreeSet<String> = global_arrays(rt.devices(), 0, 4, false)
        .expect("one process")
        .into_iter()
        .collect();
    // Per device: psum, all_gather, the chained psum and three resharded values; the block sum,
    // two sums of resharded arguments and four whole values.
    assert_eq!(want.len(), 6 * 4 + 7, "reference lines: {want:#?}");
    let run = run_workers(2, "cpu:2", "global", "60");
    assert!(
        run.success,
        "mpirun -n 2 (global arrays) failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let got: BTreeSet<String> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once("LINE ").map(|(_, r)| r.to_string()))
        .collect();
    assert_eq!(
        got, want,
        "2 processes × cpu:2 vs one process on cpu:4\n{}",
        run.stdout
    );
}

/// `shard_map` over a mesh spanning `procs` processes × `layout` (`("data", procs) × ("model",
/// devices per process)`) gives exactly the lines of one process holding every device (`one`)
/// on the same mesh shape.
fn check_mesh(procs: usize, layout: &str, one: &str) {
    let rt = pollster::block_on(
        Runtime::builder()
            .layout_str(one)
            .allow_cpu_fallback(false)
            .build(),
    )
    .unwrap_or_else(|e| panic!("devices {one}: {e}"));
    let devs = rt.devices().to_vec();
    let model = devs.len() / procs;
    let mesh = Mesh::new(&devs, &[("data", procs), ("model", model)]).expect("reference mesh");
    let want: BTreeSet<String> = mesh_program(&mesh, 0, false)
        .unwrap_or_else(|e| panic!("one process on {one}: {e}"))
        .into_iter()
        .collect();
    // Per output: a line per device and its whole value (8 + 2 outputs).
    assert_eq!(want.len(), 10 * (devs.len() + 1), "reference lines");
    let run = run_workers(procs, layout, "mesh", "60");
    assert!(
        run.success,
        "mpirun -n {procs} ({layout} each, spanning mesh) failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let got: BTreeSet<String> = run
        .stdout
        .lines()
        .filter_map(|l| l.split_once("LINE ").map(|(_, r)| r.to_string()))
        .collect();
    let missing: Vec<&String> = want.difference(&got).collect();
    let extra: Vec<&String> = got.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "spanning mesh, {procs} processes × {layout}, differs from one process on {one}:\nmissing: {missing:#?}\nextra: {extra:#?}\nstdout:\n{}",
        run.stdout
    );
}

/// A 2 × 2 mesh over 2 processes × 2 cpu devices: "data" crosses the processes, "model" stays
/// within each.
#[test]
fn spanning_mesh_cpu_2x2() {
    check_mesh(2, "cpu:2", "cpu:4");
}

/// A 2 × 1 mesh over 2 processes × 1 lavapipe device each.
#[test]
fn spanning_mesh_vulkan_2x1() {
    check_mesh(2, "vulkan:1", "vulkan:2");
}

// ---- the example -------------------------------------------------------------------------------

/// The example binary `name`, built beside this test binary (`cargo build --features mpi
/// --example NAME`; scripts/test.sh builds them).
fn example(name: &str) -> PathBuf {
    let me = std::env::current_exe().expect("test binary path");
    let dir = me.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join("examples").join(name);
    assert!(
        path.exists(),
        "{} is missing: build it first with `cargo build --features mpi --example {name}`",
        path.display()
    );
    path
}

/// The `PARAMS <fingerprint>` lines an example run printed.
fn params(stdout: &str) -> Vec<String> {
    stdout
        .lines()
        .filter_map(|l| l.split_once("PARAMS ").map(|(_, h)| h.to_string()))
        .collect()
}

#[test]
fn multihost_training_matches_one_process() {
    let exe = example("multihost_training");
    let one = Command::new(&exe)
        .args(["--quick", "--single"])
        .env("BRIGADE_DEVICES", "cpu:4")
        .output()
        .expect("run the example");
    let one_out = String::from_utf8_lossy(&one.stdout).to_string();
    assert!(one.status.success(), "one process failed:\n{one_out}");
    let want = params(&one_out);
    assert_eq!(want.len(), 1, "{one_out}");
    let run = mpirun(4, &exe, &["--quick"], &[("BRIGADE_DEVICES", "cpu:1")]);
    assert!(
        run.success,
        "mpirun -n 4 multihost_training failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let got = params(&run.stdout);
    assert_eq!(got.len(), 4, "one PARAMS line per process:\n{}", run.stdout);
    assert!(
        got.iter().all(|h| *h == want[0]),
        "parameters differ from the one-process run {}: {got:?}",
        want[0]
    );
}

/// The benchmark's quick run over 2 processes completes, and every ratio it reports (brigade's
/// time over the bare MPI call; the training step's communication share) is finite and positive.
#[test]
fn mpi_bench_quick_run() {
    let run = mpirun(
        2,
        &example("mpi_bench"),
        &["--quick"],
        &[("BRIGADE_DEVICES", "cpu:1")],
    );
    assert!(
        run.success,
        "mpirun -n 2 mpi_bench --quick failed\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
    let ratios: Vec<(String, f64)> = run
        .stdout
        .lines()
        .filter_map(|l| {
            let mut w = l.strip_prefix("RATIO ")?.split(' ');
            Some((w.next()?.to_string(), w.next()?.parse().ok()?))
        })
        .collect();
    // psum, psum fast and all_gather at 1 KiB, 64 KiB and 1 MiB, and the step's share.
    assert_eq!(ratios.len(), 10, "ratios printed:\n{}", run.stdout);
    assert!(
        ratios.iter().all(|(_, r)| r.is_finite() && *r > 0.0),
        "every ratio finite and positive: {ratios:?}"
    );
    eprintln!("mpi_bench --quick: {:.1} s", run.took.as_secs_f64());
}
