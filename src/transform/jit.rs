//! `jit`: compile a function once per input signature and run it on a device (JAX's `jax.jit`).
//!
//! A user-facing builder: tracing goes through [`crate::trace`], compiling and running through
//! the executor's compile cache.

use crate::array::Array;
use crate::device::Device;
use crate::error::Result;
use crate::exec::{CompileCache, RunOpts};
use crate::lower::Program;
use crate::plan::MemoryAnalysis;
use crate::tensor::Tensor;
use crate::trace::graph::{Aval, Graph};

/// A function compiled with [`jit`]: traced once per input signature, lowered and cached per device.
///
/// # Threads
///
/// On native platforms a `Jit` is `Send + Sync` whenever its function is (every closure that
/// captures only `Send + Sync` values, e.g. none, or `Arc`s), so one compiled function, shared with
/// an `Arc` or borrowed by scoped threads, can be called from many threads at once, on one device
/// or several. The program caches are behind locks held only to look up or insert a program,
/// never while tracing, compiling or running; two threads that meet a new signature at the same
/// time both trace it, and the first program is the one kept (no thread waits on another's
/// compile, so no lock order with the GL lock or the caller's own locks can deadlock). Tracing
/// itself is per thread: a [`Tensor`] stays on the thread that made it. In the browser (single
/// threaded) nothing changes.
///
/// ```
/// use brigade::{jit, Array, Tensor};
/// let f = jit(|x: &[Tensor]| vec![&x[0] * 3.0]);
/// std::thread::scope(|s| {
///     for t in 0..2 {
///         let f = &f;
///         s.spawn(move || {
///             // A different shape per thread: each compiles its own signature.
///             let x = Array::from_vec(vec![t as f32; t + 1], &[t + 1]).unwrap();
///             assert_eq!(f.call(&[x]).unwrap()[0].to_vec::<f32>().unwrap(), vec![3.0 * t as f32; t + 1]);
///         });
///     }
/// });
/// assert_eq!(f.programs_cached(), 2);
/// ```
pub struct Jit<F> {
    f: F,
    label: String,
    device: Option<Device>,
    cache: CompileCache,
    /// Extra usages of the output buffers ([`Jit::output_usages`]).
    usages: wgpu::BufferUsages,
}

/// Compile `f` (JAX's `jax.jit`). The first call with a given signature (shapes and dtypes) traces `f`
/// into a graph and compiles it for the target device; later calls with the same signature reuse
/// the compiled kernels: no tracing, no pipeline creation.
///
/// ```
/// use brigade::{jit, Array, Tensor};
/// let f = jit(|x: &[Tensor]| vec![(&x[0] * 2.0 + 1.0).exp().sum_all()]);
/// let x = Array::from_vec(vec![0.0f32, 0.5, 1.0], &[3])?;
/// let y = f.call(&[x])?;
/// let want: f32 = [0.0f32, 0.5, 1.0].iter().map(|v| (v * 2.0 + 1.0).exp()).sum();
/// assert!((y[0].to_vec::<f32>()?[0] - want).abs() < 1e-3);
/// # Ok::<(), brigade::Error>(())
/// ```
pub fn jit<F>(f: F) -> Jit<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    Jit {
        f,
        label: "jit".into(),
        device: None,
        cache: CompileCache::new(),
        usages: wgpu::BufferUsages::empty(),
    }
}

impl<F> Jit<F>
where
    F: Fn(&[Tensor]) -> Vec<Tensor>,
{
    /// Name used in messages and kernel labels.
    pub fn named(mut self, label: &str) -> Self {
        self.label = label.to_string();
        self
    }
    /// Run on this device (by default: the device of the first device-resident argument, else the
    /// global runtime's first device).
    pub fn on(mut self, device: &Device) -> Self {
        self.device = Some(device.clone());
        self
    }
    /// The traced program for arguments of these shapes (like `jax.make_jaxpr`).
    pub fn graph(&self, args: &[Array]) -> Result<Graph> {
        Ok(self
            .cache
            .executable(&self.label, &self.f, args, None)?
            .graph
            .clone())
    }
    /// The compiled program (kernels, WGSL, buffer plan) for these arguments on `device`.
    pub fn program(&self, args: &[Array], device: &Device) -> Result<Program> {
        self.cache
            .executable(
                &self.label,
                &self.f,
                args,
                Some(device.program_cache_capacity()),
            )?
            .program_for(device)
    }
    /// Donate the arguments at positions `argnums` (JAX's `donate_argnums`): the program may
    /// compute an output into a donated argument's buffer instead of a buffer of its own, so an
    /// update `p = f(p, ..)` (an optimizer step) needs no second copy of `p` on the device.
    ///
    /// A donated argument's buffer becomes the first output of its byte size that is computed
    /// after the program's last read of it ([`MemoryAnalysis::donated`] says which; a donated
    /// argument no output can take is listed in [`MemoryAnalysis::unused_donations`] and keeps
    /// its buffer). A fused elementwise kernel that reads the argument only at the element it
    /// writes (`p - lr * g`) runs in place.
    ///
    /// Arrays are shared handles, so the buffer is taken only from a call that owns its
    /// arguments, [`Jit::call_donating`], and only when nothing else holds it: no clone of the
    /// array, no buffer exported to the app. Otherwise (a clone is alive, or a call with borrowed
    /// arguments, `call`) the program writes a fresh buffer filled with a copy of the argument
    /// and every other holder keeps the old values; [`crate::Counters::donations_reused`] and
    /// [`crate::Counters::donations_copied`] count which happened. A host argument is uploaded
    /// into a buffer of the call's own, which the output takes.
    ///
    /// ```
    /// use brigade::{jit, Array, Tensor};
    /// let sgd = jit(|a: &[Tensor]| vec![&a[0] - &a[1] * 0.1]).donate_argnums(&[0]);
    /// # let Some(dev) = brigade::Runtime::global()?.devices().iter().find(|d| !d.is_cpu()).cloned() else { return Ok(()) };
    /// let mut p = Array::from_vec(vec![1.0f32, 2.0], &[2])?.to_device(&dev)?;
    /// let g = Array::from_vec(vec![1.0f32, 1.0], &[2])?.to_device(&dev)?;
    /// for _ in 0..10 {
    ///     // p is moved in; its buffer is updated in place and comes back as the output.
    ///     p = sgd.call_donating(vec![p, g.clone()])?.remove(0);
    /// }
    /// let got = p.to_vec::<f32>()?;
    /// assert!((got[0] - 0.0).abs() < 1e-5 && (got[1] - 1.0).abs() < 1e-5);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors (at the call): [`Error::BadDonation`](crate::Error::BadDonation) when a position
    /// is past the arguments, or when a donated array (or another array on its buffer) is also
    /// passed at another position, naming both.
    pub fn donate_argnums(mut self, argnums: &[usize]) -> Self {
        self.cache = CompileCache::donating(argnums);
        self
    }

    /// Call with arguments given up by the caller, so that donated arguments
    /// ([`Jit::donate_argnums`]) can give their buffers to the outputs. Otherwise as `call`.
    pub fn call_donating(&self, args: Vec<Array>) -> Result<Vec<Array>> {
        let opts = RunOpts {
            usages: self.usages,
            owned: true,
            ..RunOpts::default()
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), &args, opts)
    }

    /// The device memory a call with arguments like `args` takes on the device it would run on
    /// (JAX's `jit(f).lower(..).compile().memory_analysis()`): bytes of arguments, outputs,
    /// temporaries and the peak, from the buffer plan the call allocates. Compiles the program
    /// (cached for later calls) but runs nothing; `args` may be host arrays of the shapes.
    /// See [`MemoryAnalysis`].
    pub fn memory_analysis(&self, args: &[Array]) -> Result<MemoryAnalysis> {
        let refs: Vec<&Array> = args.iter().collect();
        let dev = crate::exec::pick_device(self.device.as_ref(), &refs)?;
        let avals = args.iter().map(|a| a.aval().clone()).collect();
        self.analysis_on(&dev, avals)
    }

    /// [`Jit::memory_analysis`] for arguments of these shapes and dtypes, without data (JAX's
    /// `jit(f).lower(jax.ShapeDtypeStruct(..))`): plan a program too large to hold on the host.
    /// Runs on the [`Jit::on`] device, else the global runtime's first.
    ///
    /// ```
    /// use brigade::{jit, Aval, DType, Tensor};
    /// // x·y + x on 4096² floats: two 64 MiB arguments, a 64 MiB result, no temporary (fused).
    /// let f = jit(|a: &[Tensor]| vec![&a[0] * &a[1] + &a[0]]);
    /// let sq = Aval::new(vec![4096, 4096], DType::F32);
    /// let m = f.memory_analysis_avals(&[sq.clone(), sq])?;
    /// assert_eq!((m.argument_bytes, m.output_bytes, m.temp_bytes), (2 << 26, 1 << 26, 0));
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn memory_analysis_avals(&self, avals: &[Aval]) -> Result<MemoryAnalysis> {
        let dev = crate::exec::pick_device(self.device.as_ref(), &[])?;
        self.analysis_on(&dev, avals.to_vec())
    }

    fn analysis_on(&self, dev: &Device, avals: Vec<Aval>) -> Result<MemoryAnalysis> {
        let capacity = Some(dev.program_cache_capacity());
        self.cache
            .executable_for(&self.label, &self.f, avals, capacity)?
            .memory_analysis(dev)
    }

    /// Number of argument signatures whose programs this function holds (at most the
    /// [`Device::program_cache_capacity`] of the device it last compiled for).
    pub fn programs_cached(&self) -> usize {
        self.cache.len()
    }
    /// Call with concrete arrays.
    pub fn call(&self, args: &[Array]) -> Result<Vec<Array>> {
        if self.usages.is_empty() {
            return self
                .cache
                .call(&self.label, &self.f, self.device.as_ref(), args);
        }
        let opts = RunOpts {
            usages: self.usages,
            ..RunOpts::default()
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
    }

    /// Give this program's output buffers `usages` on top of brigade's own (and of the device's,
    /// [`Device::set_output_usages`]), so that the app can bind them in its pipelines: e.g.
    /// `wgpu::BufferUsages::VERTEX` to draw an output as a vertex buffer
    /// ([`Array::wgpu_buffer`]). Allowed: `VERTEX`, `INDEX`, `UNIFORM` (a uniform binding is at
    /// most `max_uniform_buffer_binding_size` bytes, 64 KiB by default), `INDIRECT` (the buffer
    /// must then hold wgpu's indirect argument layout). Another usage (e.g. `MAP_WRITE`) makes
    /// every call fail with [`Error::BadBuffer`](crate::Error::BadBuffer). Outputs with different
    /// usages come from different pool buckets.
    pub fn output_usages(mut self, usages: wgpu::BufferUsages) -> Self {
        self.usages = usages;
        self
    }

    /// Run the program and write its outputs into `outs` (device arrays of the outputs' shapes
    /// and dtypes, e.g. an app's vertex buffers imported with [`Array::from_wgpu_buffer`])
    /// instead of new buffers: a simulation step `x = f(x)` updates `x` in place every frame,
    /// with no allocation and no transfer. Submits and returns without waiting, like `call`.
    ///
    /// An output array may also be an argument (`call_into(&[x.clone()], &[x])`): the results
    /// are computed into a temporary and copied over afterwards, so the program reads the old
    /// values. Each output is otherwise bound as the kernels' output buffer itself (no copy),
    /// unless the program's output is one of its inputs or constants, or shares a buffer with
    /// another output: then it is copied. Other arrays sharing an output's buffer (clones) see
    /// the new values.
    ///
    /// ```
    /// use brigade::{Array, Tensor, jit};
    /// let step = jit(|x: &[Tensor]| vec![&x[0] * 0.5 + 1.0]);
    /// # let Some(dev) = brigade::Runtime::global()?.devices().iter().find(|d| !d.is_cpu()).cloned() else { return Ok(()) };
    /// let x = Array::from_vec(vec![2.0f32, 4.0], &[2])?.to_device(&dev)?;
    /// for _ in 0..3 {
    ///     step.call_into(&[x.clone()], &[x.clone()])?;
    /// }
    /// assert_eq!(x.to_vec::<f32>()?, vec![2.0, 2.25]); // 2 stays 2; 4 → 3 → 2.5 → 2.25
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors: [`Error::Arity`](crate::Error::Arity) (not one array per output),
    /// [`Error::BadBuffer`](crate::Error::BadBuffer) (an array of another shape or dtype, on
    /// another device, on the host, or given for two outputs),
    /// [`Error::Unsupported`](crate::Error::Unsupported) on the cpu device, and those of `call`.
    pub fn call_into(&self, args: &[Array], outs: &[Array]) -> Result<()> {
        let opts = RunOpts {
            usages: self.usages,
            into: Some(outs),
            encoder: None,
            owned: false,
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
            .map(drop)
    }

    /// Record the program into the app's `encoder` without submitting or waiting, so that its
    /// compute and the app's render passes go in one submission, ordered by wgpu; the outputs
    /// are valid once the app has submitted the encoder (read them, or bind their
    /// [`Array::wgpu_buffer`], after that). `call` keeps submitting on its own.
    ///
    /// The encoder must come from the wgpu device of the device the program runs on
    /// ([`Jit::on`], else the first device argument's, else the global runtime's first).
    /// Arguments not on that device are uploaded now with `queue.write_buffer` (counted in
    /// [`crate::Counters::bytes_uploaded`]), which wgpu orders before the app's later submit.
    ///
    /// Every buffer the recorded commands use that lives on in arrays (arguments, outputs,
    /// constants) is marked shared: it never returns to the pool, so no later brigade work can
    /// overwrite it before the app's commands have run, and reads copy it instead of mapping it,
    /// so the app's submit cannot meet a mapping brigade holds (a read of an argument that was
    /// already waiting on another thread is waited for here). Temporaries are held by the
    /// encoder (`CommandEncoder::on_submitted_work_done`) and go back to the pool only once the
    /// app's submission of it has finished (or the encoder was dropped unsubmitted): a frame
    /// loop of encodes reuses them instead of allocating every frame.
    ///
    /// The outputs hold values only if the app's submission of the encoder ran. Each encode
    /// appends to the encoder a 4-byte copy that records that it ran, and the first read of an
    /// output (or the first `call` given it) checks it: an encoder not yet submitted, dropped, or
    /// whose submission failed (an encoder of another wgpu device) makes that read
    /// [`Error::NotComputed`](crate::Error::NotComputed) instead of returning stale data. An
    /// encode that takes an earlier encode's output as an argument does not check it (that
    /// would wait for the device in a frame loop): submit the encoders in order.
    ///
    /// Errors: [`Error::Unsupported`](crate::Error::Unsupported) for a program that needs a host
    /// step between its stages: one with `debug_print` (printing reads values on the host), or
    /// more than 4096 commands with loops unrolled (`call` submits those in chunks and waits
    /// between them); use `call` for those. Also the errors of `call`. wgpu reports an encoder
    /// from another device when the app finishes or submits it; brigade then reports
    /// [`Error::NotComputed`](crate::Error::NotComputed) when the outputs are read.
    pub fn encode(&self, encoder: &mut wgpu::CommandEncoder, args: &[Array]) -> Result<Vec<Array>> {
        let opts = RunOpts {
            usages: self.usages,
            into: None,
            encoder: Some(encoder),
            owned: false,
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
    }

    /// [`Jit::encode`] writing the outputs into `outs`, as [`Jit::call_into`] does: a step
    /// `x = f(x)` on an app's vertex buffer recorded into the frame's encoder.
    pub fn encode_into(
        &self,
        encoder: &mut wgpu::CommandEncoder,
        args: &[Array],
        outs: &[Array],
    ) -> Result<()> {
        let opts = RunOpts {
            usages: self.usages,
            into: Some(outs),
            encoder: Some(encoder),
            owned: false,
        };
        self.cache
            .call_with(&self.label, &self.f, self.device.as_ref(), args, opts)
            .map(drop)
    }
}
