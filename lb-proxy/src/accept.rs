//! Accepting a VIP's client connections. Normally every worker has its own listener on the
//! VIP's address (SO_REUSEPORT: the kernel spreads connections over them by their 4-tuple) and
//! serves what it accepts itself: no connection crosses threads. A VIP started on one
//! listener bound elsewhere has one acceptor, which hands connections to the workers in turn
//! (a re-registration with the receiving worker's reactor). Either way each connection is
//! admitted against the VIP's cap and then lives on one worker.
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::net::{TcpListener, TcpStream};

use crate::config::Mode;
use crate::shutdown::Tasks;
use crate::vip::Vip;
use crate::workers::{self, WorkerSet};

/// Errors after which the listener never accepts again (it was shut down or closed under
/// us), as opposed to passing ones (out of descriptors, an aborted handshake).
fn listener_is_gone(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EINVAL | libc::EBADF | libc::ENOTSOCK | libc::EOPNOTSUPP))
}

/// Accepts until `stop`, serving each connection in its own tracked task: on this worker when
/// `spread` is false (a listener per worker), else on the workers in turn.
pub(crate) async fn serve(listener: TcpListener, vip: Arc<Vip>, tasks: Tasks, set: Arc<WorkerSet>, spread: bool) {
    let stop = tasks.stop.clone();
    let stopping = stop.raised();
    tokio::pin!(stopping);
    loop {
        // Stop first: a flood of connections must not keep the listener from closing.
        let accepted = tokio::select! {
            biased;
            _ = stopping.as_mut() => break,
            r = listener.accept() => r,
        };
        let (stream, client) = match accepted {
            Ok(a) => a,
            Err(e) if listener_is_gone(&e) => {
                tracing::error!(vip = %vip.spec.name, error = %e, "the VIP's listener failed: it accepts nothing more");
                vip.counters.listener_lost.store(true, Relaxed);
                break;
            }
            Err(e) => {
                // Out of descriptors and the like: back off instead of spinning.
                tracing::warn!(vip = %vip.spec.name, error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        // A TCP client's connection rate (an HTTP client's is its request rate, checked per
        // request).
        if vip.spec.mode == Mode::Tcp
            && let Some(rate) = &vip.per_client_rate
            && rate.check(client.ip()).is_err()
        {
            vip.counters.clients_limited.fetch_add(1, Relaxed);
            refuse(stream, &vip, &tasks, crate::http::TOO_MANY_RESPONSE);
            continue;
        }
        // The client's own cap first: a client at it must not hold a place of the VIP's.
        let place = match &vip.per_client {
            Some(limit) => match limit.try_admit(client.ip()) {
                Some(place) => Some(place),
                None => {
                    vip.counters.clients_limited.fetch_add(1, Relaxed);
                    refuse(stream, &vip, &tasks, crate::http::TOO_MANY_RESPONSE);
                    continue;
                }
            },
            None => None,
        };
        let Some(permit) = vip.conn_limit.try_admit() else {
            refuse(stream, &vip, &tasks, crate::http::BUSY_RESPONSE);
            continue;
        };
        let worker = if spread { set.next() } else { workers::current() };
        let places = (permit, place);
        if worker == workers::current() && vip.spec.mode == Mode::Http && vip.tls.is_none() {
            // A plain HTTP connection served where it was accepted (nearly all of them): its
            // task is its HTTP/1 serving itself, built in the task's box. Built in an async
            // function instead, that serving (kilobytes) would be copied whole into the
            // function's state as it first ran.
            let open = Open::new(vip.clone(), places);
            let task = built_in_box(|| {
                let serving = crate::http::serve_plain(stream, client, vip.clone(), tasks.clone());
                Holding { fut: crate::shutdown::until_owned(&tasks.force, serving), open }
            });
            set.spawn_on(worker, &tasks.tracker, task);
            continue;
        }
        // A stream is registered with the reactor of the worker that accepted it; another
        // worker registers it anew with its own.
        let stream = if worker == workers::current() {
            Accepted::Here(stream)
        } else {
            match stream.into_std() {
                Ok(s) => Accepted::Moved(s),
                Err(e) => {
                    tracing::debug!(error = %e, "handing a connection over failed");
                    continue;
                }
            }
        };
        let task = built_in_box(|| connection(stream, client, vip.clone(), tasks.clone(), places));
        set.spawn_on(worker, &tasks.tracker, task);
    }
}

/// Refuses a connection before it is served: plain HTTP gets `response`; TLS and TCP clients
/// are closed at once (the TCP way to say "busy"; a TLS client would read plain text as garbage).
fn refuse(stream: TcpStream, vip: &Vip, tasks: &Tasks, response: &'static [u8]) {
    vip.counters.rejected.fetch_add(1, Relaxed);
    if vip.spec.mode == Mode::Http && vip.tls.is_none() {
        tasks.tracker.spawn(crate::http::refuse_connection(stream, response));
    }
}

/// `make()`'s value in a box allocated first. A connection's future is kilobytes: a task's
/// future is moved several times on its way into the runtime and written over once more
/// when it ends, which a box makes a pointer's moves; and built on the stack and then boxed
/// (`Box::pin`), it would be copied whole into the box (0.5k instructions, callgrind).
#[inline(always)]
fn built_in_box<F>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// A connection's place under the VIP's cap and under its client's.
type Places = (crate::limits::ConnPlace, Option<crate::limits::ClientPlace>);

/// What a connection holds while it is open: its places, and its count among the VIP's
/// connections and the process's (`trim`); all given back when it is dropped.
struct Open {
    vip: Arc<Vip>,
    _places: Places,
}

impl Open {
    fn new(vip: Arc<Vip>, places: Places) -> Open {
        // TCP_NODELAY and keepalive come from the listener (`pool::set_client_options`).
        vip.counters.client_connections.fetch_add(1, Relaxed);
        crate::trim::connection_opened();
        Open { vip, _places: places }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.vip.counters.client_connections.fetch_sub(1, Relaxed);
        crate::trim::connection_closed();
    }
}

pin_project! {
    /// A connection's serving, holding the connection open ([`Open`]) until it ends.
    struct Holding<F> {
        #[pin]
        fut: F,
        open: Open,
    }
}

impl<F: Future<Output = ()>> Future for Holding<F> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.project().fut.poll(cx)
    }
}

enum Accepted {
    Here(TcpStream),
    Moved(std::net::TcpStream),
}

async fn connection(stream: Accepted, client: SocketAddr, vip: Arc<Vip>, tasks: Tasks, places: Places) {
    let stream = match stream {
        Accepted::Here(s) => s,
        Accepted::Moved(s) => match TcpStream::from_std(s) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "registering a connection failed");
                return;
            }
        },
    };
    let _open = Open::new(vip.clone(), places);
    match vip.spec.mode {
        Mode::Http => {
            // A forced stop drops the connection wherever it is. Watched here, around the
            // serving's own future, so that future is one level below the task's.
            let force = tasks.force.clone();
            crate::shutdown::until(&force, crate::http::serve_connection(stream, client, &vip, tasks)).await
        }
        Mode::Tcp => crate::tcp::serve_connection(stream, client, &vip, tasks).await,
    }
}
