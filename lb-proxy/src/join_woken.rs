//! Two fallible futures run side by side in one task, each polled only when its own waker
//! fired. tokio's `join!`/`try_join!` poll every branch on every wake-up of the task: a TCP
//! relay woken by one socket would also poll the other direction, whose read goes through the
//! reactor's readiness check again for nothing, twice per request and response (callgrind:
//! about a tenth of the relay's user-space instructions per request).
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Wake, Waker};

/// Runs `a` and `b` to completion; the first error ends both (the other is dropped), as
/// `tokio::try_join!` does.
pub(crate) async fn try_join_woken<A, B, E>(a: A, b: B) -> Result<(), E>
where
    A: Future<Output = Result<(), E>>,
    B: Future<Output = Result<(), E>>,
{
    // Both start woken: each is polled once at first.
    let shared = Arc::new(Shared { parent: Mutex::new(None), woken: [AtomicBool::new(true), AtomicBool::new(true)] });
    let wakers = [0, 1].map(|index| Waker::from(Arc::new(Branch { shared: shared.clone(), index })));
    let (mut a, mut b) = (pin!(a), pin!(b));
    let mut done = [false; 2];
    std::future::poll_fn(|cx| {
        {
            // Set before any branch is polled: a wake-up from then on reaches this task.
            let mut parent = shared.parent.lock().unwrap_or_else(PoisonError::into_inner);
            if !parent.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *parent = Some(cx.waker().clone());
            }
        }
        // The flag is cleared before the poll: a wake-up during it polls the branch again.
        if !done[0] && shared.woken[0].swap(false, Ordering::AcqRel) {
            match a.as_mut().poll(&mut Context::from_waker(&wakers[0])) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => done[0] = true,
                Poll::Pending => {}
            }
        }
        if !done[1] && shared.woken[1].swap(false, Ordering::AcqRel) {
            match b.as_mut().poll(&mut Context::from_waker(&wakers[1])) {
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => done[1] = true,
                Poll::Pending => {}
            }
        }
        if done == [true, true] { Poll::Ready(Ok(())) } else { Poll::Pending }
    })
    .await
}

struct Shared {
    /// The task's own waker, as of its last poll.
    parent: Mutex<Option<Waker>>,
    /// Which branch was woken since it was last polled.
    woken: [AtomicBool; 2],
}

/// The waker handed to one branch: marks it woken, then wakes the task.
struct Branch {
    shared: Arc<Shared>,
    index: usize,
}

impl Wake for Branch {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.woken[self.index].store(true, Ordering::Release);
        if let Some(w) = self.shared.parent.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            w.wake_by_ref();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    #[tokio::test]
    async fn each_branch_finishes_when_its_own_event_comes() {
        let (tx_a, rx_a) = oneshot::channel::<u32>();
        let (tx_b, rx_b) = oneshot::channel::<u32>();
        let polls = std::cell::Cell::new([0u32; 2]);
        let count = |i: usize| {
            let mut p = polls.get();
            p[i] += 1;
            polls.set(p);
        };
        let a = async {
            let mut rx = rx_a;
            std::future::poll_fn(|cx| {
                count(0);
                std::pin::Pin::new(&mut rx).poll(cx)
            })
            .await
            .map(drop)
            .map_err(|_| "a's sender dropped")
        };
        let b = async {
            let mut rx = rx_b;
            std::future::poll_fn(|cx| {
                count(1);
                std::pin::Pin::new(&mut rx).poll(cx)
            })
            .await
            .map(drop)
            .map_err(|_| "b's sender dropped")
        };
        let senders = async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx_a.send(1).unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx_b.send(2).unwrap();
        };
        let (joined, ()) = tokio::join!(try_join_woken(a, b), senders);
        joined.unwrap();
        // Each branch: its first poll and the one its own wake-up caused, never the other's.
        assert_eq!(polls.get(), [2, 2]);
    }

    #[tokio::test]
    async fn the_first_error_ends_both() {
        let pending = std::future::pending::<Result<(), &str>>();
        let failing = async { Err::<(), _>("broken") };
        assert_eq!(try_join_woken(pending, failing).await, Err("broken"));
    }
}
