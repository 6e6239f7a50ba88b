//! The proxy's own threads: one single-threaded tokio runtime per worker (thread per core, as
//! nginx runs a process per core). A client connection lives on one worker for its whole life,
//! and so do the backend connections it uses (pools are per worker), so a request's tasks wake
//! each other without crossing threads and nothing is stolen between workers.
//!
//! The control path (the daemon's runtime) reaches workers through their runtime handles; the
//! state workers share (VIP specs, backend sets, counters) stays lock-free as before.
use std::cell::Cell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

use tokio::runtime::Handle;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

thread_local! {
    /// The index of the worker running on this thread (0 elsewhere).
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// The index of the current worker: picks this worker's share of per-worker state.
pub(crate) fn current() -> usize {
    WORKER.with(Cell::get)
}

/// The default worker count: one per CPU the process may use.
pub(crate) fn default_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The running workers. Dropping this ends them: their runtimes drop whatever still runs there.
#[derive(Debug)]
pub(crate) struct Workers {
    pub(crate) set: Arc<WorkerSet>,
    _stop: Vec<oneshot::Sender<()>>,
}

/// What tasks need to reach the workers. Holding it does not keep them running (acceptors,
/// which run on the workers, hold it: no cycle).
#[derive(Debug)]
pub(crate) struct WorkerSet {
    handles: Vec<Handle>,
    /// Round-robin over workers for new connections and VIP acceptors.
    next: AtomicUsize,
}

impl Workers {
    pub(crate) fn start(count: usize) -> std::io::Result<Workers> {
        let count = count.max(1);
        let mut handles = Vec::with_capacity(count);
        let mut stops = Vec::with_capacity(count);
        for i in 0..count {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let (stop, stopped) = oneshot::channel::<()>();
            handles.push(rt.handle().clone());
            stops.push(stop);
            std::thread::Builder::new().name(format!("lb-proxy-{i}")).spawn(move || {
                WORKER.with(|w| w.set(i));
                crate::http::budget::keep_spare_timers();
                // Runs every task spawned on this runtime until the proxy goes away.
                let _ = rt.block_on(stopped);
                crate::http::budget::drop_spare_timers();
            })?;
        }
        Ok(Workers { set: Arc::new(WorkerSet { handles, next: AtomicUsize::new(0) }), _stop: stops })
    }
}

impl WorkerSet {
    pub(crate) fn count(&self) -> usize {
        self.handles.len()
    }

    /// The next worker in turn.
    pub(crate) fn next(&self) -> usize {
        self.next.fetch_add(1, Relaxed) % self.handles.len()
    }

    /// Runs `fut` on worker `i`, tracked by `tracker`.
    pub(crate) fn spawn_on<F>(&self, i: usize, tracker: &TaskTracker, fut: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        tracker.spawn_on(fut, &self.handles[i]);
    }
}
