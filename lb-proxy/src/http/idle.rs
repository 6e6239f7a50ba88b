//! The inactivity timer of a streaming body: armed only once the body has to wait (most
//! bodies never do, and pay nothing), pushed back by every frame that arrives.
use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::Duration;

use tokio::time::{Instant, Sleep};

pub(crate) struct IdleTimer {
    idle: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl IdleTimer {
    pub(crate) fn new(idle: Duration) -> Self {
        IdleTimer { idle, sleep: None }
    }

    /// Something moved: the silence starts again.
    pub(crate) fn activity(&mut self) {
        if let Some(s) = &mut self.sleep {
            s.as_mut().reset(Instant::now() + self.idle);
        }
    }

    /// Called when the body has to wait: true once it has been silent for the idle time.
    pub(crate) fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        let idle = self.idle;
        let sleep = self.sleep.get_or_insert_with(|| Box::pin(tokio::time::sleep(idle)));
        sleep.as_mut().poll(cx).is_ready()
    }
}
