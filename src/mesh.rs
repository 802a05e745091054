//! Meshes and shardings, JAX's modern model (`jax.sharding.Mesh`, `PartitionSpec`, `NamedSharding`).
//!
//! A [`Mesh`] arranges devices in an n-dimensional grid with named axes, e.g. 4 devices as
//! `("data", 2) × ("model", 2)`. A [`PartitionSpec`] says, per array dimension, which mesh axes
//! split it (`P!["data", None]`: rows split over `"data"`, columns whole); mesh axes a spec does not
//! name replicate the array. A [`NamedSharding`] is the pair, and [`crate::device_put`] places an
//! array with one. [`crate::shard_map`] with [`crate::Parallel::mesh`] runs a function on every
//! device of a mesh, each seeing its block, with collectives over any mesh axis.
//!
//! ```
//! use brigade::{Array, Mesh, NamedSharding, P, device_put};
//! let devs = brigade::devices()?;
//! let d = devs[0].clone();
//! // Two logical grid positions may not share a device, so use as many as exist (at least 1).
//! let mesh = Mesh::new(&[d], &[("data", 1), ("model", 1)])?;
//! let x = Array::from_vec((0..8).map(|v| v as f32).collect::<Vec<f32>>(), &[4, 2])?;
//! let s = NamedSharding::new(&mesh, P!["data", None])?;
//! let y = device_put(&x, &s)?;
//! assert_eq!(y.sharding().unwrap().spec(), &P!["data", None]);
//! assert_eq!(y.to_vec::<f32>()?, x.to_vec::<f32>()?);
//! # Ok::<(), brigade::Error>(())
//! ```

use std::fmt;
use std::sync::Arc;

use crate::device::Device;
use crate::error::{Error, Result};
use crate::host::HostArray;
use crate::ops::collective::{concat_axis, take_block};

/// Devices in an n-dimensional grid with named axes (JAX's `jax.sharding.Mesh`). Device `i` of
/// [`Mesh::devices`] sits at the row-major position `i` of the grid (the last axis varies fastest).
/// Cheap to clone. Devices may come from different adapters and backends.
#[derive(Clone)]
pub struct Mesh {
    inner: Arc<MeshInner>,
}

struct MeshInner {
    /// This process's devices, in grid order (every device of a mesh within one process).
    devices: Vec<Device>,
    axes: Vec<(String, usize)>,
    /// A mesh spanning processes ([`Mesh::from_global`]); `None` within one process.
    span: Option<Span>,
}

/// Where a mesh spanning processes puts this process: its devices are the grid positions
/// `offset..offset + devices.len()` (every process holds as many, process-major), a sub-grid
/// whose extent along each axis is `local_axes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) offset: usize,
    /// Global device id ([`crate::distributed::devices`]) at each grid position.
    pub(crate) ids: Vec<usize>,
    pub(crate) local_axes: Vec<(String, usize)>,
}

impl PartialEq for Mesh {
    fn eq(&self, other: &Mesh) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
            || (self.inner.devices == other.inner.devices
                && self.inner.axes == other.inner.axes
                && self.inner.span == other.inner.span)
    }
}
impl Eq for Mesh {}

impl fmt::Debug for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Mesh {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let axes: Vec<String> = self
            .inner
            .axes
            .iter()
            .map(|(n, s)| format!("'{n}': {s}"))
            .collect();
        let devs: Vec<String> = match &self.inner.span {
            // Global device ids: the same text on every process.
            Some(span) => span.ids.iter().map(|i| format!("g{i}")).collect(),
            None => self
                .inner
                .devices
                .iter()
                .map(|d| d.index().to_string())
                .collect(),
        };
        write!(
            f,
            "Mesh({{{}}}, devices [{}])",
            axes.join(", "),
            devs.join(", ")
        )
    }
}

impl Mesh {
    /// A mesh of `devices` with the named axes `axes` (outermost first). The sizes must multiply
    /// to the number of devices; names must be distinct and non-empty; a device may appear once.
    ///
    /// ```
    /// use brigade::Mesh;
    /// let devs = brigade::devices()?;
    /// let m = Mesh::new(&devs[..1], &[("data", 1)])?;
    /// assert_eq!(m.axis_size("data"), Some(1));
    /// // Sizes that do not multiply to the device count are refused, naming both.
    /// assert!(Mesh::new(&devs[..1], &[("data", 2), ("model", 2)]).is_err());
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors: [`Error::BadSharding`] for a product that differs from the device count (the
    /// message lists the shapes that fit), repeated or empty names, or a repeated device.
    pub fn new(devices: &[Device], axes: &[(&str, usize)]) -> Result<Mesh> {
        let bad = |detail: String| Error::BadSharding {
            op: "Mesh::new",
            detail,
        };
        if devices.is_empty() {
            return Err(bad("no devices: a mesh needs at least one device".into()));
        }
        check_axes("Mesh::new", axes, devices.len(), "devices were given")?;
        for (i, d) in devices.iter().enumerate() {
            if let Some(j) = devices[..i].iter().position(|e| e == d) {
                return Err(bad(format!(
                    "device {} is listed at positions {j} and {i}: each mesh position needs its own device (ask for several logical devices per adapter, e.g. BRIGADE_DEVICES=vulkan:4)",
                    d.index()
                )));
            }
        }
        Ok(Mesh {
            inner: Arc::new(MeshInner {
                devices: devices.to_vec(),
                axes: owned_axes(axes),
                span: None,
            }),
        })
    }

    /// A mesh over the global device list of every process (feature `mpi`), JAX's
    /// `Mesh(np.array(jax.devices()).reshape(...), names)`: [`Mesh::from_global`] over
    /// [`crate::distributed::devices`]. Every process builds the same mesh; `shard_map` over it
    /// runs each process's devices and combines over any axis across processes, and arrays placed
    /// on it span the processes. Before [`crate::distributed::initialize`] (or with one process)
    /// it is [`Mesh::new`] over this process's devices.
    ///
    /// ```no_run
    /// use brigade::{Mesh, NamedSharding, P};
    /// brigade::distributed::initialize()?;
    /// // 2 processes × 2 devices each: "data" crosses the processes, "model" stays within each.
    /// let mesh = Mesh::new_global(&[("data", 2), ("model", 2)])?;
    /// let rows = NamedSharding::new(&mesh, P!["data", "model"])?;
    /// assert!(mesh.is_spanning());
    /// # Ok::<(), brigade::Error>(())
    /// ```
    ///
    /// Errors: those of [`Mesh::from_global`].
    #[cfg(feature = "mpi")]
    pub fn new_global(axes: &[(&str, usize)]) -> Result<Mesh> {
        Mesh::from_global(&crate::distributed::devices()?, axes)
    }

    /// A mesh over `devices`, taken from the global list [`crate::distributed::devices`] (feature
    /// `mpi`), device `i` at grid position `i`. The list must be process-major: every process
    /// holds the same number of positions, process `p`'s a block of consecutive positions (the
    /// order within the block is free), and each block a sub-grid (so that a process's part of an
    /// array is itself an array: e.g. 2 processes × 2 devices as `("data", 2) × ("model", 2)` or
    /// `("data", 4)`, not `("a", 4)` over 2 processes × 2 devices reordered to alternate).
    ///
    /// Errors ([`Error::BadSharding`]): sizes that do not multiply to the number of devices,
    /// repeated or empty axis names, a repeated device, a list that is not process-major or
    /// whose blocks are not sub-grids.
    #[cfg(feature = "mpi")]
    pub fn from_global(
        devices: &[crate::distributed::GlobalDevice],
        axes: &[(&str, usize)],
    ) -> Result<Mesh> {
        let op = "Mesh::from_global";
        let bad = |detail: String| Error::BadSharding { op, detail };
        if devices.is_empty() {
            return Err(bad("no devices: a mesh needs at least one device".into()));
        }
        check_axes(op, axes, devices.len(), "global devices were given")?;
        for (i, d) in devices.iter().enumerate() {
            if let Some(j) = devices[..i].iter().position(|e| e.id == d.id) {
                return Err(bad(format!(
                    "global device {} is listed at positions {j} and {i}: each mesh position needs its own device",
                    d.id
                )));
            }
        }
        let count = crate::distributed::process_count();
        let here = crate::distributed::process_index();
        if count == 1 {
            let local = devices
                .iter()
                .map(|d| d.device().cloned())
                .collect::<Result<Vec<_>>>()?;
            return Mesh::new(&local, axes).map_err(|e| match e {
                Error::BadSharding { detail, .. } => Error::BadSharding { op, detail },
                e => e,
            });
        }
        let total = devices.len();
        if !total.is_multiple_of(count) {
            return Err(bad(format!(
                "{total} devices do not split evenly over {count} processes: a mesh spanning processes takes the same number of devices from every process"
            )));
        }
        let k = total / count;
        for (i, d) in devices.iter().enumerate() {
            if d.process_index != i / k {
                return Err(bad(format!(
                    "position {i} holds global device {} of process {}, but with {k} devices per process positions {}..{} belong to process {}: list the devices process-major, as distributed::devices() gives them",
                    d.id,
                    d.process_index,
                    (i / k) * k,
                    (i / k + 1) * k,
                    i / k
                )));
            }
        }
        let Some(local_axes) = local_extent(axes, k) else {
            let shape: Vec<String> = axes.iter().map(|(n, s)| format!("'{n}': {s}")).collect();
            return Err(bad(format!(
                "each process's block of {k} consecutive positions is not a sub-grid of the mesh {{{}}}: choose sizes whose innermost axes multiply to {k} (or to a divisor of it whose next axis is a multiple of the rest), e.g. ('processes', {count}) × ('local', {k})",
                shape.join(", ")
            )));
        };
        let offset = here * k;
        let local = devices[offset..offset + k]
            .iter()
            .map(|d| d.device().cloned())
            .collect::<Result<Vec<_>>>()?;
        Ok(Mesh {
            inner: Arc::new(MeshInner {
                devices: local,
                axes: owned_axes(axes),
                span: Some(Span {
                    offset,
                    ids: devices.iter().map(|d| d.id).collect(),
                    local_axes,
                }),
            }),
        })
    }

    /// Does the mesh span processes (`Mesh::from_global`, feature `mpi`, with more than one process)?
    pub fn is_spanning(&self) -> bool {
        self.inner.span.is_some()
    }

    /// The global device ids (`distributed::devices()`, feature `mpi`) in grid order, for a mesh spanning
    /// processes; for a mesh within one process, the positions `0..size`.
    pub fn device_ids(&self) -> Vec<usize> {
        match &self.inner.span {
            Some(s) => s.ids.clone(),
            None => (0..self.size()).collect(),
        }
    }

    /// This process's part of a spanning mesh: its devices, with the same axis names and this
    /// process's extent along each (1 along axes that cross processes); a mesh within one
    /// process is itself.
    pub fn local_mesh(&self) -> Mesh {
        match &self.inner.span {
            Some(s) => Mesh {
                inner: Arc::new(MeshInner {
                    devices: self.inner.devices.clone(),
                    axes: s.local_axes.clone(),
                    span: None,
                }),
            },
            None => self.clone(),
        }
    }

    /// `(first grid position of this process, number of positions)` of a spanning mesh.
    pub(crate) fn span(&self) -> Option<(usize, usize)> {
        self.inner.span.as_ref().map(|s| (s.offset, self.size()))
    }

    /// The grid position of this process's first device (0 within one process).
    pub(crate) fn offset(&self) -> usize {
        self.inner.span.as_ref().map_or(0, |s| s.offset)
    }

    /// The devices in grid order that this process holds: every device for a mesh within one
    /// process, this process's block of positions ([`Mesh::local_mesh`]) for a spanning mesh.
    pub fn devices(&self) -> &[Device] {
        &self.inner.devices
    }
    /// The axes, outermost first: `(name, size)`.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.inner.axes
    }
    /// The axis names, outermost first.
    pub fn axis_names(&self) -> Vec<&str> {
        self.inner.axes.iter().map(|(n, _)| n.as_str()).collect()
    }
    /// The size of axis `name`, if the mesh has it.
    pub fn axis_size(&self, name: &str) -> Option<usize> {
        self.position(name).map(|p| self.inner.axes[p].1)
    }
    /// Number of grid positions (every process's devices for a spanning mesh).
    pub fn size(&self) -> usize {
        self.inner.axes.iter().map(|(_, s)| *s).product()
    }
    fn position(&self, name: &str) -> Option<usize> {
        self.inner.axes.iter().position(|(n, _)| n == name)
    }
    /// The grid coordinates of device `i` (one per axis).
    pub fn coords(&self, i: usize) -> Vec<usize> {
        coords(&self.inner.axes, i)
    }
    /// The device at grid coordinates `coords` (one per axis), if they are inside the grid and,
    /// for a spanning mesh, on this process.
    pub fn device_at(&self, coords: &[usize]) -> Option<&Device> {
        if coords.len() != self.inner.axes.len()
            || coords
                .iter()
                .zip(&self.inner.axes)
                .any(|(&c, (_, s))| c >= *s)
        {
            return None;
        }
        let i = coords
            .iter()
            .zip(&self.inner.axes)
            .fold(0, |acc, (&c, (_, s))| acc * s + c);
        self.inner.devices.get(i.checked_sub(self.offset())?)
    }
}

/// The extent along each axis of a block of `k` consecutive grid positions starting at a
/// multiple of `k`, when the block is a sub-grid: walking the axes inward, each is either whole
/// within the block or cut into equal runs (the axes outside it then fixed). `None` otherwise.
#[cfg(any(feature = "mpi", test))]
fn local_extent(axes: &[(&str, usize)], k: usize) -> Option<Vec<(String, usize)>> {
    let mut rem = k;
    let mut out = Vec::with_capacity(axes.len());
    for (name, size) in axes.iter().rev() {
        let take = if rem >= *size && rem.is_multiple_of(*size) {
            *size
        } else if rem < *size && size.is_multiple_of(rem) {
            rem
        } else {
            return None;
        };
        rem /= take;
        out.push((name.to_string(), take));
    }
    out.reverse();
    Some(out)
}

/// Check mesh axis sizes against `n` positions (`given`: what the `n` counts) and the names.
fn check_axes(op: &'static str, axes: &[(&str, usize)], n: usize, given: &str) -> Result<()> {
    let bad = |detail: String| Error::BadSharding { op, detail };
    // Exact in u128 (saturating only past any device count): a product that overflows usize
    // must not wrap around to `n`.
    let product = axes
        .iter()
        .fold(1u128, |p, (_, s)| p.saturating_mul(*s as u128));
    if product != n as u128 {
        let shape: Vec<String> = axes.iter().map(|(n, s)| format!("'{n}': {s}")).collect();
        let pairs: Vec<String> = (1..=n)
            .filter(|a| n.is_multiple_of(*a))
            .map(|a| format!("{a}×{}", n / a))
            .collect();
        return Err(bad(format!(
            "the axis sizes {{{}}} multiply to {product} but {n} {given}: the sizes must multiply to {n} (two axes: {})",
            shape.join(", "),
            pairs.join(", ")
        )));
    }
    for (i, (name, _)) in axes.iter().enumerate() {
        if name.is_empty() {
            return Err(bad(format!("axis {i} has an empty name: name every axis")));
        }
        if axes[..i].iter().any(|(m, _)| m == name) {
            return Err(bad(format!(
                "the axis name '{name}' appears twice: every mesh axis needs its own name"
            )));
        }
    }
    Ok(())
}

fn owned_axes(axes: &[(&str, usize)]) -> Vec<(String, usize)> {
    axes.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

/// Row-major coordinates of position `i` in a grid of `axes`.
pub(crate) fn coords(axes: &[(String, usize)], mut i: usize) -> Vec<usize> {
    let mut c = vec![0; axes.len()];
    for (k, (_, s)) in axes.iter().enumerate().rev() {
        c[k] = i % s;
        i /= s;
    }
    c
}

/// The device groups a collective over the axes `names` combines: devices that agree on every
/// other axis, each group ordered by its index along `names` (row-major over them). An axis the
/// grid lacks is ignored (a one-axis map has one group of every device).
pub(crate) fn groups(axes: &[(String, usize)], names: &[&str]) -> Vec<Vec<usize>> {
    let n: usize = axes.iter().map(|(_, s)| *s).product();
    let over: Vec<bool> = axes
        .iter()
        .map(|(a, _)| names.contains(&a.as_str()))
        .collect();
    // Keyed by the coordinates on the other axes; members as (index along `names`, device).
    let mut by_rest: std::collections::BTreeMap<Vec<usize>, Vec<(usize, usize)>> =
        std::collections::BTreeMap::new();
    for d in 0..n {
        let c = coords(axes, d);
        let mut rest = Vec::new();
        let mut index = 0;
        for ((&x, (_, s)), &o) in c.iter().zip(axes).zip(&over) {
            if o {
                index = index * s + x;
            } else {
                rest.push(x);
            }
        }
        by_rest.entry(rest).or_default().push((index, d));
    }
    by_rest
        .into_values()
        .map(|mut m| {
            m.sort_unstable();
            m.into_iter().map(|(_, d)| d).collect()
        })
        .collect()
}

/// One dimension's entry of a [`PartitionSpec`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum SpecEntry {
    /// Not split: every device holds the whole dimension (`None` in JAX).
    Replicated,
    /// Split over these mesh axes, the first outermost (JAX's `("data", "model")`).
    Axes(Vec<String>),
}

impl From<&str> for SpecEntry {
    fn from(a: &str) -> SpecEntry {
        SpecEntry::Axes(vec![a.to_string()])
    }
}
impl From<String> for SpecEntry {
    fn from(a: String) -> SpecEntry {
        SpecEntry::Axes(vec![a])
    }
}
impl From<Option<&str>> for SpecEntry {
    fn from(a: Option<&str>) -> SpecEntry {
        a.map_or(SpecEntry::Replicated, SpecEntry::from)
    }
}
impl From<&[&str]> for SpecEntry {
    fn from(a: &[&str]) -> SpecEntry {
        if a.is_empty() {
            SpecEntry::Replicated
        } else {
            SpecEntry::Axes(a.iter().map(|s| s.to_string()).collect())
        }
    }
}

/// Per array dimension, the mesh axes that split it (JAX's `PartitionSpec`, written `P` there and
/// [`P!`](crate::P) here). Dimensions past the spec's length are not split; mesh axes the spec does
/// not name replicate the array. `PartitionSpec::default()` (`P![]`) replicates the whole array.
///
/// ```
/// use brigade::{P, PartitionSpec, SpecEntry};
/// let rows = P!["data", None];
/// assert_eq!(rows, PartitionSpec::new(vec!["data".into(), SpecEntry::Replicated]));
/// // A dimension split over two axes at once, and the builder form.
/// let both = P![("data", "model")];
/// assert_eq!(both, PartitionSpec::from_axes(&[&["data", "model"]]));
/// assert_eq!(both.to_string(), "P(('data', 'model'))");
/// # Ok::<(), brigade::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PartitionSpec(Vec<SpecEntry>);

impl PartitionSpec {
    /// A spec from its entries, one per leading dimension.
    pub fn new(entries: Vec<SpecEntry>) -> PartitionSpec {
        PartitionSpec(entries)
    }
    /// Fully replicated (`P![]`).
    pub fn replicated() -> PartitionSpec {
        PartitionSpec(Vec::new())
    }
    /// A spec from axis-name lists, one per leading dimension (an empty list: not split).
    pub fn from_axes(dims: &[&[&str]]) -> PartitionSpec {
        PartitionSpec(dims.iter().map(|d| SpecEntry::from(*d)).collect())
    }
    /// The entries, one per leading dimension.
    pub fn entries(&self) -> &[SpecEntry] {
        &self.0
    }
    /// The mesh axes splitting dimension `dim` (empty when it is not split).
    pub fn axes_of(&self, dim: usize) -> &[String] {
        match self.0.get(dim) {
            Some(SpecEntry::Axes(a)) => a,
            _ => &[],
        }
    }
    /// The spec of an array with one more, unsplit, dimension at `at` (what `vmap` of a
    /// `shard_map` gives its batched arguments and outputs): entries from `at` on move up one.
    pub(crate) fn with_unsplit_dim(&self, at: usize) -> PartitionSpec {
        let mut e = self.0.clone();
        if at < e.len() {
            e.insert(at, SpecEntry::Replicated);
        }
        PartitionSpec(e)
    }
    /// Every mesh axis the spec names, in order.
    pub fn named_axes(&self) -> Vec<&str> {
        self.0
            .iter()
            .flat_map(|e| match e {
                SpecEntry::Axes(a) => a.iter().map(String::as_str).collect(),
                SpecEntry::Replicated => Vec::new(),
            })
            .collect()
    }
    /// Check the names against `mesh` (known, each used once).
    fn check(&self, op: &'static str, mesh: &Mesh) -> Result<()> {
        let names = self.named_axes();
        for (i, a) in names.iter().enumerate() {
            if mesh.axis_size(a).is_none() {
                return Err(Error::BadSharding {
                    op,
                    detail: format!(
                        "{self} names the axis '{a}', which the mesh lacks (its axes: {}): use one of those names",
                        mesh.axis_names()
                            .iter()
                            .map(|n| format!("'{n}'"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            if names[..i].contains(a) {
                return Err(Error::BadSharding {
                    op,
                    detail: format!(
                        "{self} names the axis '{a}' twice: a mesh axis may split one dimension only"
                    ),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .0
            .iter()
            .map(|e| match e {
                SpecEntry::Replicated => "None".into(),
                SpecEntry::Axes(a) if a.len() == 1 => format!("'{}'", a[0]),
                SpecEntry::Axes(a) => format!(
                    "({})",
                    a.iter()
                        .map(|s| format!("'{s}'"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            })
            .collect();
        write!(f, "P({})", parts.join(", "))
    }
}

/// A [`PartitionSpec`] from its entries, JAX's `P(...)`: a string literal or identifier names one
/// mesh axis, `None` leaves a dimension whole, a parenthesized list splits a dimension over several
/// axes. `P![]` is fully replicated.
///
/// ```
/// use brigade::P;
/// let axis = "model";
/// let s = P![None, axis, ("data", "pipe")];
/// assert_eq!(s.to_string(), "P(None, 'model', ('data', 'pipe'))");
/// ```
#[macro_export]
macro_rules! P {
    ($($e:tt),* $(,)?) => {
        $crate::PartitionSpec::new(vec![$($crate::__spec_entry!($e)),*])
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __spec_entry {
    (None) => {
        $crate::SpecEntry::Replicated
    };
    (($($a:expr),+ $(,)?)) => {
        $crate::SpecEntry::Axes(vec![$(::std::string::String::from($a)),+])
    };
    ($a:expr) => {
        $crate::SpecEntry::from($a)
    };
}

/// Where an array's blocks live: a [`Mesh`] and a [`PartitionSpec`] (JAX's `NamedSharding`).
/// Device `i` of the mesh holds the block its coordinates select; devices that differ only along
/// axes the spec does not name hold the same block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedSharding {
    mesh: Mesh,
    spec: PartitionSpec,
}

impl fmt::Display for NamedSharding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NamedSharding({}, {})", self.mesh, self.spec)
    }
}

impl NamedSharding {
    /// The sharding of `spec` over `mesh`. Errors ([`Error::BadSharding`]): an axis name the mesh
    /// lacks, or one named twice.
    pub fn new(mesh: &Mesh, spec: PartitionSpec) -> Result<NamedSharding> {
        NamedSharding::checked("NamedSharding::new", mesh, spec)
    }
    /// [`NamedSharding::new`] with the operation named in its errors.
    pub(crate) fn checked(
        op: &'static str,
        mesh: &Mesh,
        spec: PartitionSpec,
    ) -> Result<NamedSharding> {
        spec.check(op, mesh)?;
        Ok(NamedSharding {
            mesh: mesh.clone(),
            spec,
        })
    }
    pub fn mesh(&self) -> &Mesh {
        &self.mesh
    }
    pub fn spec(&self) -> &PartitionSpec {
        &self.spec
    }
    /// How many blocks dimension `dim` is cut into.
    fn parts(&self, dim: usize) -> usize {
        self.spec
            .axes_of(dim)
            .iter()
            .map(|a| self.mesh.axis_size(a).unwrap_or(1))
            .product()
    }
    /// The shape of one device's block of an array of `global` shape. Errors: a spec longer than
    /// the rank ([`Error::BadSharding`]), a dimension its axes do not divide ([`Error::UnevenShard`],
    /// naming the padding that works).
    pub fn shard_shape(&self, global: &[usize]) -> Result<Vec<usize>> {
        self.shard_shape_for("NamedSharding::shard_shape", global, None)
    }

    pub(crate) fn shard_shape_for(
        &self,
        op: &'static str,
        global: &[usize],
        arg: Option<usize>,
    ) -> Result<Vec<usize>> {
        let what = match arg {
            Some(i) => format!("argument {i}"),
            None => "the array".into(),
        };
        if self.spec.0.len() > global.len() {
            return Err(Error::BadSharding {
                op,
                detail: format!(
                    "{} has {} entries but {what} has rank {} (shape {global:?}): give at most one entry per dimension",
                    self.spec,
                    self.spec.0.len(),
                    global.len()
                ),
            });
        }
        let mut local = global.to_vec();
        for (dim, l) in local.iter_mut().enumerate() {
            let parts = self.parts(dim);
            if !l.is_multiple_of(parts) {
                return Err(Error::UnevenShard {
                    op,
                    what,
                    dim,
                    size: *l,
                    axes: self.spec.axes_of(dim).join("', '"),
                    parts,
                    pad: l.div_ceil(parts) * parts,
                });
            }
            *l /= parts;
        }
        Ok(local)
    }

    /// The global shape of an array whose blocks have shape `local`.
    pub fn global_shape(&self, local: &[usize]) -> Vec<usize> {
        local
            .iter()
            .enumerate()
            .map(|(d, &l)| l * self.parts(d))
            .collect()
    }

    /// Which block of dimension `dim` device `i` holds.
    fn block_index(&self, i: usize, dim: usize) -> usize {
        let c = self.mesh.coords(i);
        self.spec.axes_of(dim).iter().fold(0, |acc, a| {
            let p = self.mesh.position(a).expect("checked axis");
            acc * self.mesh.inner.axes[p].1 + c[p]
        })
    }

    /// Device `i`'s block of the host array `h` (of the global shape; checked by the caller).
    pub(crate) fn block_of(&self, h: &HostArray, i: usize) -> HostArray {
        let mut b = h.clone();
        for dim in 0..h.shape.len() {
            let parts = self.parts(dim);
            if parts > 1 {
                let len = h.shape[dim] / parts;
                b = take_block(&b, dim, self.block_index(i, dim) * len, len);
            }
        }
        b
    }

    /// The devices whose blocks make up the array once each (the first holder of every block), in
    /// the row-major order of the block grid.
    #[cfg(feature = "mpi")]
    pub(crate) fn distinct_blocks(&self, rank: usize) -> Vec<usize> {
        let grid: Vec<usize> = (0..rank).map(|d| self.parts(d)).collect();
        let count: usize = grid.iter().product();
        let mut holder = vec![usize::MAX; count];
        for i in 0..self.mesh.size() {
            let k = (0..rank).fold(0, |acc, d| acc * grid[d] + self.block_index(i, d));
            if holder[k] == usize::MAX {
                holder[k] = i;
            }
        }
        holder
    }

    /// For each distinct block (in the order of [`NamedSharding::distinct_blocks`]), the index
    /// among this process's devices ([`Mesh::devices`]) of one that holds it; `None` when some
    /// block is held only by other processes (a spanning array that is not fully addressable).
    pub(crate) fn local_blocks(&self, rank: usize) -> Option<Vec<usize>> {
        let grid: Vec<usize> = (0..rank).map(|d| self.parts(d)).collect();
        let count: usize = grid.iter().product();
        let mut holder = vec![None; count];
        let offset = self.mesh.offset();
        for d in 0..self.mesh.devices().len() {
            let i = offset + d;
            let k = (0..rank).fold(0, |acc, r| acc * grid[r] + self.block_index(i, r));
            holder[k].get_or_insert(d);
        }
        holder.into_iter().collect()
    }

    /// The same spec over this process's part of the mesh ([`Mesh::local_mesh`]): how a
    /// process's part of a spanning array (`Array::process_local`, feature `mpi`) is laid out.
    pub fn local(&self) -> NamedSharding {
        NamedSharding {
            mesh: self.mesh.local_mesh(),
            spec: self.spec.clone(),
        }
    }

    /// The global array from the blocks of [`NamedSharding::distinct_blocks`] (in that order).
    pub(crate) fn assemble(&self, blocks: Vec<HostArray>) -> HostArray {
        let rank = blocks.first().map_or(0, |b| b.shape.len());
        let mut level = blocks;
        // Join the innermost dimension's blocks first, then outwards.
        for dim in (0..rank).rev() {
            let k = self.parts(dim);
            if k == 1 {
                continue;
            }
            level = level
                .chunks(k)
                .map(|c| concat_axis(&c.iter().collect::<Vec<_>>(), dim))
                .collect();
        }
        level.swap_remove(0)
    }

    /// Do the two place every element on the same devices the same way (axis names aside)?
    pub(crate) fn same_placement(&self, other: &NamedSharding, rank: usize) -> bool {
        self.mesh.devices() == other.mesh.devices()
            && self.mesh.inner.span == other.mesh.inner.span
            && (0..self.mesh.size()).all(|i| {
                (0..rank).all(|d| {
                    self.parts(d) == other.parts(d)
                        && self.block_index(i, d) == other.block_index(i, d)
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn axes(v: &[(&str, usize)]) -> Vec<(String, usize)> {
        v.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn groups_follow_the_named_axes() {
        let m = axes(&[("data", 2), ("model", 3)]);
        // Devices 0..6 at (data, model) = (d / 3, d % 3).
        assert_eq!(groups(&m, &["model"]), vec![vec![0, 1, 2], vec![3, 4, 5]]);
        assert_eq!(
            groups(&m, &["data"]),
            vec![vec![0, 3], vec![1, 4], vec![2, 5]]
        );
        assert_eq!(groups(&m, &["data", "model"]), vec![vec![0, 1, 2, 3, 4, 5]]);
        assert_eq!(groups(&m, &["model", "data"]), vec![vec![0, 1, 2, 3, 4, 5]]);
        assert_eq!(coords(&m, 4), vec![1, 1]);
    }

    #[test]
    fn a_process_block_is_a_sub_grid_or_refused() {
        // 2 processes × 2 devices over data × model: each process one row of the grid.
        assert_eq!(
            local_extent(&[("data", 2), ("model", 2)], 2),
            Some(axes(&[("data", 1), ("model", 2)]))
        );
        // One axis of 8 over 4 processes: runs of 2.
        assert_eq!(local_extent(&[("d", 8)], 2), Some(axes(&[("d", 2)])));
        // 3 × 2 over 2 processes of 3: positions 0..3 are (0,0) (0,1) (1,0), not a grid.
        assert_eq!(local_extent(&[("a", 3), ("b", 2)], 3), None);
        // 2 × 3 over 3 processes of 2: (0,0) (0,1), then (0,2) (1,0).
        assert_eq!(local_extent(&[("a", 2), ("b", 3)], 2), None);
        // A block of 4 over 2 × 2 × 2: the inner two axes whole.
        assert_eq!(
            local_extent(&[("a", 2), ("b", 2), ("c", 2)], 4),
            Some(axes(&[("a", 1), ("b", 2), ("c", 2)]))
        );
    }

    #[test]
    fn spec_macro_forms() {
        let a = "x";
        assert_eq!(
            P![a, None, ("y", "z")],
            PartitionSpec::new(vec![
                SpecEntry::Axes(vec!["x".into()]),
                SpecEntry::Replicated,
                SpecEntry::Axes(vec!["y".into(), "z".into()]),
            ])
        );
        assert_eq!(P![], PartitionSpec::replicated());
        assert_eq!(P![None, "m"].named_axes(), vec!["m"]);
    }
}
