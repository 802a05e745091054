#![doc = include_str!("../README.md")]

pub mod array;
mod cache;
pub mod collective;
pub mod counters;
pub mod cpu;
pub mod debug;
pub mod device;
pub mod dtype;
pub mod error;
mod exec;
pub mod host;
mod host_copy;
pub mod lower;
pub mod nn;
pub mod numpy;
pub mod ops;
pub mod optim;
pub mod plan;
pub mod random;
pub mod reference;
pub mod tensor;
pub mod trace;
pub mod transform;
#[cfg(feature = "web")]
pub mod web;
pub mod wgsl;

pub use array::{Array, BufferView, ShardLayout};
pub use collective::{
    all_gather, all_to_all, axis_index, axis_size, pmax, pmax_axes, pmean, pmean_axes, pmin,
    pmin_axes, ppermute, psum, psum_axes, psum_scatter,
};
pub use counters::{Counters, counters};
pub use debug::{capture_debug_prints, debug_print};
pub use device::{Device, DeviceInfo, DeviceLimits, Runtime, init};
pub use dtype::{DType, Scalar};
pub use error::{Error, Result};
pub use host::{Element, HostArray, HostData};
pub use ops::conv::{ConvOptions, Padding};
pub use ops::{Window, WindowOp};
pub use plan::{MemoryAnalysis, Plan, plan};
pub use tensor::{Axes, TakeMode, Tensor, select};
pub use trace::graph::{Aval, Graph, Var};
pub use transform::control::{Branch, ScanOptions, cond, fori_loop, scan, scan_with, switch};
pub use transform::grad::{Grad, Vjp, grad, value_and_grad, vjp};
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

/// Copy `array` to `device` (JAX's `jax.device_put`); free when it is already there.
pub fn device_put(array: &Array, device: &Device) -> Result<Array> {
    array.to_device(device)
}

/// Place one array per device as a stacked sharded array (JAX's `jax.device_put_sharded`): the
/// result has shape `(n, *shard.shape)` and shard `i` lives on `devices[i]`, ready for a `pmap`
/// with `in_axes` `Some(0)` (no transfer at call time).
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
pub fn device_put_replicated(array: &Array, devices: &[Device]) -> Result<Array> {
    let copies = vec![array.clone(); devices.len()];
    device_put_sharded(&copies, devices)
}
