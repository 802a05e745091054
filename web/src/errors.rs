//! Errors caught in the browser (the browser test's check): a shader the browser rejects and a
//! dispatch that fails validation come back as typed errors, once each.

use wasm_bindgen::prelude::*;

use super::json::{Obj, error_kind, to_js};
use super::page::install_panic_hook;
use brigade::device::{Dispatch, Runtime};
use brigade::{Array, DType, Result, Tensor, pmap};

/// A shader naga accepts and browsers reject: an inf constant (a const-evaluated `bitcast<f32>`).
const INF_CONSTANT_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(1) fn main() { y[0] = bitcast<f32>(0x7f800000u); }";

/// A kernel that needs 32 bytes at binding 0 (`array<f32, 8>`): dispatching it with a 4-byte
/// buffer fails validation.
const FIXED8_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32, 8>;
@compute @workgroup_size(1) fn main() { y[7] = 1.0; }";

const DOUBLE_WGSL: &str = "@group(0) @binding(0) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64) fn main(@builtin(global_invocation_id) i: vec3<u32>) {
    if (i.x < arrayLength(&y)) { y[i.x] = 2.0 * y[i.x]; }
}";

/// `{"kind": "Compile", "message": …}` for an error, `{"kind": "none"}` for none.
fn outcome_json(r: &Result<()>) -> String {
    match r {
        Ok(()) => Obj::new().str("kind", "none").end(),
        Err(e) => {
            let msg = e.to_string();
            let short: String = msg.chars().take(400).collect();
            Obj::new()
                .str("kind", &error_kind(e))
                .str("message", &short)
                .end()
        }
    }
}

async fn error_capture_inner(layout: &str) -> Result<String> {
    let rt = Runtime::builder()
        .layout_str(layout)
        .allow_cpu_fallback(false)
        .build()
        .await?;
    let dev = rt.devices()[0].clone();
    let one = |k: &brigade::device::Kernel, b: &brigade::device::DeviceBuffer| {
        dev.submit_only(&[Dispatch {
            kernel: k,
            buffers: vec![b],
            workgroups: [1, 1, 1],
        }])
    };
    // 1. A shader the browser rejects: compiling and dispatching return at once; the read that
    //    follows reports the shader error.
    let shader: Result<()> = async {
        let k = dev.kernel("inf_constant", INF_CONSTANT_WGSL)?;
        let y = dev.alloc(4)?;
        one(&k, &y)?;
        dev.download(&y, DType::F32, 1).await.map(|_| ())
    }
    .await;
    // 2. The same shader again: it was dropped from the cache, so it fails again.
    let shader_again: Result<()> = async {
        dev.kernel("inf_constant", INF_CONSTANT_WGSL)?;
        dev.flush_errors().await
    }
    .await;
    // 3. A dispatch that fails validation (4 bytes bound where 32 are needed): the next await
    //    reports it.
    let validation: Result<()> = async {
        let k = dev.kernel("fixed8", FIXED8_WGSL)?;
        let small = dev.alloc(4)?;
        one(&k, &small)?;
        dev.flush_errors().await
    }
    .await;
    // 4. The same failing dispatch, then a parallel call on the device: its `call_async`
    //    returns the error before it returns.
    let parallel: Result<()> = async {
        let k = dev.kernel("fixed8", FIXED8_WGSL)?;
        let small = dev.alloc(4)?;
        one(&k, &small)?;
        let x = Array::from_vec(vec![1.0f32, 2.0, 3.0], &[1, 3])?;
        pmap(|a: &[Tensor]| vec![a[0].add(&a[0])])
            .devices(std::slice::from_ref(&dev))
            .call_async(&[x])
            .await
            .map(|_| ())
    }
    .await;
    // 5. Each error is reported once: the device computes right afterwards.
    let input = vec![1.0f32, -2.5, 0.0, 3.0];
    let after: Result<brigade::HostData> = async {
        let x = dev.upload(&brigade::HostData::F32(input.clone()))?;
        let k = dev.kernel("double", DOUBLE_WGSL)?;
        one(&k, &x)?;
        dev.download(&x, DType::F32, input.len()).await
    }
    .await;
    let want = brigade::HostData::F32(input.iter().map(|v| 2.0 * v).collect());
    let after_ok = matches!(&after, Ok(d) if *d == want);
    Ok(Obj::new()
        .str("backend", &dev.info().backend)
        .raw("shader", outcome_json(&shader))
        .raw("shader_again", outcome_json(&shader_again))
        .raw("validation", outcome_json(&validation))
        .raw("call_async", outcome_json(&parallel))
        .bool("after_ok", after_ok)
        .str("after", &format!("{after:?}"))
        .end())
}

/// For the browser test: on a fresh WebGPU device, provoke a shader the browser rejects (naga
/// accepts it) and a dispatch that fails validation, through brigade's own kernel and dispatch
/// paths, and report (JSON) the typed errors the next awaits returned, and whether the device
/// still computes right afterwards.
#[wasm_bindgen]
pub async fn error_capture_check() -> std::result::Result<String, JsValue> {
    install_panic_hook();
    to_js(error_capture_inner("webgpu:1").await)
}
