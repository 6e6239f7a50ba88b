//! A sleep made to sit in a `select!` beside busy I/O. `select!` polls every branch on every
//! wake-up of its task, and polling a tokio `Sleep` visits the timer wheel's entry each time;
//! this one reads whether the timer fired and goes back to the entry only when it did, or
//! when the task polling it is not the one the timer would wake.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use pin_project_lite::pin_project;
use tokio::time::{Instant, Sleep};

pin_project! {
    pub(crate) struct QuietSleep {
        #[pin]
        sleep: Sleep,
        registered: Option<Waker>,
    }
}

impl QuietSleep {
    pub(crate) fn until(at: Instant) -> QuietSleep {
        QuietSleep { sleep: tokio::time::sleep_until(at), registered: None }
    }
}

impl Future for QuietSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        // The timer wheel marks a timer fired before it wakes the task.
        if !this.sleep.is_elapsed() && this.registered.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            return Poll::Pending;
        }
        let polled = this.sleep.poll(cx);
        if polled.is_pending() {
            *this.registered = Some(cx.waker().clone());
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn it_ends_on_time_however_often_it_is_polled() {
        let start = Instant::now();
        let sleep = QuietSleep::until(start + Duration::from_millis(50));
        tokio::pin!(sleep);
        let mut polls = 0;
        // Another branch wakes the task every 10 ms, as traffic does.
        let mut tick = tokio::time::interval(Duration::from_millis(10));
        loop {
            tokio::select! {
                biased;
                _ = sleep.as_mut() => break,
                _ = tick.tick() => {
                    polls += 1;
                    assert!(polls < 100, "the sleep never ended");
                }
            }
        }
        assert_eq!(start.elapsed(), Duration::from_millis(50));
        assert!(polls >= 5, "{polls}");
    }

    #[tokio::test(start_paused = true)]
    async fn alone_it_wakes_its_task() {
        let start = Instant::now();
        QuietSleep::until(start + Duration::from_secs(3)).await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }
}
