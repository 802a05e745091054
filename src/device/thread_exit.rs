//! Dropping wgpu objects while a thread ends.
//!
//! wgpu-core built with debug assertions (the dev profile of any app) records every snatch-lock
//! acquisition in a thread-local of its own, and dropping a wgpu buffer or queue takes that lock.
//! A thread's thread-locals are destroyed in the reverse order of their first use, so one of the
//! app's that was first used before wgpu's (a `RefCell<Vec<Runtime>>` filled after it was made)
//! is destroyed after wgpu's: the runtimes and arrays in it would drop their buffers with wgpu's
//! thread-local gone, which panics inside a destructor and aborts the process. brigade cannot
//! order the app's thread-locals, so it notices that the thread is ending and hands those drops
//! to a thread of its own (synchronously: memory is back when the drop returns).
//!
//! How it notices: [`enter`] (run before brigade's first wgpu work on a thread) takes wgpu's
//! snatch lock once, so that wgpu's thread-local is in use, and only then first uses [`ALIVE`];
//! `ALIVE` is therefore destroyed before wgpu's thread-local, and a drop that finds it gone may be
//! after wgpu's ([`ending`]).

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::cell::Cell;
    use std::sync::{Arc, Condvar, Mutex, OnceLock};

    /// Destroyed no later than wgpu-core's snatch-lock tracer on this thread (see the module doc).
    struct Alive;
    impl Drop for Alive {
        // Present only so that the thread-local has a destructor, hence a "destroyed" state.
        fn drop(&mut self) {}
    }

    thread_local! {
        /// Set by [`enter`]. No destructor: readable while the thread's thread-locals are destroyed.
        static ENTERED: Cell<bool> = const { Cell::new(false) };
        static ALIVE: Alive = const { Alive };
    }

    type Job = Box<dyn FnOnce() + Send>;

    /// Jobs waiting, and how many were ever queued and done.
    #[derive(Default)]
    struct Queue {
        jobs: Vec<Job>,
        queued: u64,
        done: u64,
    }

    #[derive(Default)]
    struct Reaper {
        queue: Mutex<Queue>,
        changed: Condvar,
    }

    /// The thread that drops what ending threads hand over, started by the first [`enter`]
    /// (starting a thread while thread-locals are destroyed may itself touch destroyed ones).
    /// `None` when it could not be started: drops then stay where they are.
    fn reaper() -> Option<&'static Arc<Reaper>> {
        static REAPER: OnceLock<Option<Arc<Reaper>>> = OnceLock::new();
        REAPER
            .get_or_init(|| {
                let r = Arc::new(Reaper::default());
                let worker = r.clone();
                std::thread::Builder::new()
                    .name("brigade drops".into())
                    .spawn(move || run(&worker))
                    .ok()
                    .map(|_| r)
            })
            .as_ref()
    }

    fn run(r: &Reaper) {
        fn lock(r: &Reaper) -> std::sync::MutexGuard<'_, Queue> {
            r.queue.lock().unwrap_or_else(|e| e.into_inner())
        }
        loop {
            let jobs = {
                let mut q = lock(r);
                while q.jobs.is_empty() {
                    q = r.changed.wait(q).unwrap_or_else(|e| e.into_inner());
                }
                std::mem::take(&mut q.jobs)
            };
            let n = jobs.len() as u64;
            for job in jobs {
                // A panicking drop must not stop the thread (its waiter would hang).
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            }
            lock(r).done += n;
            r.changed.notify_all();
        }
    }

    /// Called before brigade's wgpu work on this thread with the device it works on; cheap after
    /// the first call on a thread.
    pub(crate) fn enter(device: &wgpu::Device) {
        if ENTERED.get() {
            return;
        }
        ENTERED.set(true);
        reaper();
        // Takes the snatch lock: wgpu's tracer is now in use on this thread, before ALIVE.
        let _ = device.poll(wgpu::PollType::Poll);
        let _ = ALIVE.try_with(|_| ());
    }

    /// True when this thread's thread-locals are being destroyed and wgpu's may already be gone.
    pub(crate) fn ending() -> bool {
        ENTERED.get() && ALIVE.try_with(|_| ()).is_err()
    }

    /// Run `f` (which drops wgpu objects) here, or on the reaper thread when this thread is
    /// [`ending`]; returns once it ran either way.
    pub(crate) fn drop_safely(f: impl FnOnce() + Send + 'static) {
        let Some(r) = ending().then(reaper).flatten() else {
            return f();
        };
        let lock = || r.queue.lock().unwrap_or_else(|e| e.into_inner());
        let mut q = lock();
        q.jobs.push(Box::new(f));
        q.queued += 1;
        let ticket = q.queued;
        r.changed.notify_all();
        while q.done < ticket {
            q = r.changed.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }
}
#[cfg(not(target_arch = "wasm32"))]
pub(crate) use native::{drop_safely, enter};

// One thread in the browser, whose thread-locals are never destroyed while brigade runs.
#[cfg(target_arch = "wasm32")]
pub(crate) fn enter(_device: &wgpu::Device) {}
#[cfg(target_arch = "wasm32")]
pub(crate) fn drop_safely(f: impl FnOnce() + 'static) {
    f()
}
