#![doc = include_str!("../README.md")]
// Shared state is `Arc`ed so that native builds can move it between threads. On wasm, wgpu's
// handles are neither `Send` nor `Sync` and there is one thread, so the `Arc`s are only shared
// ownership there; `Rc` on one target and `Arc` on the other would split every such type in two.
#![cfg_attr(target_arch = "wasm32", allow(clippy::arc_with_non_send_sync))]

// The compiler's insides (`cpu`, `lower`, `ops`, `trace`, `wgsl`) stay reachable for the tests,
// benches and the demo page's crate (`web/`), but are not the documented API: what a user needs of
// them is re-exported below.
pub mod array;
mod cache;
pub mod collective;
pub mod counters;
#[doc(hidden)]
pub mod cpu;
pub mod debug;
pub mod device;
#[cfg(feature = "mpi")]
pub mod distributed;
pub mod dtype;
pub mod error;
mod exec;
pub mod host;
mod host_copy;
#[doc(hidden)]
pub mod lower;
pub mod mesh;
pub mod nn;
pub mod numpy;
#[doc(hidden)]
pub mod ops;
pub mod optim;
pub mod plan;
mod print;
pub mod random;
pub mod reference;
pub mod tensor;
#[doc(hidden)]
pub mod trace;
pub mod transform;
#[doc(hidden)]
pub mod wgsl;

/// The user's guide, a page per topic: the same pages as `docs/guide/` in the repository, here so
/// that their examples are compiled and run as doctests.
pub mod guide {
    #[doc = include_str!("../docs/guide/transforms.md")]
    pub mod transforms {}
    #[doc = include_str!("../docs/guide/sharding.md")]
    pub mod sharding {}
    #[doc = include_str!("../docs/guide/devices.md")]
    pub mod devices {}
    #[doc = include_str!("../docs/guide/numerics.md")]
    pub mod numerics {}
    #[doc = include_str!("../docs/guide/embedding.md")]
    pub mod embedding {}
    #[doc = include_str!("../docs/guide/many_hosts.md")]
    pub mod many_hosts {}
    #[doc = include_str!("../docs/guide/browser.md")]
    pub mod browser {}
    #[doc = include_str!("../docs/guide/internals.md")]
    pub mod internals {}
}

pub use array::{Array, BufferView, ShardLayout};
pub use collective::{
    all_gather, all_to_all, axis_index, axis_size, pmax, pmax_axes, pmean, pmean_axes, pmin,
    pmin_axes, ppermute, psum, psum_axes, psum_scatter,
};
pub use counters::{Counters, counters};
pub use debug::{capture_debug_prints, debug_print};
pub use device::{Device, DeviceInfo, DeviceLimits, Runtime, init};
pub use dtype::{DType, Scalar};
pub use error::{Error, ErrorKind, Result};
pub use host::{Element, HostArray, HostData};
pub use mesh::{Mesh, NamedSharding, PartitionSpec, SpecEntry};
pub use ops::conv::{ConvOptions, Padding};
pub use ops::{Window, WindowOp};
pub use plan::{MemoryAnalysis, Plan, plan};
pub use tensor::{Axes, TakeMode, Tensor, select};
pub use trace::graph::{Aval, Graph, Var};
pub use transform::control::{
    Branch, ScanOptions, cond, fori_loop, scan, scan_with, switch, while_loop,
};
pub use transform::grad::{Grad, Vjp, grad, stop_gradient, value_and_grad, vjp};
pub use transform::jit::{Jit, jit};
pub use transform::pmap::{Parallel, ParallelMode, pmap, shard_map};
pub use transform::vmap::{Vmap, vmap};
/// The wgpu brigade is built on (30.x), so that an app embedding brigade
/// ([`Device::from_wgpu`], [`device::RuntimeBuilder::with_wgpu_device`]) uses exactly the same
/// crate: depend on `brigade::wgpu` rather than on `wgpu` directly (see the README's
/// "wgpu version").
pub use wgpu;

/// The devices of the process-wide runtime, like `jax.devices()`: index, adapter name, backend,
/// device type and limits are in each [`Device::info`]. The layout comes from `BRIGADE_DEVICES`
/// (default: one device per adapter; a `cpu` device when no adapter exists).
///
/// ```
/// for d in brigade::devices()? {
///     println!("{}", d.info());
/// }
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn devices() -> Result<Vec<Device>> {
    Ok(Runtime::global()?.devices().to_vec())
}

/// Where [`device_put`] may place an array: a [`Device`] (the whole array there) or a
/// [`NamedSharding`] (one block per mesh device).
pub trait Placement {
    /// Place `array` here.
    fn place(&self, array: &Array) -> Result<Array>;
}

impl Placement for Device {
    fn place(&self, array: &Array) -> Result<Array> {
        array.to_device(self)
    }
}

impl Placement for NamedSharding {
    fn place(&self, array: &Array) -> Result<Array> {
        array.to_sharding(self)
    }
}

/// Place `array` on a device or over a mesh (JAX's `jax.device_put`); free when it is already
/// placed that way. An array spanning processes (feature `mpi`) placed anew is gathered over MPI
/// first, so every process makes the call.
///
/// ```
/// use brigade::{device_put, Array, Mesh, NamedSharding, P};
/// let devs = brigade::devices()?;
/// let x = Array::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?;
/// // On one device:
/// let on0 = device_put(&x, &devs[0])?;
/// assert_eq!(on0.device(), Some(&devs[0]));
/// // Rows split over a one-axis mesh of the first device(s) that divide 2:
/// let n = if devs.len() >= 2 { 2 } else { 1 };
/// let mesh = Mesh::new(&devs[..n], &[("data", n)])?;
/// let rows = device_put(&x, &NamedSharding::new(&mesh, P!["data"])?)?;
/// assert_eq!(rows.shards().map(|s| s.len()), Some(n));
/// assert_eq!(rows.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), brigade::Error>(())
/// ```
///
/// Errors (with a sharding): [`Error::BadSharding`] (a spec longer than the rank),
/// [`Error::UnevenShard`] (a dimension its mesh axes do not divide; the message names the
/// padding that works), and those of the transfers.
pub fn device_put<T: Placement + ?Sized>(array: &Array, to: &T) -> Result<Array> {
    to.place(array)
}

/// Place one array per device as a stacked sharded array (JAX's `jax.device_put_sharded`): the
/// result has shape `(n, *shard.shape)` and shard `i` lives on `devices[i]`, ready for a `pmap`
/// with `in_axes` `Some(0)` (no transfer at call time).
///
/// **Deprecated in JAX** (which points to `jax.device_put` with a sharding), kept here for `pmap`
/// code: stack the pieces into one array and place it with [`device_put`] and a
/// [`NamedSharding`] whose spec splits axis 0 over a mesh axis, e.g.
/// `device_put(&x, &NamedSharding::new(&Mesh::new(&devices, &[("i", n)])?, P!["i"])?)`.
///
/// ```
/// use brigade::{device_put_sharded, Array};
/// let devs = brigade::devices()?;
/// let parts: Vec<Array> = (0..devs.len())
///     .map(|i| Array::from_vec(vec![i as f32; 3], &[3]))
///     .collect::<Result<_, _>>()?;
/// let x = device_put_sharded(&parts, &devs)?;
/// assert_eq!(x.shape(), &[devs.len(), 3]);
/// assert_eq!(x.shards().map(|s| s.len()), Some(devs.len()));
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn device_put_sharded(shards: &[Array], devices: &[Device]) -> Result<Array> {
    if shards.is_empty() || shards.len() != devices.len() {
        return Err(Error::BadParallelArg {
            op: "device_put_sharded",
            detail: format!(
                "{} shards for {} devices: give exactly one shard per device (at least one)",
                shards.len(),
                devices.len()
            ),
        });
    }
    if let Some((i, s)) = shards
        .iter()
        .enumerate()
        .find(|(_, s)| s.aval() != shards[0].aval())
    {
        return Err(Error::BadParallelArg {
            op: "device_put_sharded",
            detail: format!(
                "shard {i} is {} but shard 0 is {}: every shard needs the same shape and dtype",
                s.aval(),
                shards[0].aval()
            ),
        });
    }
    let placed = shards
        .iter()
        .zip(devices)
        .map(|(s, d)| s.to_device(d))
        .collect::<Result<Vec<_>>>()?;
    Ok(Array::from_shards(
        ShardLayout::Stacked { axis: 0 },
        placed,
        devices.to_vec(),
    ))
}

/// Copy `array` to every device as a stacked sharded array of shape `(n, *array.shape)` (JAX's
/// `jax.device_put_replicated`): every shard is the same data.
///
/// **Deprecated in JAX**, kept for `pmap` code: replicate with [`device_put`] and a
/// [`NamedSharding`] whose spec is `P![]` (every mesh device holds the whole array).
pub fn device_put_replicated(array: &Array, devices: &[Device]) -> Result<Array> {
    let copies = vec![array.clone(); devices.len()];
    device_put_sharded(&copies, devices)
}
