//! Many processes, one mesh (feature `mpi`): the JAX multi-controller model over MPI.
//!
//! Every process runs the same program. [`initialize`] joins `MPI_COMM_WORLD` (rank and size)
//! and exchanges each process's device list; [`devices`] is then the global list, process-major
//! (process 0's devices first, as JAX orders them), and [`local_devices`] the ones this process
//! holds. A `pmap` or split-mode `shard_map` called after [`initialize`] (with more than one
//! process) spans every process: each process passes its own shards (leading axis = its local
//! device count, the same on every process), `axis_index` is the global device index, and each
//! collective gathers every process's local operands (MPI all-gather, process order) and combines
//! them in global device order on every process — so results are the same bits on every process,
//! and the same as one process running all the devices. Their outputs are global arrays: this
//! process holds its devices' shards ([`Array::is_fully_addressable`] is false unless the value
//! is replicated), [`Array::process_local`] is its part and [`process_allgather`] the whole.
//!
//! A [`crate::Mesh`] spans processes too: [`crate::Mesh::new_global`] lays the global device
//! list out as a grid (e.g. `("data", 2 processes) × ("model", 2 local devices)`), a
//! [`crate::NamedSharding`] over it places each process's blocks on its devices
//! ([`Array::from_process_local`], [`crate::device_put`]), and `shard_map` over it runs every
//! process's devices with collectives over any mesh axis, crossing processes or not.
//!
//! Failure is an error, not a hang: before each exchange the processes compare a header (exchange
//! number, collectives, shapes, dtypes, device count) and raise [`Error::ProcessDivergence`]
//! everywhere when they differ; every wait is bounded by [`TIMEOUT_ENV`] seconds (default 60), so
//! a process that exits early makes the others fail with [`Error::ProcessFailure`].
//!
//! ```text
//! mpirun -n 4 target/debug/examples/multihost_training
//! ```

use crate::array::{ShardLayout, Storage};
use crate::ops::collective::{concat_axis, take_block};
use crate::{Array, Device, Error, HostArray, HostData, Result};
use mpi::ffi;
use mpi::traits::Communicator;
use std::ffi::{c_int, c_void};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Seconds a process waits for the others at one exchange before it fails (default 60): a
/// positive number, digits with an optional decimal fraction (`60`, `0.5`), at most 10^9.
pub const TIMEOUT_ENV: &str = "BRIGADE_MPI_TIMEOUT";

const DEFAULT_TIMEOUT_S: f64 = 60.0;

/// `1` (or `on`, `true`): start in fast mode (see [`set_fast`]); `0`, `off` or `false`: not.
pub const FAST_ENV: &str = "BRIGADE_MPI_FAST";

/// A device of the global list: this process's (addressable) or another process's.
#[derive(Clone)]
pub struct GlobalDevice {
    /// Position in the global list (process-major).
    pub id: usize,
    /// The process that holds it.
    pub process_index: usize,
    /// Its position in that process's [`local_devices`].
    pub local_index: usize,
    /// Its adapter, as its process describes it.
    pub description: String,
    local: Option<Device>,
}

impl GlobalDevice {
    /// Does this process hold it (can it hold data here)?
    pub fn is_addressable(&self) -> bool {
        self.local.is_some()
    }

    /// The device itself: this process's only; another process's is [`Error::NotAddressable`].
    pub fn device(&self) -> Result<&Device> {
        self.local.as_ref().ok_or(Error::NotAddressable {
            device: self.id,
            owner: self.process_index,
            here: process_index(),
        })
    }
}

impl std::fmt::Debug for GlobalDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GlobalDevice({} = process {} device {}: {})",
            self.id, self.process_index, self.local_index, self.description
        )
    }
}

struct State {
    /// Dropped (MPI_Finalize) by [`shutdown`]; kept alive otherwise.
    universe: Option<mpi::environment::Universe>,
    index: usize,
    count: usize,
    global: Vec<GlobalDevice>,
    local: Vec<Device>,
    /// Exchanges so far (the header's sequence number).
    seq: u64,
    /// Set when a wait timed out: MPI has a collective in flight that never completes, so later
    /// calls fail at once and [`shutdown`] does not finalize (it would wait for it).
    broken: Option<String>,
    /// Fast mode: all-reduces over every device use `MPI_Allreduce` (see [`set_fast`]).
    fast: bool,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

/// Work across processes done by this process so far ([`counters`]): how each exchange was
/// combined, the bytes it moved and the time it took.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExchangeCounters {
    /// Exchanges combined exactly: every process's operands all-gathered (`MPI_Allgatherv`) and
    /// folded in global device order on every process (the default).
    pub gathered: u64,
    /// All-reduces combined by `MPI_Allreduce` (fast mode, [`set_fast`]): one per collective.
    pub all_reduced: u64,
    /// Payload bytes this process handed to MPI (headers and sizes not counted).
    pub bytes_sent: u64,
    /// Payload bytes MPI delivered to this process.
    pub bytes_received: u64,
    /// Time spent waiting on MPI collectives (header checks included).
    pub mpi_time: Duration,
    /// Time spent in whole cross-process exchanges: reading the operands from the devices, MPI,
    /// combining, and writing the results to the devices — a parallel call's communication time.
    pub exchange_time: Duration,
}

impl ExchangeCounters {
    /// Work done between `earlier` and `self`.
    pub fn since(&self, earlier: &ExchangeCounters) -> ExchangeCounters {
        ExchangeCounters {
            gathered: self.gathered.saturating_sub(earlier.gathered),
            all_reduced: self.all_reduced.saturating_sub(earlier.all_reduced),
            bytes_sent: self.bytes_sent.saturating_sub(earlier.bytes_sent),
            bytes_received: self.bytes_received.saturating_sub(earlier.bytes_received),
            mpi_time: self.mpi_time.saturating_sub(earlier.mpi_time),
            exchange_time: self.exchange_time.saturating_sub(earlier.exchange_time),
        }
    }
}

/// Kept apart from [`STATE`] so that they survive [`shutdown`] and are read without MPI.
static COUNTERS: Mutex<ExchangeCounters> = Mutex::new(ExchangeCounters {
    gathered: 0,
    all_reduced: 0,
    bytes_sent: 0,
    bytes_received: 0,
    mpi_time: Duration::ZERO,
    exchange_time: Duration::ZERO,
});

/// This process's [`ExchangeCounters`] (process-wide: MPI calls are serialized anyway).
///
/// ```
/// let before = brigade::distributed::counters();
/// // ... parallel calls across processes ...
/// let work = brigade::distributed::counters().since(&before);
/// assert_eq!(work.all_reduced, 0);
/// ```
pub fn counters() -> ExchangeCounters {
    *crate::cache::lock(&COUNTERS)
}

fn bump(f: impl FnOnce(&mut ExchangeCounters)) {
    f(&mut crate::cache::lock(&COUNTERS));
}

/// Add the time of one whole exchange (see [`ExchangeCounters::exchange_time`]).
pub(crate) fn add_exchange_time(t: Duration) {
    bump(|c| c.exchange_time += t);
}

fn state() -> MutexGuard<'static, Option<State>> {
    crate::cache::lock(&STATE)
}

fn failure(op: &'static str, detail: impl Into<String>) -> Error {
    Error::ProcessFailure {
        op,
        detail: detail.into(),
    }
}

/// MPI's message for an error code (the world communicator returns errors, see [`initialize`]).
fn check(op: &'static str, code: c_int) -> Result<()> {
    if code == 0 {
        return Ok(());
    }
    let mut buf = vec![0u8; 1024];
    let mut len: c_int = 0;
    // SAFETY: the buffer is larger than MPI_MAX_ERROR_STRING (256 in Open MPI and MPICH).
    unsafe { ffi::MPI_Error_string(code, buf.as_mut_ptr().cast(), &mut len) };
    buf.truncate(len.clamp(0, 1024) as usize);
    Err(failure(
        op,
        format!("MPI error {code}: {}", String::from_utf8_lossy(&buf)),
    ))
}

/// Join the processes started by `mpirun`: MPI is initialized (serialized threading: brigade
/// makes one MPI call at a time), the world communicator returns errors instead of aborting, and
/// the processes exchange their device lists (so every process must call it, once, before any
/// parallel call). Calling it again is a no-op. End with [`shutdown`].
pub fn initialize() -> Result<()> {
    let mut guard = state();
    if guard.is_some() {
        return Ok(());
    }
    // Refused here, before MPI starts: the readers during exchanges cannot return an error.
    crate::device::env::read(FAST_ENV, crate::device::env::parse_switch)?;
    crate::device::env::read(TIMEOUT_ENV, crate::device::env::parse_seconds)?;
    let (universe, _) =
        mpi::initialize_with_threading(mpi::Threading::Serialized).ok_or_else(|| {
            failure(
                "distributed::initialize",
                "MPI was initialized already, outside brigade: let brigade initialize it",
            )
        })?;
    // SAFETY: plain MPI calls on the world communicator after MPI_Init.
    check("distributed::initialize", unsafe {
        ffi::MPI_Comm_set_errhandler(ffi::RSMPI_COMM_WORLD, ffi::RSMPI_ERRORS_RETURN)
    })?;
    let world = universe.world();
    let (index, count) = (world.rank() as usize, world.size() as usize);
    let mut st = State {
        universe: Some(universe),
        index,
        count,
        global: Vec::new(),
        local: Vec::new(),
        seq: 0,
        broken: None,
        fast: crate::device::env::read_or_warn(FAST_ENV, crate::device::env::parse_switch)
            .unwrap_or(false),
    };
    // Every process sends its device descriptions, or why it has none (so that all fail alike).
    let local = crate::devices();
    let mine = match &local {
        Ok(devs) => devs
            .iter()
            .map(|d| format!("ok {}", d.info()))
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("error {e}"),
    };
    let all = gather(&mut st, "distributed::initialize", mine.as_bytes())?;
    for (p, bytes) in all.iter().enumerate() {
        let text = String::from_utf8_lossy(bytes);
        if let Some(e) = text.strip_prefix("error ") {
            return Err(failure(
                "distributed::initialize",
                format!("process {p} has no devices: {e}"),
            ));
        }
        for (k, line) in text.lines().enumerate() {
            let local = match p == index {
                true => local.as_ref().ok().map(|d| d[k].clone()),
                false => None,
            };
            st.global.push(GlobalDevice {
                id: st.global.len(),
                process_index: p,
                local_index: k,
                description: line.trim_start_matches("ok ").to_string(),
                local,
            });
        }
    }
    st.local = local?;
    *guard = Some(st);
    Ok(())
}

/// Leave MPI (`MPI_Finalize`): call once at the end, on every process. After a timed-out
/// exchange it does not finalize (MPI would wait for the lost collective); end the process with
/// a non-zero status then.
pub fn shutdown() {
    if let Some(mut st) = state().take() {
        if st.broken.is_some() {
            std::mem::forget(st.universe.take());
        }
    }
}

/// Is [`initialize`] in force?
pub fn is_initialized() -> bool {
    state().is_some()
}

/// This process's index (MPI rank); 0 before [`initialize`].
pub fn process_index() -> usize {
    state().as_ref().map_or(0, |s| s.index)
}

/// The number of processes (MPI world size); 1 before [`initialize`].
pub fn process_count() -> usize {
    state().as_ref().map_or(1, |s| s.count)
}

/// This process's devices (the same as [`crate::devices`]).
pub fn local_devices() -> Result<Vec<Device>> {
    match state().as_ref() {
        Some(s) => Ok(s.local.clone()),
        None => crate::devices(),
    }
}

/// Every process's devices, process-major; another process's device is described but holds no
/// data here ([`GlobalDevice::device`] is [`Error::NotAddressable`]). Before [`initialize`]: this
/// process's devices.
pub fn devices() -> Result<Vec<GlobalDevice>> {
    if let Some(s) = state().as_ref() {
        return Ok(s.global.clone());
    }
    Ok(crate::devices()?
        .into_iter()
        .enumerate()
        .map(|(k, d)| GlobalDevice {
            id: k,
            process_index: 0,
            local_index: k,
            description: d.info().to_string(),
            local: Some(d),
        })
        .collect())
}

/// Fast mode (default off; env [`FAST_ENV`]): an all-reduce (`psum`, `pmean`, `pmax`, `pmin`)
/// over every device first folds this process's devices, then combines the processes with
/// `MPI_Allreduce` — less data moved, but MPI chooses the order in which it adds the processes'
/// partial sums, so float sums are NOT bit-reproducible: they may differ from the one-process run
/// and between runs (every process still receives the same value from MPI). Every process must
/// set the same mode (the exchange header includes it). Other collectives are unchanged.
pub fn set_fast(on: bool) {
    if let Some(s) = state().as_mut() {
        s.fast = on;
    }
}

/// Is fast mode on (see [`set_fast`])?
pub fn is_fast() -> bool {
    state().as_ref().is_some_and(|s| s.fast)
}

/// Where a parallel call over `local` devices of this process sits in the global device list:
/// `(offset, total)` when more than one process has joined, else `None` (a one-process call).
/// Every process uses the same number of devices (the exchange header checks it).
pub(crate) fn span(local: usize) -> Option<(usize, usize)> {
    let g = state();
    let s = g.as_ref()?;
    (s.count > 1).then(|| (s.index * local, s.count * local))
}

/// One exchange across processes: every process's `payload`, in process order, after checking
/// that every process sent the same `header` (else [`Error::ProcessDivergence`] on every
/// process). `header` describes the collectives and shapes; the sequence number is added here.
pub(crate) fn exchange(header: &str, payload: &[u8]) -> Result<Vec<Vec<u8>>> {
    let mut guard = state();
    let st = initialized(&mut guard)?;
    let parts = checked_gather(st, header, payload)?;
    bump(|c| {
        c.gathered += 1;
        c.bytes_sent += payload.len() as u64;
        c.bytes_received += parts.iter().map(|p| p.len() as u64).sum::<u64>();
    });
    Ok(parts)
}

fn initialized<'a>(guard: &'a mut MutexGuard<'static, Option<State>>) -> Result<&'a mut State> {
    guard.as_mut().ok_or_else(|| {
        failure(
            "distributed exchange",
            "brigade::distributed::initialize() was not called",
        )
    })
}

/// The body of [`exchange`], uncounted (fast mode's header check uses it too).
fn checked_gather(st: &mut State, header: &str, payload: &[u8]) -> Result<Vec<Vec<u8>>> {
    st.seq += 1;
    let seq = st.seq;
    let header = format!("#{seq} {header}");
    let mut msg = Vec::with_capacity(8 + header.len() + payload.len());
    msg.extend_from_slice(&(header.len() as u64).to_le_bytes());
    msg.extend_from_slice(header.as_bytes());
    msg.extend_from_slice(payload);
    let parts = gather(st, "distributed exchange", &msg)?;
    let mut headers = Vec::with_capacity(parts.len());
    let mut payloads = Vec::with_capacity(parts.len());
    for (p, part) in parts.into_iter().enumerate() {
        let h = part
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")) as usize)
            .filter(|&h| 8 + h <= part.len())
            .ok_or_else(|| {
                failure(
                    "distributed exchange",
                    format!("process {p} sent a malformed message"),
                )
            })?;
        headers.push(String::from_utf8_lossy(&part[8..8 + h]).into_owned());
        payloads.push(part[8 + h..].to_vec());
    }
    if headers.iter().any(|h| *h != headers[0]) {
        // Name the first collective where they differ (headers are `; `-separated lists).
        let items: Vec<Vec<&str>> = headers.iter().map(|h| h.split("; ").collect()).collect();
        let k = (0..)
            .find(|&k| items.iter().any(|i| i.get(k) != items[0].get(k)))
            .expect("the headers differ");
        let shown: Vec<String> = items
            .iter()
            .map(|i| match i.get(k) {
                Some(item) => format!("collective {} of {}: {item}", k + 1, i.len()),
                None => format!("no collective {} (it has {})", k + 1, i.len()),
            })
            .collect();
        // Group the processes by what they reached, in process order.
        let mut seen: Vec<(&str, Vec<usize>)> = Vec::new();
        for (p, h) in shown.iter().enumerate() {
            match seen.iter_mut().find(|(x, _)| *x == h) {
                Some((_, ps)) => ps.push(p),
                None => seen.push((h, vec![p])),
            }
        }
        let detail = seen
            .iter()
            .map(|(h, ps)| {
                let ps: Vec<String> = ps.iter().map(|p| p.to_string()).collect();
                format!("process {} reached `{h}`", ps.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Error::ProcessDivergence {
            exchange: seq,
            detail,
        });
    }
    Ok(payloads)
}

/// How [`all_reduce`] combines the processes.
#[derive(Clone, Copy, Debug)]
pub(crate) enum ReduceOp {
    Sum,
    Max,
    Min,
}

/// Fast mode's all-reduce: every process's `data` (elements of `dtype`) combined by `op` with
/// `MPI_Allreduce`, after the header check of [`exchange`]. Returns the combined bytes.
pub(crate) fn all_reduce(
    header: &str,
    data: &[u8],
    dtype: crate::DType,
    op: ReduceOp,
) -> Result<Vec<u8>> {
    let mut guard = state();
    let st = initialized(&mut guard)?;
    checked_gather(st, &format!("{header} (fast)"), &[])?;
    let size = dtype.size_bytes();
    let count = data.len() / size;
    if count > c_int::MAX as usize {
        return Err(failure(
            "distributed all-reduce",
            format!("{count} elements are over MPI's count limit: split the array"),
        ));
    }
    // SAFETY: reading MPI's predefined handles.
    let (ty, mpi_op) = unsafe {
        let ty = match dtype {
            crate::DType::F32 => ffi::RSMPI_FLOAT,
            crate::DType::F64 => ffi::RSMPI_DOUBLE,
            crate::DType::I32 => ffi::RSMPI_INT32_T,
            crate::DType::U32 => ffi::RSMPI_UINT32_T,
            crate::DType::Bool => {
                return Err(failure(
                    "distributed all-reduce",
                    "bool operands take the exact path",
                ));
            }
        };
        let op = match op {
            ReduceOp::Sum => ffi::RSMPI_SUM,
            ReduceOp::Max => ffi::RSMPI_MAX,
            ReduceOp::Min => ffi::RSMPI_MIN,
        };
        (ty, op)
    };
    let mut recv = vec![0u8; data.len()];
    bump(|c| {
        c.all_reduced += 1;
        c.bytes_sent += data.len() as u64;
        c.bytes_received += data.len() as u64;
    });
    // SAFETY: `send` and `recv` hold `count` elements of `ty`; they outlive the request.
    bounded(
        st,
        "distributed all-reduce",
        "their partial results",
        Polling::Transfer,
        data.to_vec(),
        recv.as_mut_ptr(),
        recv,
        |req, s, r| unsafe {
            ffi::MPI_Iallreduce(
                s.as_ptr() as *const c_void,
                r as *mut c_void,
                count as c_int,
                ty,
                mpi_op,
                ffi::RSMPI_COMM_WORLD,
                req,
            )
        },
    )
}

/// The timeout of one wait ([`TIMEOUT_ENV`], default 60 s).
fn timeout() -> Duration {
    crate::device::env::read_or_warn(TIMEOUT_ENV, crate::device::env::parse_seconds)
        .unwrap_or(Duration::from_secs_f64(DEFAULT_TIMEOUT_S))
}

/// All-gather a byte string of any length from every process (lengths first, then the bytes),
/// each wait bounded by [`timeout`].
fn gather(st: &mut State, op: &'static str, mine: &[u8]) -> Result<Vec<Vec<u8>>> {
    if let Some(why) = &st.broken {
        return Err(failure(
            op,
            format!("MPI is unusable after an earlier failure: {why}"),
        ));
    }
    let n = st.count;
    let send = vec![mine.len() as u64];
    let mut lens = vec![0u64; n];
    // SAFETY: `send` and `lens` hold 1 and `n` u64 (one per process); they outlive the request
    // (leaked by `bounded` if it never completes).
    let lens = bounded(
        st,
        op,
        "the message sizes",
        Polling::Arrival,
        send,
        lens.as_mut_ptr(),
        lens,
        |req, s, r| unsafe {
            ffi::MPI_Iallgather(
                s.as_ptr() as *const c_void,
                1,
                ffi::RSMPI_UINT64_T,
                r as *mut c_void,
                1,
                ffi::RSMPI_UINT64_T,
                ffi::RSMPI_COMM_WORLD,
                req,
            )
        },
    )?;
    let limit = c_int::MAX as u64;
    let total: u64 = lens.iter().sum();
    if total > limit {
        return Err(failure(
            op,
            format!(
                "one exchange moves {total} bytes over all processes, over MPI's count limit of {limit}: split the collective into smaller arrays"
            ),
        ));
    }
    let counts: Vec<c_int> = lens.iter().map(|&l| l as c_int).collect();
    let displs: Vec<c_int> = counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect();
    let mut recv = vec![0u8; total as usize];
    // SAFETY: `recv` holds sum(counts) bytes at `displs`; every buffer outlives the request.
    let recv = bounded(
        st,
        op,
        "the data",
        Polling::Transfer,
        mine.to_vec(),
        recv.as_mut_ptr(),
        recv,
        |req, s, r| unsafe {
            ffi::MPI_Iallgatherv(
                s.as_ptr() as *const c_void,
                s.len() as c_int,
                ffi::RSMPI_UINT8_T,
                r as *mut c_void,
                counts.as_ptr(),
                displs.as_ptr(),
                ffi::RSMPI_UINT8_T,
                ffi::RSMPI_COMM_WORLD,
                req,
            )
        },
    );
    let recv = match recv {
        Ok(r) => r,
        Err(e) => {
            // The counts are read by the lost request too.
            std::mem::forget(counts);
            std::mem::forget(displs);
            return Err(e);
        }
    };
    Ok(displs
        .iter()
        .zip(&counts)
        .map(|(&d, &c)| recv[d as usize..(d + c) as usize].to_vec())
        .collect())
}

/// How a wait polls its request. Open MPI moves a message larger than its eager limit (a few
/// KiB over shared memory) fragment by fragment, and only inside MPI calls: a process that
/// sleeps between polls stalls the transfer for every process. A sleep is only harmless while a
/// wait is for the other processes to arrive, when each poll finds nothing to do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Polling {
    /// The first wait of an exchange, on a few bytes: it also waits for the slowest process to
    /// arrive, which may take long. Polls back to back for [`SPIN`], then naps between polls
    /// (from [`NAP_FIRST`], doubling up to [`NAP_MAX`]) so that a long wait costs no core.
    Arrival,
    /// A wait that follows a completed [`Polling::Arrival`] wait of the same exchange: every
    /// process has arrived, and the bytes are moving. Polls back to back (yielding the core
    /// between polls) until done or the timeout, never sleeping.
    Transfer,
}

/// How long an [`Polling::Arrival`] wait polls MPI back to back before it starts napping.
const SPIN: Duration = Duration::from_millis(10);
/// The first nap between two polls after [`SPIN`].
const NAP_FIRST: Duration = Duration::from_micros(20);
/// The longest nap between two polls: the most a late arrival is noticed late.
const NAP_MAX: Duration = Duration::from_micros(250);

/// Start a nonblocking collective (`start` gets the request, the send buffer and the receive
/// pointer) and poll it as `polling` says until it completes or [`timeout`] passes. On timeout
/// both buffers are leaked (MPI may still write into them), the state is marked broken and the
/// error names the wait.
#[allow(clippy::too_many_arguments)]
fn bounded<S, R>(
    st: &mut State,
    op: &'static str,
    what: &str,
    polling: Polling,
    send: Vec<S>,
    recv_ptr: *mut R,
    recv: Vec<R>,
    start: impl FnOnce(&mut ffi::MPI_Request, &[S], *mut R) -> c_int,
) -> Result<Vec<R>> {
    // SAFETY: a request handle is plain data; MPI_REQUEST_NULL until `start` sets it.
    let mut req: ffi::MPI_Request = unsafe { ffi::RSMPI_REQUEST_NULL };
    let t0 = Instant::now();
    // Every return below counts the wait (a failed one too).
    let _timer = Timer(t0);
    check(op, start(&mut req, &send, recv_ptr))?;
    let limit = timeout();
    let mut nap = NAP_FIRST;
    loop {
        let mut flag: c_int = 0;
        // SAFETY: `req` is the live request started above.
        let code = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        if let Err(e) = check(op, code) {
            std::mem::forget(send);
            std::mem::forget(recv);
            st.broken = Some(e.to_string());
            return Err(e);
        }
        if flag != 0 {
            return Ok(recv);
        }
        if t0.elapsed() > limit {
            std::mem::forget(send);
            std::mem::forget(recv);
            let detail = format!(
                "process {} of {} waited {:.1} s for the other processes to send {what} of exchange #{} and not all did: a process exited early, failed, or runs a different program (raise {TIMEOUT_ENV} if one is just slow)",
                st.index,
                st.count,
                limit.as_secs_f64(),
                st.seq
            );
            st.broken = Some(detail.clone());
            return Err(failure(op, detail));
        }
        // Each poll is also what moves the bytes (see `Polling`); yielding lets another process
        // on this core take its turn (polling without yielding was measured slower on a loaded
        // machine: docs/PERFORMANCE.md).
        if polling == Polling::Transfer || t0.elapsed() < SPIN {
            std::thread::yield_now();
        } else {
            std::thread::sleep(nap);
            nap = (nap * 2).min(NAP_MAX);
        }
    }
}

/// Adds the time since its start to [`ExchangeCounters::mpi_time`] when dropped.
struct Timer(Instant);

impl Drop for Timer {
    fn drop(&mut self) {
        let t = self.0.elapsed();
        bump(|c| c.mpi_time += t);
    }
}

// ---- arrays across processes ------------------------------------------------------------------

/// Arrays whose value spans the processes (feature `mpi`). Such an array's shards are this
/// process's only (its addressable shards, on [`local_devices`]); the other processes hold the
/// rest. It is recognised by its global shape exceeding what its shards assemble to.
impl Array {
    /// JAX's `make_array_from_process_local_data`: the global array of which `local` is this
    /// process's part, laid out over every process's devices (process-major) as `layout` says:
    /// - [`ShardLayout::Stacked`] `{ axis }` (pmap's): `local` has one entry per local device
    ///   along `axis`, and the global array one per global device;
    /// - [`ShardLayout::Blocks`] `{ axis }` (shard_map's): `local` holds this process's devices'
    ///   blocks along `axis` (a multiple of the local device count), and the global array
    ///   every process's, in process order;
    /// - [`ShardLayout::Replicated`]: `local` is the whole value, the same on every process;
    /// - a [`crate::NamedSharding`] (or [`ShardLayout::Named`]) over a mesh: `local` is this
    ///   process's part, laid out over its devices as the same spec over
    ///   [`crate::Mesh::local_mesh`] says; over a mesh spanning processes
    ///   ([`crate::Mesh::new_global`]) the global array is every process's part as the spec
    ///   joins them (e.g. `P!["data", None]` over `("data", processes)`: the processes' rows in
    ///   process order). Local data that does not split into this process's blocks is
    ///   [`Error::UnevenShard`] naming the dimension, its size and the padding that works.
    ///
    /// Every process calls it with the same shapes. Read the result whole only when replicated
    /// (else [`Error::NotFullyAddressable`]); its [`Array::shards`] are this process's. A `pmap`
    /// / split `shard_map` that maps the same axis takes this process's part as it is; any other
    /// call reshards it (gathered over MPI, so every process makes that call). Before
    /// [`initialize`] (one process) it is an ordinary sharded array over [`crate::devices`].
    ///
    /// ```no_run
    /// # use brigade::{Array, ShardLayout};
    /// brigade::distributed::initialize()?;
    /// let n = brigade::distributed::local_devices()?.len();
    /// let mine = Array::from_vec(vec![1.0f32; n * 3], &[n, 3])?;
    /// let global = Array::from_process_local(&mine, &ShardLayout::Stacked { axis: 0 })?;
    /// assert_eq!(global.shape(), &[n * brigade::distributed::process_count(), 3]);
    /// # Ok::<(), brigade::Error>(())
    /// ```
    pub fn from_process_local(local: &Array, layout: impl Into<ShardLayout>) -> Result<Array> {
        let op = "Array::from_process_local";
        let layout = &layout.into();
        if let ShardLayout::Named(s) = layout {
            return from_process_local_named(op, local, s);
        }
        let devices = local_devices()?;
        let (n, count) = (devices.len(), process_count());
        let h = crate::array::host_data(local)?;
        let rank = h.shape.len();
        let bad = |detail: String| Error::BadParallelArg { op, detail };
        let mut global = h.shape.clone();
        let pieces: Vec<HostArray> = match *layout {
            ShardLayout::Stacked { axis } | ShardLayout::Blocks { axis } if axis >= rank => {
                return Err(bad(format!(
                    "the layout maps axis {axis} but the local data has rank {rank} (shape {:?}): map an axis below {rank}",
                    h.shape
                )));
            }
            ShardLayout::Stacked { axis } if h.shape[axis] != n => {
                return Err(bad(format!(
                    "a stacked layout takes one entry per local device along axis {axis}: this process has {n} devices but the local data has {} (shape {:?})",
                    h.shape[axis], h.shape
                )));
            }
            ShardLayout::Blocks { axis } if !h.shape[axis].is_multiple_of(n) => {
                return Err(bad(format!(
                    "axis {axis} of the local data (shape {:?}) has {} entries, which do not split into {n} equal blocks (one per local device): pad it to {}",
                    h.shape,
                    h.shape[axis],
                    h.shape[axis].div_ceil(n) * n
                )));
            }
            ShardLayout::Stacked { axis } => {
                global[axis] *= count;
                (0..n)
                    .map(|d| {
                        let mut b = take_block(&h, axis, d, 1);
                        b.shape.remove(axis);
                        b
                    })
                    .collect()
            }
            ShardLayout::Blocks { axis } => {
                global[axis] *= count;
                let rows = h.shape[axis] / n;
                (0..n)
                    .map(|d| take_block(&h, axis, d * rows, rows))
                    .collect()
            }
            ShardLayout::Replicated => vec![h.clone(); n],
            ShardLayout::Named(_) => unreachable!("taken above"),
        };
        let shards = pieces
            .into_iter()
            .zip(&devices)
            .map(|(b, d)| Array::from_host(b).to_device(d))
            .collect::<Result<Vec<_>>>()?;
        Ok(Array {
            inner: std::sync::Arc::new(crate::array::ArrayInner {
                aval: crate::Aval::new(global, h.dtype()),
                storage: Storage::Sharded {
                    layout: layout.clone(),
                    shards,
                    devices,
                },
                origin: None,
            }),
        })
    }

    /// Does this process hold the whole value (JAX's `is_fully_addressable`)? False only for an
    /// array spanning processes ([`Array::from_process_local`], the outputs of a parallel call
    /// across processes, blocks over a spanning mesh) of which other processes hold blocks this
    /// one lacks; a replicated value is read from this process's copy.
    pub fn is_fully_addressable(&self) -> bool {
        match &self.inner.storage {
            Storage::Sharded {
                layout: ShardLayout::Named(s),
                ..
            } => s.local_blocks(self.ndim()).is_some(),
            Storage::Sharded { layout, shards, .. } => {
                layout.global_shape(shards[0].shape(), shards.len()) == self.shape()
            }
            _ => true,
        }
    }

    /// This process's part of an array spanning processes, as an ordinary sharded array over
    /// its devices (the same shards); any other array unchanged.
    pub fn process_local(&self) -> Array {
        match &self.inner.storage {
            Storage::Sharded {
                layout,
                shards,
                devices,
            } if !self.is_fully_addressable() => {
                let layout = match layout {
                    ShardLayout::Named(s) => ShardLayout::Named(s.local()),
                    other => other.clone(),
                };
                Array::from_shards(layout, shards.clone(), devices.clone())
            }
            _ => self.clone(),
        }
    }

    /// [`Error::NotFullyAddressable`] for `op` when the array spans processes.
    pub(crate) fn check_addressable(&self, op: &'static str) -> Result<()> {
        if self.is_fully_addressable() {
            return Ok(());
        }
        let local = self.shards().map_or(0, <[Array]>::len);
        let p = process_index();
        Err(Error::NotFullyAddressable {
            op,
            shape: self.shape().to_vec(),
            processes: process_count(),
            here: p,
            first: p * local,
            last: (p + 1) * local,
        })
    }
}

/// [`Array::sharding`] of a one-axis `layout` spanning the processes whose shards here are on
/// `local`: the axis `"shard"` runs over every process's devices at the same local positions,
/// process by process (as a parallel call across processes lays them out).
pub(crate) fn spanning_sharding(
    layout: &ShardLayout,
    local: &[Device],
    rank: usize,
) -> Result<crate::NamedSharding> {
    let op = "Array::sharding";
    let here = local_devices()?;
    let global = devices()?;
    let mut list = Vec::with_capacity(local.len() * process_count());
    for p in 0..process_count() {
        for d in local {
            let i = here
                .iter()
                .position(|h| crate::exec::same_device(h, d))
                .ok_or_else(|| failure(op, "a shard is on a device of another runtime"))?;
            let g = global
                .iter()
                .find(|g| g.process_index == p && g.local_index == i)
                .ok_or_else(|| failure(op, format!("process {p} has no local device {i}")))?;
            list.push(g.clone());
        }
    }
    let mesh = crate::Mesh::from_global(&list, &[("shard", list.len())])?;
    layout.on_shard_axis(&mesh, rank)
}

/// `args` with every array that spans processes replaced by its part on this process, for a
/// one-axis parallel call (`pmap` when `!split`, else split `shard_map`) mapping `mapped`
/// (`None`: a mesh call), whose static arguments are `statics`. An argument laid out in
/// one-axis blocks of the axis the call maps gives its [`Array::process_local`] part (this
/// process's rows either way), and a mesh call takes a [`crate::NamedSharding`] as it is
/// (placing it anew if the call's spec differs). Any other spanning argument is resharded: it is
/// gathered over MPI ([`process_allgather`]) and this process takes its rows of the mapped axis
/// (the whole value when the call does not map it over the processes' devices, or it is static).
pub(crate) fn local_args(
    op: &'static str,
    args: &[Array],
    mapped: Option<&[Option<usize>]>,
    split: bool,
    statics: &[usize],
) -> Result<Vec<Array>> {
    let mut out = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        let is_static = statics.contains(&i);
        // A mesh call places blocks over a spanning mesh as they are.
        let named = matches!(a.shard_layout(), Some(ShardLayout::Named(_)));
        if a.is_fully_addressable() || (mapped.is_none() && named && !is_static) {
            out.push(a.clone());
            continue;
        }
        let axis = match mapped.map(|m| m[i]) {
            Some(Some(axis)) if !is_static => Some(axis),
            _ => None,
        };
        let Some(axis) = axis else {
            out.push(process_allgather(a)?);
            continue;
        };
        // Stacked entries and blocks alike put process p's rows at the p-th share of the axis.
        if let Some(ShardLayout::Stacked { axis: at } | ShardLayout::Blocks { axis: at }) =
            a.shard_layout()
            && at == axis
        {
            out.push(a.process_local());
            continue;
        }
        // This process's rows: the same share of the mapped axis on every process.
        let (size, count) = (a.shape().get(axis).copied().unwrap_or(0), process_count());
        if size % count != 0 {
            return Err(Error::BadParallelArg {
                op,
                detail: format!(
                    "argument {i} (shape {:?}, laid out as {:?}) spans the processes and is resharded for this call, which maps its axis {axis} {}: {size} entries do not split evenly over {count} processes; make that axis a multiple of {count}",
                    a.shape(),
                    a.shard_layout().expect("a spanning array is sharded"),
                    if split {
                        "in blocks"
                    } else {
                        "one entry per device"
                    },
                ),
            });
        }
        let rows = size / count;
        let h = process_allgather_host(a)?;
        out.push(Array::from_host(take_block(
            &h,
            axis,
            process_index() * rows,
            rows,
        )));
    }
    Ok(out)
}

/// The whole value of `array` on every process (JAX's `multihost_utils.process_allgather`): an
/// array spanning processes ([`Array::from_process_local`]) is gathered over MPI and assembled
/// on the host of every process; any other array is read as it is. Every process calls it.
pub fn process_allgather(array: &Array) -> Result<Array> {
    Ok(Array::from_host(process_allgather_host(array)?))
}

/// [`process_allgather`] as host data (no second copy for callers that cut it up).
pub(crate) fn process_allgather_host(array: &Array) -> Result<HostArray> {
    if array.is_fully_addressable() {
        return crate::array::host_data(array);
    }
    let layout = array.shard_layout().expect("a spanning array is sharded");
    if let ShardLayout::Named(s) = &layout {
        return process_allgather_named(array, s);
    }
    let local = crate::array::host_data(&array.process_local())?;
    let header = format!(
        "process_allgather of {:?} {:?} as {layout:?}",
        array.dtype(),
        array.shape()
    );
    let parts = exchange(&header, &local.data.to_bytes())?;
    let axis = match layout {
        ShardLayout::Stacked { axis } | ShardLayout::Blocks { axis } => axis,
        _ => unreachable!("only stacked and block layouts span processes"),
    };
    let pieces = parts
        .iter()
        .map(|b| HostArray::new(local.shape.clone(), HostData::from_bytes(array.dtype(), b)))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&HostArray> = pieces.iter().collect();
    Ok(concat_axis(&refs, axis))
}

/// [`Array::from_process_local`] with a [`crate::NamedSharding`]: `local` is cut into this
/// process's blocks as the spec over its part of the mesh says.
fn from_process_local_named(
    op: &'static str,
    local: &Array,
    sharding: &crate::NamedSharding,
) -> Result<Array> {
    let h = crate::array::host_data(local)?;
    let mine = sharding.local();
    let block = mine
        .shard_shape_for(op, &h.shape, None)
        .map_err(|e| match e {
            Error::UnevenShard {
                op,
                dim,
                size,
                axes,
                parts,
                pad,
                ..
            } => Error::UnevenShard {
                op,
                what: format!(
                    "this process's local data (shape {:?}, split over its {} devices)",
                    h.shape,
                    mine.mesh().size()
                ),
                dim,
                size,
                axes,
                parts,
                pad,
            },
            e => e,
        })?;
    let devices = sharding.mesh().devices().to_vec();
    let shards = devices
        .iter()
        .enumerate()
        .map(|(d, dev)| Array::from_host(mine.block_of(&h, d)).to_device(dev))
        .collect::<Result<Vec<_>>>()?;
    let global = sharding.global_shape(&block);
    Ok(Array {
        inner: std::sync::Arc::new(crate::array::ArrayInner {
            aval: crate::Aval::new(global, h.dtype()),
            storage: Storage::Sharded {
                layout: ShardLayout::Named(sharding.clone()),
                shards,
                devices,
            },
            origin: None,
        }),
    })
}

/// [`process_allgather`] of blocks over a spanning mesh: every process's blocks (its devices', in
/// grid order) are all-gathered and the distinct ones joined as the spec says.
fn process_allgather_named(array: &Array, s: &crate::NamedSharding) -> Result<HostArray> {
    let shards = array.shards().unwrap_or_default();
    let local = pollster::block_on(crate::array::read_all(shards))?;
    let block = local.first().map(|b| b.shape.clone()).unwrap_or_default();
    let bytes: Vec<u8> = local.iter().flat_map(|b| b.data.to_bytes()).collect();
    let header = format!(
        "process_allgather of {:?} {:?} as {s}",
        array.dtype(),
        array.shape()
    );
    let parts = exchange(&header, &bytes)?;
    // Grid position g is process g / n's device g % n (process-major, n devices each).
    let n = shards.len();
    let each = bytes.len() / n.max(1);
    let pieces = s
        .distinct_blocks(array.ndim())
        .into_iter()
        .map(|g| {
            let (p, d) = (g / n, g % n);
            let raw = parts[p].get(d * each..(d + 1) * each).ok_or_else(|| {
                failure(
                    "process_allgather",
                    format!(
                        "process {p} sent {} bytes of blocks, this process {}: the processes disagree on the array",
                        parts[p].len(),
                        bytes.len()
                    ),
                )
            })?;
            HostArray::new(block.clone(), HostData::from_bytes(array.dtype(), raw))
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(s.assemble(pieces))
}
