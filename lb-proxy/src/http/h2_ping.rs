//! The keep-alive ping of h2 client connections, as hyper's server had it: a PING once an
//! `interval` went by in which nothing was read from the peer, and a peer that answers none
//! within `timeout` is taken for gone (a client whose network went away sends no FIN, and its
//! connection would hold its place for ever). A peer heard from is there: a busy connection
//! is not pinged.
use std::future::{pending, poll_fn};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Duration;

use ::h2::{Ping, PingPong};

/// Resolves when the peer left a ping unanswered for `timeout`; never while it answers, nor
/// once the connection has ended (the connection's own loop sees that). `heard`: set by the
/// client's socket at each read that brought bytes (`h2_socket`).
pub(crate) async fn keep_alive(pings: Option<PingPong>, heard: Arc<AtomicBool>, interval: Duration, timeout: Duration) {
    // Taken once per connection: absent only if taken before.
    let Some(mut pings) = pings else { return pending().await };
    loop {
        tokio::time::sleep(interval).await;
        if heard.swap(false, Relaxed) {
            continue;
        }
        if pings.send_ping(Ping::opaque()).is_err() {
            return pending().await;
        }
        match tokio::time::timeout(timeout, poll_fn(|cx| pings.poll_pong(cx))).await {
            // The answer itself is no news of the peer: the next interval starts silent.
            Ok(Ok(_)) => heard.store(false, Relaxed),
            // The connection has ended.
            Ok(Err(_)) => return pending().await,
            Err(_) => return,
        }
    }
}
