//! Stop signals: `stop` ends accepting and starts graceful connection shutdown; `force` ends
//! whatever is still running when the grace period is over.
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio::sync::futures::{Notified, OwnedNotified};
use tokio_util::task::TaskTracker;

#[derive(Clone, Debug)]
pub(crate) struct Tasks {
    pub(crate) stop: Arc<Signal>,
    pub(crate) force: Arc<Signal>,
    /// Every connection and tunnel task, so shutdown can wait for them.
    pub(crate) tracker: TaskTracker,
}

/// The owning side of one VIP's signals.
#[derive(Debug)]
pub(crate) struct Stopper {
    tasks: Tasks,
}

impl Stopper {
    pub(crate) fn new() -> (Stopper, Tasks) {
        let tasks = Tasks { stop: Arc::default(), force: Arc::default(), tracker: TaskTracker::new() };
        (Stopper { tasks: tasks.clone() }, tasks)
    }

    /// Stops accepting, lets in-flight work finish for up to `grace`, then cuts the rest.
    pub(crate) async fn shutdown(&self, grace: std::time::Duration) {
        self.stop_accepting();
        self.finish(tokio::time::Instant::now() + grace).await;
    }

    /// Stops accepting new connections; in-flight ones carry on until [`Stopper::finish`].
    pub(crate) fn stop_accepting(&self) {
        self.tasks.stop.raise();
        self.tasks.tracker.close();
    }

    /// Lets in-flight work finish until `deadline`, then cuts the rest. Several VIPs stopping
    /// together share one deadline: the grace runs once for all of them.
    pub(crate) async fn finish(&self, deadline: tokio::time::Instant) {
        let Tasks { force, tracker, .. } = &self.tasks;
        if tokio::time::timeout_at(deadline, tracker.wait()).await.is_err() {
            force.raise();
            tracker.wait().await;
        }
    }
}

/// A signal raised once and never lowered.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    up: AtomicBool,
    // Shared so that a waiter may own it ([`Signal::raised_owned`]).
    notify: Arc<Notify>,
}

impl Signal {
    fn raise(&self) {
        self.up.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(crate) fn is_raised(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Resolves once the signal is raised (at once if it was).
    pub(crate) fn raised(&self) -> Raised<'_> {
        Raised { signal: self, notified: self.notify.notified(), registered: None }
    }

    /// [`Signal::raised`], owning what it waits on: for a future that must be `'static` from
    /// the start (a connection's, built in its task's box).
    #[inline(always)]
    pub(crate) fn raised_owned(self: &Arc<Self>) -> OwnedRaised {
        OwnedRaised { signal: self.clone(), notified: None, registered: None }
    }
}

/// A raised signal's poll, shared by [`Raised`] and [`OwnedRaised`]: a flag is read, and the
/// waiter list (behind a lock) is visited only to register a waker other than the one held.
fn poll_raised(
    signal: &Signal,
    notified: Pin<&mut impl Future<Output = ()>>,
    registered: &mut Option<Waker>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    if signal.is_raised() {
        return Poll::Ready(());
    }
    if registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
        return Poll::Pending;
    }
    if notified.poll(cx).is_ready() {
        return Poll::Ready(());
    }
    *registered = Some(cx.waker().clone());
    Poll::Pending
}

pin_project! {
    /// Waiting for a signal. A connection's `select!` polls every branch on every wake-up of
    /// its task, so polling again is made cheap: a flag is read, and the waiter list (behind
    /// a lock) is visited only to register a waker other than the one it holds.
    pub(crate) struct Raised<'a> {
        signal: &'a Signal,
        // Made before the flag is first read, so a raise in between is not missed.
        #[pin]
        notified: Notified<'a>,
        registered: Option<Waker>,
    }
}

impl Future for Raised<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        poll_raised(this.signal, this.notified, this.registered, cx)
    }
}

pin_project! {
    /// [`Raised`] owning its signal. Its waiter is made as it is first polled (before the flag
    /// is read, as [`Raised`]'s): made at once, it would be built outside the box of the future
    /// that holds it, and that future copied whole into the box.
    pub(crate) struct OwnedRaised {
        signal: Arc<Signal>,
        #[pin]
        notified: Option<OwnedNotified>,
        registered: Option<Waker>,
    }
}

impl Future for OwnedRaised {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut this = self.project();
        if this.notified.is_none() {
            this.notified.set(Some(this.signal.notify.clone().notified_owned()));
        }
        let notified = this.notified.as_pin_mut().expect("made above");
        poll_raised(this.signal, notified, this.registered, cx)
    }
}

pin_project! {
    /// `fut` until it ends or the signal `raised` waits for is raised, whichever comes first
    /// (`fut` is polled first). Built by hand rather than with `select!` in an async fn: that
    /// would be one more level of future, and each level copies the whole of `fut`'s state
    /// once more as it first runs (kilobytes for a connection).
    pub(crate) struct Until<F, R> {
        #[pin]
        fut: F,
        #[pin]
        raised: R,
    }
}

/// `fut`, dropped wherever it is once `signal` is raised.
pub(crate) fn until<F: Future<Output = ()>>(signal: &Signal, fut: F) -> Until<F, Raised<'_>> {
    Until { fut, raised: signal.raised() }
}

/// [`until`], owning the signal: `'static` if `fut` is. Inlined, so that a future built to be
/// boxed is built in its box (through a call it would be copied whole, twice).
#[inline(always)]
pub(crate) fn until_owned<F: Future<Output = ()>>(signal: &Arc<Signal>, fut: F) -> Until<F, OwnedRaised> {
    Until { fut, raised: signal.raised_owned() }
}

impl<F: Future<Output = ()>, R: Future<Output = ()>> Future for Until<F, R> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        if this.fut.poll(cx).is_ready() {
            return Poll::Ready(());
        }
        this.raised.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_raise_wakes_every_waiter_and_later_ones_pass_at_once() {
        let signal = Arc::new(Signal::default());
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let s = signal.clone();
                tokio::spawn(async move { s.raised().await })
            })
            .collect();
        tokio::task::yield_now().await;
        let waiting = signal.raised();
        signal.raise();
        waiting.await;
        for w in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(5), w).await.expect("woken").unwrap();
        }
        signal.raised().await;
    }

    #[tokio::test]
    async fn polled_again_and_again_by_one_task_it_still_wakes_that_task() {
        let signal = Arc::new(Signal::default());
        let s = signal.clone();
        let waiter = tokio::spawn(async move {
            let raised = s.raised();
            tokio::pin!(raised);
            // Polled on every wake-up of its task, as a select! branch is.
            for _ in 0..3 {
                assert!(poll_once(raised.as_mut()).await.is_pending());
                tokio::task::yield_now().await;
            }
            raised.await;
        });
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        signal.raise();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter).await.expect("woken").unwrap();
    }

    async fn poll_once<F: Future + Unpin>(mut f: F) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut f).poll(cx))).await
    }
}
