//! The session: the devices the page picked, the cpu device of the reference, and the compiled
//! programs of every demo; `start` builds it, the demos find it with [`session`].

use std::cell::RefCell;
use std::rc::Rc;

use wasm_bindgen::prelude::*;

use super::TOL;
use super::json::{Obj, json_list, to_js, work_json};
use super::page::install_panic_hook;
use super::training::Training;
use brigade::device::Runtime;
use brigade::{
    Device, Error, Jit, Parallel, Result, Tensor, Vmap, jit, pmap, pmean, shard_map, vmap,
};

pub(super) type Body = Box<dyn Fn(&[Tensor]) -> Vec<Tensor>>;

/// The devices the page picked, the cpu device of the reference, and every program the demos
/// run, kept so that a second run reuses the compiled kernels.
pub(super) struct Session {
    pub(super) devices: Vec<Device>,
    pub(super) cpu: Device,
    pub(super) webgpu: bool,
    /// Why the page runs on cpu devices, when it does.
    pub(super) fallback: String,
    // Basics: one dish per table.
    pub(super) dish_split: Parallel<Body>,
    /// The same split program on device 0 alone: the one-chef baseline.
    pub(super) dish_one: Parallel<Body>,
    pub(super) dish_vmap: Vmap<Body>,
    pub(super) dish_ref: Jit<Body>,
    // Advanced.
    pub(super) tables: Parallel<Body>,
    pub(super) bcast: Parallel<Body>,
    pub(super) bcast_all_mapped: Parallel<Body>,
    pub(super) nested: Parallel<Body>,
    pub(super) center: Parallel<Body>,
    // Stages of `center`, run one by one to time them.
    pub(super) stage_a: Vec<Jit<Body>>,
    pub(super) stage_b: Vec<Jit<Body>>,
    // Matmuls.
    pub(super) mm_split: Parallel<Body>,
    pub(super) mm_one: Jit<Body>,
    pub(super) mm_ref: Jit<Body>,
    pub(super) mm_dev: Vec<Jit<Body>>,
    pub(super) train: RefCell<Option<Training>>,
}

thread_local! {
    static SESSION: RefCell<Option<Rc<Session>>> = const { RefCell::new(None) };
}

pub(super) fn session() -> Result<Rc<Session>> {
    SESSION
        .with(|s| s.borrow().clone())
        .ok_or_else(|| Error::NoDevice("the page has not called start() yet".into()))
}

fn dish(a: &[Tensor]) -> Vec<Tensor> {
    // One table's order: its features through one layer (the "recipe" is the same for all).
    vec![(a[0].matmul(&a[1]) + &a[2]).tanh()]
}

pub(super) fn body(f: fn(&[Tensor]) -> Vec<Tensor>) -> Body {
    Box::new(f)
}

impl Session {
    fn new(devices: Vec<Device>, cpu: Device, webgpu: bool, fallback: String) -> Session {
        let dev0 = devices[0].clone();
        let per_device = |f: fn(&[Tensor]) -> Vec<Tensor>, label: &str| -> Vec<Jit<Body>> {
            devices
                .iter()
                .map(|d| jit(body(f)).named(label).on(d))
                .collect()
        };
        Session {
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
            dish_ref: jit(body(dish)).named("dish (reference)").on(&cpu),
            tables: shard_map(body(|a| {
                let per_table = a[0].sum(1, false);
                let total = brigade::psum(&per_table.sum_all(), "tables");
                vec![per_table, total]
            }))
            .axis_name("tables")
            .out_axes(&[Some(0), None])
            .devices(&devices)
            .named("tables"),
            bcast: pmap(body(|a| vec![a[0].matmul(&a[1]).relu()]))
                .in_axes(&[Some(0), None])
                .devices(&devices)
                .named("in_axes (Some(0), None)"),
            bcast_all_mapped: pmap(body(|a| vec![a[0].matmul(&a[1]).relu()]))
                .devices(&devices)
                .named("in_axes (Some(0), Some(0))"),
            nested: pmap(body(|a| {
                vmap(|e: &[Tensor]| vec![e[0].matmul(&e[1]).tanh()])
                    .in_axes(&[Some(0), None])
                    .apply(&[a[0].clone(), a[1].clone()])
            }))
            .in_axes(&[Some(0), None])
            .devices(&devices)
            .named("pmap(vmap(f))"),
            center: pmap(body(|a| {
                let h = a[0].matmul(&a[1]).tanh();
                let m = pmean(&h.mean(0, false), "i");
                vec![&h - &m]
            }))
            .axis_name("i")
            .in_axes(&[Some(0), None])
            .devices(&devices)
            .named("center"),
            stage_a: per_device(
                |a| {
                    let h = a[0].matmul(&a[1]).tanh();
                    vec![h.clone(), h.mean(0, false)]
                },
                "stage 1",
            ),
            stage_b: per_device(|a| vec![&a[0] - &a[1]], "stage 2"),
            mm_split: shard_map(body(|a| vec![a[0].matmul(&a[1])]))
                .in_axes(&[Some(0), None])
                .devices(&devices)
                .named("row-split matmul"),
            mm_one: jit(body(|a| vec![a[0].matmul(&a[1])]))
                .named("matmul")
                .on(&dev0),
            mm_ref: jit(body(|a| vec![a[0].matmul(&a[1])]))
                .named("matmul (reference)")
                .on(&cpu),
            mm_dev: per_device(|a| vec![a[0].matmul(&a[1])], "matmul block"),
            train: RefCell::new(None),
            devices,
            cpu,
            webgpu,
            fallback,
        }
    }

    pub(super) fn n(&self) -> usize {
        self.devices.len()
    }

    fn describe(&self) -> String {
        let devs = self.devices.iter().map(|d| {
            let i = d.info();
            Obj::new()
                .int("index", i.index)
                .str("name", &i.adapter_name)
                .str("backend", &i.backend)
                .str("type", &i.device_type)
                .int(
                    "max_binding",
                    i.limits.max_storage_buffer_binding_size as usize,
                )
                .int(
                    "max_invocations",
                    i.limits.max_compute_invocations_per_workgroup as usize,
                )
                .end()
        });
        Obj::new()
            .bool("webgpu", self.webgpu)
            .str(
                "backend",
                self.devices
                    .first()
                    .map(|d| d.info().backend.as_str())
                    .unwrap_or("none"),
            )
            .int("count", self.n())
            .str("fallback", &self.fallback)
            .num("tol", TOL)
            .raw("devices", json_list(devs))
            .end()
    }
}

/// Build the session on `layout`; without a usable WebGPU adapter, on `cpu:N`.
pub(super) async fn start_inner(n: usize, layout: &str) -> Result<String> {
    let n = n.clamp(1, 4);
    let cpu = Runtime::builder().layout_str("cpu:1").build().await?;
    let cpu = cpu.devices()[0].clone();
    let (devices, webgpu, fallback) = if layout.starts_with("cpu") {
        let rt = Runtime::builder().layout_str(layout).build().await?;
        (
            rt.devices().to_vec(),
            false,
            "cpu devices were asked for".to_string(),
        )
    } else {
        let tried = Runtime::builder()
            .layout_str(layout)
            .allow_cpu_fallback(false)
            .build()
            .await;
        match tried {
            Ok(rt) => {
                let web = rt.devices().iter().all(|d| d.info().backend == "webgpu");
                (rt.devices().to_vec(), web, String::new())
            }
            Err(e) => {
                let rt = Runtime::builder()
                    .layout_str(&format!("cpu:{n}"))
                    .build()
                    .await?;
                (rt.devices().to_vec(), false, e.to_string())
            }
        }
    };
    let s = Session::new(devices, cpu, webgpu, fallback);
    let out = s.describe();
    SESSION.with(|slot| *slot.borrow_mut() = Some(Rc::new(s)));
    Ok(out)
}

/// Open `n` (1–4) logical devices: one WebGPU adapter each (`webgpu:n`), or `cpu:n` when
/// `use_webgpu` is false or the browser has no WebGPU adapter (the reason is in `fallback`).
/// Returns the devices as JSON. Replaces the previous session.
#[wasm_bindgen]
pub async fn start(n: usize, use_webgpu: bool) -> std::result::Result<String, JsValue> {
    install_panic_hook();
    let layout = if use_webgpu {
        format!("webgpu:{}", n.clamp(1, 4))
    } else {
        format!("cpu:{}", n.clamp(1, 4))
    };
    to_js(start_inner(n, &layout).await)
}

/// The work counters of the page so far (JSON): dispatches, submits, pipelines, bytes moved.
#[wasm_bindgen]
pub fn counters_json() -> String {
    work_json(&brigade::Counters::default())
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// The page's fallback: two cpu devices, described to the page.
    #[test]
    fn starts_on_cpu_devices() {
        pollster::block_on(async {
            let d = start_inner(2, "cpu:2").await.unwrap();
            assert!(d.contains("\"count\":2"), "{d}");
            assert_eq!(session().unwrap().n(), 2);
        });
    }
}
