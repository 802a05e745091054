#![doc = include_str!("../README.md")]

pub mod array;
pub mod counters;
pub mod device;
pub mod dtype;
pub mod error;
mod exec;
pub mod host;
pub mod lower;
pub mod ops;
pub mod reference;
pub mod tensor;
pub mod trace;
pub mod wgsl;

pub use array::Array;
pub use counters::{Counters, counters};
pub use device::{Device, DeviceInfo, DeviceLimits, Runtime, init};
pub use dtype::{DType, Scalar};
pub use error::{Error, Result};
pub use exec::{Jit, jit};
pub use host::{Element, HostArray, HostData};
pub use tensor::{Axes, Tensor, select};
pub use trace::graph::{Aval, Graph, Var};

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
