//! The one error type of brigade.
//!
//! Variants are grouped by kind: shape/axis, dtype, tracing, device (lost, out of memory and over a
//! limit are kept apart: only out-of-memory may succeed on retry), parallel maps and collectives
//! (each message says how to fix the call, and which of `pmap` / `shard_map` was probably meant
//! where the two differ), compilation, and usage errors.

use crate::dtype::DType;

/// Result alias used throughout brigade.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every way a brigade call can fail. No public function panics on user input; it returns one of these.
/// New variants may come in minor releases (`#[non_exhaustive]`): match with a `_` arm, or on
/// [`Error::kind`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ---- shapes and axes -------------------------------------------------------------------
    /// Two operands of a broadcasting binary op have shapes that do not broadcast.
    #[error(
        "{op}: shapes {lhs:?} and {rhs:?} do not broadcast (each dimension must match or be 1)"
    )]
    ShapeMismatchBinaryOp {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
    },

    /// Matmul / dot_general operands disagree on a contracted or batch dimension.
    #[error("{op}: lhs {lhs:?} and rhs {rhs:?} do not fit: {detail}")]
    MatmulShape {
        op: &'static str,
        lhs: Vec<usize>,
        rhs: Vec<usize>,
        detail: String,
    },

    /// An axis index outside `[-rank, rank)` or repeated.
    #[error(
        "{op}: axis {axis} is out of range for an array of rank {rank} (shape {shape:?}); valid axes are -{rank}..{rank}"
    )]
    BadAxis {
        op: &'static str,
        axis: i64,
        rank: usize,
        shape: Vec<usize>,
    },

    /// Reshape to a shape with a different element count.
    #[error("reshape: cannot reshape {from:?} ({from_n} elements) into {to:?} ({to_n} elements)")]
    BadReshape {
        from: Vec<usize>,
        from_n: usize,
        to: Vec<usize>,
        to_n: usize,
    },

    /// Any other invalid shape argument (slice bounds, permutation, concatenation, pad, ...).
    #[error("{op}: {detail} (shape {shape:?})")]
    BadShapeArg {
        op: &'static str,
        shape: Vec<usize>,
        detail: String,
    },

    /// `einsum` subscripts that are malformed or do not fit the operands (rank, sizes, output).
    #[error("{op}: subscripts {subscripts:?} do not fit{}: {detail}", shapes_note(.shapes))]
    BadSubscripts {
        op: &'static str,
        subscripts: String,
        /// Shapes of the operands.
        shapes: Vec<Vec<usize>>,
        detail: String,
    },

    /// A shape whose element count (or size in bytes) overflows 64-bit arithmetic: no memory can
    /// ever hold it, so it is refused before anything is allocated or computed.
    #[error(
        "{op}: shape {shape:?} is too large: {detail}; no memory can hold it (use smaller dimensions)"
    )]
    ShapeTooLarge {
        op: &'static str,
        shape: Vec<usize>,
        detail: String,
    },

    /// The number of data elements does not match the shape.
    #[error("array data has {got} elements but shape {shape:?} needs {expected}")]
    DataLength {
        shape: Vec<usize>,
        expected: usize,
        got: usize,
    },

    // ---- dtypes ---------------------------------------------------------------------------
    /// Operand dtypes that the op does not accept together.
    #[error(
        "{op}: dtypes {lhs} and {rhs} differ{}; cast one operand with .cast({lhs}) or .cast({rhs})", shapes_note(.shapes)
    )]
    DTypeMismatch {
        op: &'static str,
        lhs: DType,
        rhs: DType,
        /// Shapes of the operands involved (empty where none apply).
        shapes: Vec<Vec<usize>>,
    },

    /// An op applied to a dtype it is not defined for.
    #[error("{op} is not defined for {dtype}{}: {hint}", shapes_note(.shapes))]
    BadDType {
        op: &'static str,
        dtype: DType,
        hint: &'static str,
        /// Shapes of the operands involved (empty where none apply).
        shapes: Vec<Vec<usize>>,
    },

    // ---- tracing ---------------------------------------------------------------------------
    /// The data of a traced value was requested inside a transformed function.
    #[error(
        "cannot read the value of a traced tensor (shape {shape:?}, {dtype}) while tracing `{context}`: its data does not exist yet. Use `cond` (or `switch`) to choose between branches on a traced predicate, `select`/`where_` to pick per element, and `fori_loop`/`scan` for loops"
    )]
    TracedValue {
        shape: Vec<usize>,
        dtype: DType,
        context: String,
    },

    /// Tensors from two different traces were mixed, or a traced tensor outlived its trace (it was
    /// kept outside the function that `jit` or a transform traced, and used later).
    #[error("{op}: {detail}")]
    TraceMismatch { op: &'static str, detail: String },

    /// `Jit::donate_argnums` names an argument that cannot be donated: one past the arguments
    /// (`other` None), or an array also passed at position `other` (its buffer would be
    /// overwritten while the program still reads it there).
    #[error("donate_argnums: {detail}")]
    BadDonation {
        donated: usize,
        other: Option<usize>,
        detail: String,
    },

    /// The function was called with the wrong number of arguments.
    #[error("{what}: expected {expected} arguments, got {got}")]
    Arity {
        what: String,
        expected: usize,
        got: usize,
    },

    // ---- devices ----------------------------------------------------------------------------
    /// No device matched the request.
    #[error("no device: {0}")]
    NoDevice(String),

    /// The layout string in `BRIGADE_DEVICES` or the builder could not be used.
    #[error("bad device layout {spec:?}: {detail}")]
    BadDeviceSpec { spec: String, detail: String },

    /// The device was lost (driver reset, device destroyed). Not recoverable for this device.
    #[error("device {device} lost: {reason}")]
    DeviceLost { device: String, reason: String },

    /// The device ran out of memory. Freeing arrays and retrying may succeed.
    #[error(
        "device {device} out of memory: {detail}. Free arrays you no longer need and retry, or use more devices"
    )]
    OutOfMemory { device: String, detail: String },

    /// A buffer can never fit this device: it is over a hard limit. Retrying will not help.
    #[error(
        "{what} needs {needed} {unit} but device {device} allows at most {limit} {unit} ({limit_name}); split the work over more devices or smaller batches"
    )]
    OverLimit {
        device: String,
        what: String,
        needed: u64,
        limit: u64,
        unit: &'static str,
        limit_name: &'static str,
    },

    /// Any other error reported by wgpu (validation, internal).
    #[error("device {device}: {message}")]
    Wgpu { device: String, message: String },

    /// A buffer given to or asked of brigade does not fit its use (an app's wgpu buffer without
    /// the usages, alignment or size needed, from another device; output usages brigade cannot
    /// give; outputs of `call_into` that do not match the program). The detail names the fix.
    #[error("{op}{}: {detail}", if device.is_empty() { String::new() } else { format!(" on device {device}") })]
    BadBuffer {
        op: &'static str,
        device: String,
        detail: String,
    },

    /// An array written by commands recorded with `Jit::encode` / `Jit::encode_into` was read (or
    /// passed to `call`) but those commands never ran: the app's encoder was not submitted, or
    /// its submission failed (an encoder of another wgpu device, submitted on another queue).
    /// The detail names the fix.
    #[error("on device {device}: {detail}")]
    NotComputed { device: String, detail: String },

    /// Transfer between host and device failed.
    #[error("transfer on device {device} failed: {detail}")]
    Transfer { device: String, detail: String },

    // ---- parallel maps and collectives -------------------------------------------------------
    /// Split mode (`shard_map`): an axis cannot be cut into equal blocks over the devices.
    #[error(
        "{op}: argument {arg} has {size} rows along axis {axis}, which cannot be split evenly over {devices} devices: use {fits} devices, or pad to {pad} rows{hint}"
    )]
    IndivisibleSplit {
        op: &'static str,
        arg: usize,
        axis: usize,
        size: usize,
        devices: usize,
        /// The device counts that divide `size` ("1, 2, 4, 5 or 8").
        fits: String,
        /// The next multiple of `devices` at or above `size`.
        pad: usize,
        hint: String,
    },

    /// `pmap`: more shards (entries along the mapped axis) than devices.
    #[error(
        "pmap: the mapped axis has {shards} entries but only {devices} devices are available; pmap runs one entry per device{hint}"
    )]
    TooManyShards {
        shards: usize,
        devices: usize,
        hint: String,
    },

    /// Two mapped arguments disagree on the mapped size.
    #[error(
        "{op}: mapped sizes disagree: argument {first_arg} has {first_size} entries along axis {first_axis} but argument {arg} has {size} along axis {axis}; every mapped argument needs the same size{hint}"
    )]
    MappedSizeMismatch {
        op: &'static str,
        first_arg: usize,
        first_axis: usize,
        first_size: usize,
        arg: usize,
        axis: usize,
        size: usize,
        hint: String,
    },

    /// `axis_size` given, and a mapped argument disagrees with it.
    #[error(
        "{op}: axis_size is {axis_size} but argument {arg} has {size} entries along its mapped axis {axis}; drop axis_size or make them agree"
    )]
    AxisSizeMismatch {
        op: &'static str,
        axis_size: usize,
        arg: usize,
        axis: usize,
        size: usize,
    },

    /// Every `in_axes` entry is None and no `axis_size` says how many shards to run.
    #[error(
        "{op}: every in_axes entry is None, so no argument says how many shards to run: map at least one argument (in_axes Some(axis)) or give axis_size"
    )]
    NothingMapped { op: &'static str },

    /// A collective names a parallel axis that no enclosing `pmap` / `shard_map` binds.
    #[error(
        "{op}: no parallel axis named '{name}' is bound here ({bound}); collectives run inside pmap/shard_map over the axis_name given there, e.g. pmap(f).axis_name(\"{name}\")"
    )]
    UnboundAxis {
        op: &'static str,
        name: String,
        /// "bound axes: 'i'" or "no pmap/shard_map is being traced".
        bound: String,
    },

    /// `out_axes` None for an output that differs between devices.
    #[error(
        "{op}: output {output} differs between devices ({why}), so out_axes None cannot return it as one value: use out_axes Some(axis) to keep every device's value, or make it identical first with psum/pmean/pmax/pmin/all_gather"
    )]
    VaryingOutput {
        op: &'static str,
        output: usize,
        why: String,
    },

    /// A collective's own arguments do not fit its operand (axis out of range, sizes, permutation).
    #[error("{op} over axis '{axis_name}': {detail} (operand shape {shape:?})")]
    BadCollective {
        op: &'static str,
        axis_name: String,
        shape: Vec<usize>,
        detail: String,
    },

    /// A mesh, partition spec or sharding that does not fit (sizes that do not multiply to the
    /// device count, unknown or repeated axis names, a spec longer than the rank, an array on the
    /// devices of another mesh).
    #[error("{op}: {detail}")]
    BadSharding { op: &'static str, detail: String },

    /// A spec splits a dimension over mesh axes whose sizes do not divide it.
    #[error(
        "{op}: dimension {dim} of {what} has {size} entries, which cannot be split evenly over mesh axes ('{axes}') of total size {parts}: pad it to {pad} (a multiple of {parts}), or split another dimension"
    )]
    UnevenShard {
        op: &'static str,
        /// "argument 2" or "the array".
        what: String,
        dim: usize,
        size: usize,
        /// The axis names, joined.
        axes: String,
        parts: usize,
        /// The next multiple of `parts` at or above `size`.
        pad: usize,
    },

    /// Any other bad argument of a parallel map (in_axes, out_axes, static arguments, devices).
    #[error("{op}: {detail}")]
    BadParallelArg { op: &'static str, detail: String },

    // ---- differentiation ------------------------------------------------------------------------
    /// `grad` of something that has no gradient: a non-scalar or integer output, an integer
    /// argument, an argument number out of range.
    #[error("{op}: {detail}")]
    NotDifferentiable { op: &'static str, detail: String },

    // ---- control flow --------------------------------------------------------------------------
    /// The branches of a `cond` / `switch` do not return the same outputs.
    #[error(
        "{op}: {branch_name} returns {got} but {reference} returns {want}: every branch must return the same number of outputs, each with the same shape and dtype (pad, reshape or cast inside the branch so that they agree)"
    )]
    BranchMismatch {
        op: &'static str,
        /// Index of the disagreeing branch (`cond`: 0 is `on_false`, 1 is `on_true`, as `lax.cond`).
        branch: usize,
        /// How the user wrote that branch: `on_true` / `on_false` for `cond`, `branch 2` for `switch`.
        branch_name: String,
        /// The branch it was compared with, named the same way.
        reference: String,
        want: String,
        got: String,
    },

    /// A loop body (`scan`, `fori_loop`) returns a carry unlike the one it receives.
    #[error(
        "{op}: the body receives the carry {want} but returns {got}: a loop carry keeps its shapes and dtypes from one iteration to the next (cast or reshape inside the body, or stack growing values as scan outputs instead)"
    )]
    CarryMismatch {
        op: &'static str,
        want: String,
        got: String,
    },

    // ---- processes (multi-process meshes, feature `mpi`) ------------------------------------
    /// The processes of a multi-process run reached an exchange with different collectives,
    /// shapes or sequence numbers: their programs diverged. Raised on every process.
    #[error(
        "processes diverged at exchange #{exchange}: {detail}\nhelp: every process must run the same parallel calls in the same order on arrays of the same shapes (trace with shapes that do not depend on the process index)"
    )]
    ProcessDivergence { exchange: u64, detail: String },

    /// MPI failed, or the other processes did not reach an exchange before the timeout (one exited
    /// early or is stuck). MPI state is unusable afterwards: end the process.
    #[error("{op}: {detail}")]
    ProcessFailure { op: &'static str, detail: String },

    /// Data access to a device of another process.
    #[error(
        "device {device} belongs to process {owner}, not to this process ({here}): only this process's devices (distributed::local_devices) hold data here; read the addressable shards, or gather inside pmap first"
    )]
    NotAddressable {
        device: usize,
        owner: usize,
        here: usize,
    },

    /// Reading whole an array that spans processes (`Array::from_process_local`, feature `mpi`): this
    /// process holds only its shards.
    #[error(
        "{op}: the array of shape {shape:?} spans {processes} processes and this process ({here}) holds only its shards (global devices {first}..{last}): read them with Array::shards, gather the whole value on every process with distributed::process_allgather, or all_gather inside a pmap"
    )]
    NotFullyAddressable {
        op: &'static str,
        shape: Vec<usize>,
        processes: usize,
        here: usize,
        first: usize,
        last: usize,
    },

    // ---- compilation -------------------------------------------------------------------------
    /// A generated shader failed naga validation or pipeline creation.
    #[error("shader `{kernel}` failed to compile: {message}\n---- WGSL ----\n{wgsl}")]
    Compile {
        kernel: String,
        message: String,
        wgsl: String,
    },

    /// A primitive that has no lowering on this path.
    #[error("{op} cannot run {detail}")]
    Unsupported { op: &'static str, detail: String },
}

/// What kind of failure an [`Error`] is, as the enum's groups say: match on this to handle a
/// class of errors without listing variants (new variants join an existing kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Shapes, axes, sizes and data lengths that do not fit the operation.
    Shape,
    /// Dtypes that do not fit the operation or the device.
    DType,
    /// Misuse of traced values, or arguments that do not match a traced program.
    Trace,
    /// No device, a bad device layout or variable, a wgpu error, a failed transfer, a buffer that
    /// does not fit its use.
    Device,
    /// The device was lost or destroyed: not recoverable for that device.
    DeviceLost,
    /// Out of memory: freeing arrays and retrying may succeed.
    OutOfMemory,
    /// Over a hard limit of the device: retrying never helps.
    OverLimit,
    /// Parallel maps, shardings and collectives.
    Parallel,
    /// Differentiation and control flow (`grad` of what has no gradient, `cond`/`scan` bodies that
    /// do not agree).
    Transform,
    /// Processes of a multi-process mesh (feature `mpi`).
    Process,
    /// Compiling a kernel failed, or a primitive cannot run on this path.
    Compile,
}

impl Error {
    /// The kind of this error.
    ///
    /// ```
    /// use brigade::{ErrorKind, Tensor};
    /// let a = Tensor::from_vec(vec![1.0f32; 6], &[2, 3]);
    /// let e = a.matmul(&a).to_vec::<f32>().unwrap_err(); // (2, 3) @ (2, 3)
    /// assert_eq!(e.kind(), ErrorKind::Shape);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        use ErrorKind as K;
        match self {
            Error::ShapeMismatchBinaryOp { .. }
            | Error::MatmulShape { .. }
            | Error::BadAxis { .. }
            | Error::BadReshape { .. }
            | Error::BadShapeArg { .. }
            | Error::BadSubscripts { .. }
            | Error::ShapeTooLarge { .. }
            | Error::DataLength { .. } => K::Shape,
            Error::DTypeMismatch { .. } | Error::BadDType { .. } => K::DType,
            Error::TracedValue { .. }
            | Error::TraceMismatch { .. }
            | Error::BadDonation { .. }
            | Error::Arity { .. } => K::Trace,
            Error::NoDevice(_)
            | Error::BadDeviceSpec { .. }
            | Error::Wgpu { .. }
            | Error::BadBuffer { .. }
            | Error::NotComputed { .. }
            | Error::Transfer { .. } => K::Device,
            Error::DeviceLost { .. } => K::DeviceLost,
            Error::OutOfMemory { .. } => K::OutOfMemory,
            Error::OverLimit { .. } => K::OverLimit,
            Error::IndivisibleSplit { .. }
            | Error::TooManyShards { .. }
            | Error::MappedSizeMismatch { .. }
            | Error::AxisSizeMismatch { .. }
            | Error::NothingMapped { .. }
            | Error::UnboundAxis { .. }
            | Error::VaryingOutput { .. }
            | Error::BadCollective { .. }
            | Error::BadSharding { .. }
            | Error::UnevenShard { .. }
            | Error::BadParallelArg { .. } => K::Parallel,
            Error::NotDifferentiable { .. }
            | Error::BranchMismatch { .. }
            | Error::CarryMismatch { .. } => K::Transform,
            Error::ProcessDivergence { .. }
            | Error::ProcessFailure { .. }
            | Error::NotAddressable { .. }
            | Error::NotFullyAddressable { .. } => K::Process,
            Error::Compile { .. } | Error::Unsupported { .. } => K::Compile,
        }
    }

    /// True for errors caused by the arguments given (shapes, axes, dtypes, tracing misuse).
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            Error::ShapeMismatchBinaryOp { .. }
                | Error::MatmulShape { .. }
                | Error::BadAxis { .. }
                | Error::BadReshape { .. }
                | Error::BadShapeArg { .. }
                | Error::BadSubscripts { .. }
                | Error::DataLength { .. }
                | Error::ShapeTooLarge { .. }
                | Error::DTypeMismatch { .. }
                | Error::BadDType { .. }
                | Error::TracedValue { .. }
                | Error::TraceMismatch { .. }
                | Error::Arity { .. }
                | Error::BadDonation { .. }
                | Error::IndivisibleSplit { .. }
                | Error::TooManyShards { .. }
                | Error::MappedSizeMismatch { .. }
                | Error::AxisSizeMismatch { .. }
                | Error::NothingMapped { .. }
                | Error::UnboundAxis { .. }
                | Error::VaryingOutput { .. }
                | Error::BadCollective { .. }
                | Error::BadParallelArg { .. }
                | Error::BadSharding { .. }
                | Error::UnevenShard { .. }
                | Error::NotDifferentiable { .. }
                | Error::BranchMismatch { .. }
                | Error::CarryMismatch { .. }
                | Error::BadBuffer { .. }
                | Error::NotComputed { .. }
                | Error::ProcessDivergence { .. }
                | Error::NotAddressable { .. }
                | Error::NotFullyAddressable { .. }
        )
    }
}

/// The fix named by [`Error::BadDType`] when an f64 value meets a GPU device.
pub(crate) const F64_ON_GPU: &str = "WGSL has no f64: cast to f32 with .cast(DType::F32), or run on the cpu device (BRIGADE_DEVICES=cpu, or .on(cpu device))";

/// The error for an f64 value of `shape` meeting a GPU device in `op`.
pub(crate) fn f64_on_gpu(op: &'static str, shape: &[usize]) -> Error {
    Error::BadDType {
        op,
        dtype: DType::F64,
        hint: F64_ON_GPU,
        shapes: vec![shape.to_vec()],
    }
}

/// " (operand shapes [2, 3] and [3])" for messages, or nothing.
fn shapes_note(shapes: &[Vec<usize>]) -> String {
    match shapes {
        [] => String::new(),
        [one] => format!(" (operand shape {one:?})"),
        many => format!(
            " (operand shapes {})",
            many.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
    }
}
