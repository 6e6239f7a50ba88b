//! A request's two answer deadlines, kept on one timer: the request budget
//! (`timeouts.request`: from the end of the upload to the response head, over queueing,
//! connecting and every attempt) and each attempt's `timeouts.backend_header` (from the end of
//! the upload, or of the attempt's start if later). Both start only once the upload has ended,
//! so a slow but steady upload is not cut.
use std::cell::RefCell;
use std::time::Duration;

use tokio::time::Instant;

use crate::kept_timer::KeptTimer;

use super::upload::Upload;

pub(crate) struct Budget {
    total: Duration,
    ends: Option<Instant>,
}

/// Which deadline ran out first.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Late {
    /// The attempt's backend did not answer in `backend_header`.
    Backend,
    /// The whole request's budget is spent.
    Request,
}

impl Budget {
    pub(crate) fn new(total: Duration) -> Budget {
        Budget { total, ends: None }
    }

    /// The budget's end; it starts when first asked after the upload ended.
    pub(crate) fn end(&mut self, upload: &Upload) -> Option<Instant> {
        if self.ends.is_none() && upload.has_ended() {
            self.ends = Some(Instant::now() + self.total);
        }
        self.ends
    }

    /// Whether the budget has started and run out.
    pub(crate) fn spent(&self) -> bool {
        self.ends.is_some_and(|at| Instant::now() >= at)
    }

    /// Resolves when the attempt waiting for its answer is late: `backend_header` after the
    /// upload's end, or the end of the budget, whichever comes first.
    pub(crate) async fn answer_due(&mut self, upload: &Upload, backend_header: Duration) -> Late {
        upload.ended().await;
        let backend_at = Instant::now() + backend_header;
        let request_at = self.end(upload).unwrap_or(backend_at);
        AnswerTimer::take().until(backend_at.min(request_at)).await;
        if backend_at <= request_at { Late::Backend } else { Late::Request }
    }
}

thread_local! {
    /// Timers of this worker's finished answer waits, for its next ones; None on a thread
    /// that is not a worker's. A timer made for every request and dropped after it went into
    /// the runtime's timer wheel and out again each time (callgrind: about 0.25k instructions
    /// a request more than one kept); one kept stays in the wheel, and a later deadline does
    /// not move it.
    static SPARE_TIMERS: RefCell<Option<Vec<KeptTimer>>> = const { RefCell::new(None) };
}

/// Spare timers a worker keeps: as many as it has answers awaited at once, up to this.
const SPARE_TIMERS_KEPT: usize = 64;

/// Starts keeping this thread's spare answer timers: a worker's, whose runtime outlives them.
pub(crate) fn keep_spare_timers() {
    SPARE_TIMERS.with_borrow_mut(|spare| *spare = Some(Vec::new()));
}

/// Drops this thread's spare answer timers and keeps no more: their entries belong to the
/// worker's runtime, which is about to go.
pub(crate) fn drop_spare_timers() {
    let _ = SPARE_TIMERS.try_with(|spare| spare.borrow_mut().take());
}

/// One answer wait's timer: a spare one of this worker's if it has one, given back when the
/// wait ends.
struct AnswerTimer(Option<KeptTimer>);

impl AnswerTimer {
    fn take() -> AnswerTimer {
        AnswerTimer(SPARE_TIMERS.with_borrow_mut(|spare| spare.as_mut().and_then(Vec::pop)))
    }

    async fn until(&mut self, at: Instant) {
        self.0.get_or_insert_with(KeptTimer::new).until(|| at).await
    }
}

impl Drop for AnswerTimer {
    fn drop(&mut self) {
        let Some(timer) = self.0.take() else { return };
        let _ = SPARE_TIMERS.try_with(|spare| {
            if let Some(spare) = spare.borrow_mut().as_mut()
                && spare.len() < SPARE_TIMERS_KEPT
            {
                spare.push(timer);
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::upload::RequestBody;

    fn ended_upload() -> std::sync::Arc<Upload> {
        RequestBody::new(http_body_util::Empty::<bytes::Bytes>::new(), Duration::from_secs(60), None).1
    }

    #[tokio::test(start_paused = true)]
    async fn the_earlier_deadline_wins_and_the_budget_spans_attempts() {
        let upload = ended_upload();
        let start = Instant::now();
        let mut budget = Budget::new(Duration::from_millis(100));
        // The first attempt's backend is late at 60 ms; the second's would be at 120 ms, but
        // the request's budget ends at 100 ms.
        assert_eq!(budget.answer_due(&upload, Duration::from_millis(60)).await, Late::Backend);
        assert_eq!(start.elapsed(), Duration::from_millis(60));
        assert!(!budget.spent());
        assert_eq!(budget.answer_due(&upload, Duration::from_millis(60)).await, Late::Request);
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        assert!(budget.spent());
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_set_for_earlier_fires_early_and_is_set_again() {
        // The test's thread keeps timers as a worker's does, until this test's runtime goes.
        struct Kept;
        impl Drop for Kept {
            fn drop(&mut self) {
                drop_spare_timers();
            }
        }
        keep_spare_timers();
        let _kept = Kept;
        let upload = ended_upload();
        // Answered before its deadline: the wait's timer, set for 60 ms, is kept.
        let mut first = Budget::new(Duration::from_secs(10));
        let answered =
            tokio::time::timeout(Duration::from_millis(10), first.answer_due(&upload, Duration::from_millis(60)));
        assert!(answered.await.is_err());
        // The next wait's deadline is later: the kept timer fires at 60 ms and is set again.
        let start = Instant::now();
        let mut later = Budget::new(Duration::from_secs(10));
        assert_eq!(later.answer_due(&upload, Duration::from_millis(100)).await, Late::Backend);
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        // An earlier deadline than the kept timer's is set at once.
        let mut earlier = Budget::new(Duration::from_secs(10));
        let answered =
            tokio::time::timeout(Duration::from_millis(1), earlier.answer_due(&upload, Duration::from_secs(5)));
        assert!(answered.await.is_err());
        let start = Instant::now();
        let mut sooner = Budget::new(Duration::from_secs(10));
        assert_eq!(sooner.answer_due(&upload, Duration::from_millis(20)).await, Late::Backend);
        assert_eq!(start.elapsed(), Duration::from_millis(20));
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_starts_before_the_upload_ends() {
        let upload = Upload::default();
        let mut budget = Budget::new(Duration::from_millis(100));
        assert_eq!(budget.end(&upload), None);
        let waiting = tokio::time::timeout(Duration::from_secs(3600), budget.answer_due(&upload, Duration::ZERO));
        assert!(waiting.await.is_err(), "a deadline ran during the upload");
    }
}
