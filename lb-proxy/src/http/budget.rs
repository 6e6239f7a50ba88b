//! A request's two answer deadlines, kept on one timer: the request budget
//! (`timeouts.request`: from the end of the upload to the response head, over queueing,
//! connecting and every attempt) and each attempt's `timeouts.backend_header` (from the end of
//! the upload, or of the attempt's start if later). Both start only once the upload has ended,
//! so a slow but steady upload is not cut.
use std::time::Duration;

use tokio::time::Instant;

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
        tokio::time::sleep_until(backend_at.min(request_at)).await;
        if backend_at <= request_at { Late::Backend } else { Late::Request }
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
    async fn nothing_starts_before_the_upload_ends() {
        let upload = Upload::default();
        let mut budget = Budget::new(Duration::from_millis(100));
        assert_eq!(budget.end(&upload), None);
        let waiting = tokio::time::timeout(Duration::from_secs(3600), budget.answer_due(&upload, Duration::ZERO));
        assert!(waiting.await.is_err(), "a deadline ran during the upload");
    }
}
