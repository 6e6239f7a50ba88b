//! A timer kept across waits (a connection's head deadlines, a worker's answer deadlines). A
//! deadline later than the one it is set for does not re-arm it: it fires early and is set
//! again, so a busy connection or worker does not take it out of the runtime's timer wheel and
//! put it back for every wait.
use std::pin::Pin;

use tokio::time::{Instant, Sleep};

pub(crate) struct KeptTimer(Option<Pin<Box<Sleep>>>);

impl KeptTimer {
    pub(crate) const fn new() -> Self {
        KeptTimer(None)
    }

    /// Resolves at the deadline `at` gives, read as the wait is first polled (a head's
    /// deadline starts only once the client's bytes are awaited).
    pub(crate) async fn until(&mut self, at: impl FnOnce() -> Instant) {
        let at = at();
        loop {
            let sleep = self.0.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
            if sleep.deadline() > at || sleep.is_elapsed() {
                sleep.as_mut().reset(at);
            }
            sleep.as_mut().await;
            if Instant::now() >= at {
                return;
            }
        }
    }
}
