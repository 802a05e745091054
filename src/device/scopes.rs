//! Errors caught by error scopes that resolve later (the browser).
//!
//! In the browser `popErrorScope` is a promise and brigade's device calls are synchronous, so
//! [`super::gpu::Gpu::capture`] pushes the scopes, pops them right after the work and keeps the
//! pop futures here. The next await on the device ([`super::Device::flush_errors`], which every
//! download and `Device::idle` runs first, and `Parallel::call_async`) resolves them and returns
//! the first error caught: [`Error::Compile`] for a kernel the browser rejected,
//! [`Error::OutOfMemory`], [`Error::Wgpu`] for other validation and internal errors. Natively the
//! scopes resolve at once and the call itself returns the error, so nothing is ever kept here.

use std::future::Future;
use std::pin::Pin;

use futures::FutureExt;

use crate::error::Error;

/// The future of one capture's popped scopes: the first error, out-of-memory first.
#[cfg(not(target_arch = "wasm32"))]
pub(crate) type ScopeFuture = Pin<Box<dyn Future<Output = Option<wgpu::Error>> + Send>>;
/// The future of one capture's popped scopes: the first error, out-of-memory first.
#[cfg(target_arch = "wasm32")]
pub(crate) type ScopeFuture = Pin<Box<dyn Future<Output = Option<wgpu::Error>>>>;

/// What a capture was doing, to name its error once it resolves.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Origin {
    /// Creating the shader module and pipeline of a kernel.
    Kernel { label: String, wgsl: String },
    /// Any other device work (allocation, write, submission).
    Work,
}

struct Pending {
    origin: Origin,
    errors: ScopeFuture,
}

/// The captures of one device whose scopes have not been looked at yet.
#[derive(Default)]
pub(crate) struct Deferred {
    pending: Vec<Pending>,
    /// The first error of a capture that resolved while pruning, not yet reported.
    caught: Option<(Origin, wgpu::Error)>,
}

impl Deferred {
    /// Keep the popped scopes of one capture.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    pub(crate) fn push(&mut self, origin: Origin, errors: ScopeFuture) {
        self.prune();
        self.pending.push(Pending { origin, errors });
    }

    /// Drop captures whose scopes resolved without an error (keeping the first error), so that
    /// a long run of calls without an await does not hold every one of them.
    #[cfg_attr(not(target_arch = "wasm32"), allow(dead_code))]
    fn prune(&mut self) {
        let caught = &mut self.caught;
        self.pending
            .retain_mut(|p| match (&mut p.errors).now_or_never() {
                None => true,
                Some(None) => false,
                Some(Some(e)) => {
                    if caught.is_none() {
                        *caught = Some((p.origin.clone(), e));
                    }
                    false
                }
            });
    }

    /// Number of captures not yet resolved.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.pending.len()
    }

    /// Take everything out (the caller awaits it without holding the lock).
    pub(crate) fn take(&mut self) -> Taken {
        Taken {
            caught: self.caught.take(),
            pending: std::mem::take(&mut self.pending),
        }
    }
}

/// What [`Deferred::take`] took out.
pub(crate) struct Taken {
    caught: Option<(Origin, wgpu::Error)>,
    pending: Vec<Pending>,
}

impl Taken {
    /// True when there is nothing to await or report.
    pub(crate) fn is_empty(&self) -> bool {
        self.caught.is_none() && self.pending.is_empty()
    }

    /// Await every capture; the first error (in capture order) with its origin.
    pub(crate) async fn first_error(self) -> Option<(Origin, wgpu::Error)> {
        let mut first = self.caught;
        for p in self.pending {
            let e = p.errors.await;
            if let (None, Some(e)) = (&first, e) {
                first = Some((p.origin, e));
            }
        }
        first
    }
}

/// brigade's error for an error a kernel's capture caught (`device`: the device's label).
pub(crate) fn kernel_error(device: &str, label: &str, wgsl: &str, e: wgpu::Error) -> Error {
    match e {
        wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory {
            device: device.to_string(),
            detail: format!("compiling kernel `{label}`"),
        },
        other => Error::Compile {
            kernel: label.to_string(),
            message: format!("device {device} rejected the shader: {other}"),
            wgsl: wgsl.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn validation(msg: &str) -> wgpu::Error {
        wgpu::Error::Validation {
            source: Box::new(std::io::Error::other(msg.to_string())),
            description: msg.to_string(),
        }
    }

    fn ready(e: Option<wgpu::Error>) -> ScopeFuture {
        Box::pin(futures::future::ready(e))
    }

    #[test]
    fn keeps_the_first_error_in_capture_order() {
        let mut d = Deferred::default();
        d.push(Origin::Work, ready(None));
        let kernel = Origin::Kernel {
            label: "k".into(),
            wgsl: "src".into(),
        };
        d.push(kernel.clone(), ready(Some(validation("bad shader"))));
        d.push(Origin::Work, ready(Some(validation("invalid pipeline"))));
        // Pushing prunes what resolved: nothing stays pending, the first error is kept.
        d.push(Origin::Work, Box::pin(futures::future::pending()));
        assert_eq!(d.len(), 1);
        let taken = d.take();
        assert!(!taken.is_empty());
        let (origin, e) = taken.caught.expect("an error was caught");
        assert_eq!(origin, kernel);
        assert_eq!(e.to_string(), "bad shader");
        assert!(d.take().is_empty());
    }

    #[test]
    fn resolves_pending_scopes_when_awaited() {
        let mut d = Deferred::default();
        let (tx, rx) = futures::channel::oneshot::channel::<Option<wgpu::Error>>();
        d.push(Origin::Work, Box::pin(rx.map(|r| r.ok().flatten())));
        assert_eq!(d.len(), 1);
        tx.send(Some(validation("late"))).unwrap();
        let first = pollster::block_on(d.take().first_error());
        match first {
            Some((Origin::Work, e)) => assert_eq!(e.to_string(), "late"),
            other => panic!("{other:?}"),
        }
        assert!(pollster::block_on(d.take().first_error()).is_none());
    }

    #[test]
    fn names_kernel_errors() {
        match kernel_error("0 [webgpu: x]", "k", "src", validation("no")) {
            Error::Compile {
                kernel,
                message,
                wgsl,
            } => {
                assert_eq!((kernel.as_str(), wgsl.as_str()), ("k", "src"));
                assert!(message.contains("0 [webgpu: x]") && message.contains("no"));
            }
            other => panic!("{other:?}"),
        }
    }
}
