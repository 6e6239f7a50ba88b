//! Stop signals: `stop` ends accepting and starts graceful connection shutdown; `force` ends
//! whatever is still running when the grace period is over.
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

#[derive(Clone, Debug)]
pub(crate) struct Tasks {
    pub(crate) stop: watch::Receiver<bool>,
    pub(crate) force: watch::Receiver<bool>,
    /// Every connection and tunnel task, so shutdown can wait for them.
    pub(crate) tracker: TaskTracker,
}

/// The owning side of one VIP's signals.
#[derive(Debug)]
pub(crate) struct Stopper {
    stop: watch::Sender<bool>,
    force: watch::Sender<bool>,
    tracker: TaskTracker,
}

impl Stopper {
    pub(crate) fn new() -> (Stopper, Tasks) {
        let (stop, stop_rx) = watch::channel(false);
        let (force, force_rx) = watch::channel(false);
        let tracker = TaskTracker::new();
        let tasks = Tasks { stop: stop_rx, force: force_rx, tracker: tracker.clone() };
        (Stopper { stop, force, tracker }, tasks)
    }

    /// Stops accepting, lets in-flight work finish for up to `grace`, then cuts the rest.
    pub(crate) async fn shutdown(&self, grace: std::time::Duration) {
        self.stop.send_replace(true);
        self.tracker.close();
        if tokio::time::timeout(grace, self.tracker.wait()).await.is_err() {
            self.force.send_replace(true);
            self.tracker.wait().await;
        }
    }
}
