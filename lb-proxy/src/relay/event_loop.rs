//! The established relays of one thread, driven by one task from an epoll set of their own.
//!
//! Relaying through tokio's per-socket machinery cost about twice nginx's user-space
//! instructions per request (callgrind): per message a readiness wake-up through the reactor,
//! a task scheduled and polled, and each read and write through a readiness check. Here the
//! relays' sockets sit in one edge-triggered epoll set (mio), whose descriptor is the only
//! thing registered with tokio: a wake-up of the driver task takes every ready event of the
//! set, and each event is one or two plain socket calls. The relay's own task sleeps until
//! its relay ends (it holds the relay's admission slot, and dropping it, as a forced shutdown
//! does, closes the relay).
//!
//! Idle relays are found by a sweep timed to the earliest moment one can have gone quiet.
use std::cell::RefCell;
use std::future::Future;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Poll as TaskPoll, Waker};
use std::time::Duration;

use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token};
use tokio::io::unix::AsyncFd;
use tokio::sync::oneshot;

use super::direction::{Direction, Side};
use crate::outlier::now_ms;

/// Events taken per epoll_wait.
const EVENTS: usize = 256;
/// Socket calls one relay makes per turn at most: a bulk flow whose peers keep up would
/// otherwise keep the thread (and every other task of the worker) for as long as it lasts.
/// 64 calls move up to 2 MiB of bulk data (32 splices in and out), or 32 small messages.
const BUDGET: u32 = 64;
/// The least time between two idle sweeps: each visits every relay of the thread.
const SWEEP_GAP_MS: u64 = 50;

// Tokens pack a slot's index, its generation and the side; see `token`.
const _: () = assert!(usize::BITS >= 64);

thread_local! {
    /// This thread's loop (workers are single-threaded runtimes: their relays share one).
    static LOCAL: RefCell<Option<Arc<Shared>>> = const { RefCell::new(None) };
}

pub(super) struct Shared {
    state: Mutex<State>,
    /// The epoll set's descriptor (the `Poll` in `state` owns it).
    epoll: RawFd,
    /// The driver task is gone (its runtime ended): the next relay starts another loop.
    dead: AtomicBool,
}

struct State {
    poll: Poll,
    events: Events,
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// When the idle sweep runs next (`now_ms`'s clock); `u64::MAX`: nothing to sweep.
    next_sweep: u64,
    /// The driver task's waker: a relay with an earlier deadline re-arms its timer.
    driver: Option<Waker>,
    /// Relays that spent their budget with work possibly left: the next turn goes on with
    /// them (no event would come for what they left unread).
    again: Vec<Key>,
}

#[derive(Default)]
struct Slot {
    generation: u32,
    relay: Option<Relay>,
}

struct Relay {
    /// The client's side (0) and the backend's (1).
    sides: [Side; 2],
    /// 0 -> 1 and 1 -> 0.
    dirs: [Direction; 2],
    idle_ms: u64,
    /// When a byte last moved either way.
    last: u64,
    done: oneshot::Sender<io::Result<()>>,
}

/// A registered relay: which slot, in which generation of it.
#[derive(Clone, Copy)]
pub(super) struct Key {
    index: u32,
    generation: u32,
}

/// Slot generations wrap at 31 bits: a token holds the index, the generation and the side.
const GENERATIONS: u32 = 0x7fff_ffff;

fn token(key: Key, side: usize) -> Token {
    Token(((key.index as usize) << 32) | ((key.generation as usize) << 1) | side)
}

fn from_token(t: Token) -> (Key, usize) {
    let t = t.0;
    (Key { index: (t >> 32) as u32, generation: (t >> 1) as u32 & GENERATIONS }, t & 1)
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The epoll set's descriptor, as tokio registers it: holding the loop keeps it open.
struct EpollFd(Arc<Shared>);

impl AsRawFd for EpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.epoll
    }
}

impl Shared {
    /// This thread's loop, started (its driver spawned on the current runtime) if there is none.
    pub(super) fn local() -> io::Result<Arc<Shared>> {
        LOCAL.with(|local| {
            let mut local = local.borrow_mut();
            if let Some(shared) = local.as_ref().filter(|s| !s.dead.load(Ordering::Acquire)) {
                return Ok(shared.clone());
            }
            let poll = Poll::new()?;
            let epoll = poll.as_raw_fd();
            let state = State {
                poll,
                events: Events::with_capacity(EVENTS),
                slots: Vec::new(),
                free: Vec::new(),
                next_sweep: u64::MAX,
                driver: None,
                again: Vec::new(),
            };
            let shared = Arc::new(Shared { state: Mutex::new(state), epoll, dead: AtomicBool::new(false) });
            // SAFETY: the descriptor is the Poll's, which `EpollFd`'s Arc keeps alive and
            // never replaces, so it stays open and the same for the AsyncFd's whole life.
            let fd = unsafe { AsyncFd::register_with_interest(EpollFd(shared.clone()), tokio::io::Interest::READABLE) }
                .map_err(io::Error::from)?;
            tokio::spawn(drive(fd));
            *local = Some(shared.clone());
            Ok(shared)
        })
    }

    /// Adds a relay between `a` (the client) and `b`; the receiver gets how it ended.
    pub(super) fn add(
        &self,
        a: TcpStream,
        b: TcpStream,
        idle: Duration,
    ) -> io::Result<(Key, oneshot::Receiver<io::Result<()>>)> {
        let (done, ended) = oneshot::channel();
        let now = now_ms();
        let idle_ms = idle.as_millis().min(u64::MAX as u128) as u64;
        let mut st = lock(&self.state);
        let index = match st.free.pop() {
            Some(i) => i,
            None => {
                st.slots.push(Slot::default());
                (st.slots.len() - 1) as u32
            }
        };
        let key = Key { index, generation: st.slots[index as usize].generation };
        let registry = st.poll.registry();
        let both = Interest::READABLE | Interest::WRITABLE;
        let registered = registry
            .register(&mut SourceFd(&a.as_raw_fd()), token(key, 0), both)
            .and_then(|()| registry.register(&mut SourceFd(&b.as_raw_fd()), token(key, 1), both));
        if let Err(e) = registered {
            // Closing the sockets takes them out of the set.
            st.free.push(index);
            return Err(e);
        }
        let relay = Relay {
            sides: [Side::new(a), Side::new(b)],
            dirs: [Direction::new(), Direction::new()],
            idle_ms,
            last: now,
            done,
        };
        st.slots[index as usize].relay = Some(relay);
        let deadline = now.saturating_add(idle_ms);
        if deadline < st.next_sweep {
            st.next_sweep = deadline;
            if let Some(w) = &st.driver {
                w.wake_by_ref();
            }
        }
        Ok((key, ended))
    }

    /// Ends a relay whose task went away (a forced shutdown): both sockets are closed.
    pub(super) fn cancel(&self, key: Key) {
        let mut st = lock(&self.state);
        if st.slots.get_mut(key.index as usize).and_then(|s| s.live(key)).is_some() {
            drop(st.remove(key.index));
        }
    }

    /// Goes on with the relays left from the last turn, then (if `epoll`) takes every ready
    /// event of the set and acts on it, until the set is drained. Returns whether some relay
    /// spent its budget (the driver yields, then turns again).
    fn turn(&self, epoll: bool) -> io::Result<bool> {
        let mut st = lock(&self.state);
        let st = &mut *st;
        let now = now_ms();
        for key in std::mem::take(&mut st.again) {
            st.step(key, now);
        }
        if !epoll {
            return Ok(!st.again.is_empty());
        }
        loop {
            match st.poll.poll(&mut st.events, Some(Duration::ZERO)) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                r => r?,
            }
            let mut taken = 0;
            for event in st.events.iter() {
                taken += 1;
                let (key, side) = from_token(event.token());
                let Some(relay) = st.slots.get_mut(key.index as usize).and_then(|s| s.live(key)) else {
                    // A relay that ended earlier in this batch.
                    continue;
                };
                let s = &mut relay.sides[side];
                let closed = event.is_read_closed() || event.is_error();
                s.readable |= event.is_readable() || closed;
                s.read_closed |= closed;
                s.writable |= event.is_writable() || event.is_write_closed() || event.is_error();
                // The events borrow `st.events`: the step takes the other fields one by one.
                step(&mut st.slots, &mut st.free, &mut st.again, key, now);
            }
            if taken < EVENTS {
                return Ok(!st.again.is_empty());
            }
        }
    }

    /// Ends the relays that were quiet for their idle time; returns when to look next.
    fn sweep(&self) -> u64 {
        let mut st = lock(&self.state);
        let now = now_ms();
        let mut next = u64::MAX;
        for index in 0..st.slots.len() as u32 {
            let Some(relay) = &st.slots[index as usize].relay else { continue };
            let deadline = relay.last.saturating_add(relay.idle_ms);
            if deadline <= now {
                let relay = st.remove(index);
                let _ = relay.done.send(Ok(()));
            } else {
                next = next.min(deadline);
            }
        }
        st.next_sweep = if next == u64::MAX { next } else { next.max(now + SWEEP_GAP_MS) };
        st.next_sweep
    }

    /// Keeps the driver's waker; returns when the next sweep is due.
    fn arm(&self, waker: &Waker) -> u64 {
        let mut st = lock(&self.state);
        if !st.driver.as_ref().is_some_and(|w| w.will_wake(waker)) {
            st.driver = Some(waker.clone());
        }
        st.next_sweep
    }

    /// The driver is gone: the relays left end with an error and the next relay starts anew.
    fn stop(&self) {
        self.dead.store(true, Ordering::Release);
        let mut st = lock(&self.state);
        for index in 0..st.slots.len() as u32 {
            if st.slots[index as usize].relay.is_some() {
                let relay = st.remove(index);
                let _ = relay.done.send(Err(io::Error::other("the relay loop ended")));
            }
        }
        st.driver = None;
    }
}

impl Slot {
    /// The relay, if `key` names this slot's current one.
    fn live(&mut self, key: Key) -> Option<&mut Relay> {
        self.relay.as_mut().filter(|_| self.generation == key.generation)
    }
}

impl State {
    fn remove(&mut self, index: u32) -> Relay {
        remove(&mut self.slots, &mut self.free, index)
    }

    fn step(&mut self, key: Key, now: u64) {
        step(&mut self.slots, &mut self.free, &mut self.again, key, now);
    }
}

/// Frees slot `index` and hands back its relay: dropping it closes both sockets (which also
/// takes them out of the epoll set) and its pipes.
fn remove(slots: &mut [Slot], free: &mut Vec<u32>, index: u32) -> Relay {
    let slot = &mut slots[index as usize];
    slot.generation = slot.generation.wrapping_add(1) & GENERATIONS;
    free.push(index);
    slot.relay.take().expect("a live relay")
}

/// Steps relay `key` if it is still there; ends it when it is over, or puts it on `again`
/// when it spent its budget.
fn step(slots: &mut [Slot], free: &mut Vec<u32>, again: &mut Vec<Key>, key: Key, now: u64) {
    let Some(relay) = slots.get_mut(key.index as usize).and_then(|s| s.live(key)) else { return };
    match relay.step(now) {
        Step::Wait => {}
        Step::More => again.push(key),
        Step::End(end) => {
            let _ = remove(slots, free, key.index).done.send(end);
        }
    }
}

enum Step {
    /// Both directions wait for events.
    Wait,
    /// The budget ran out: there may be more to move.
    More,
    /// Both FINs went on, or an error ended it.
    End(io::Result<()>),
}

impl Relay {
    /// Moves what both directions can, within the budget.
    fn step(&mut self, now: u64) -> Step {
        let [a, b] = &mut self.sides;
        let mut budget = BUDGET;
        let moved = self.dirs[0].step(a, b, &mut budget).and_then(|m| Ok(m | self.dirs[1].step(b, a, &mut budget)?));
        let moved = match moved {
            Ok(moved) => moved,
            Err(e) => return Step::End(Err(e)),
        };
        if moved {
            self.last = now;
        }
        if self.dirs[0].done && self.dirs[1].done {
            Step::End(Ok(()))
        } else if budget == 0 {
            Step::More
        } else {
            Step::Wait
        }
    }
}

/// Marks the loop dead when the driver task is dropped (its runtime ended).
struct StopOnDrop(Arc<Shared>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// The driver task: on each readiness of the epoll set, a turn; on its timer, a sweep.
async fn drive(fd: AsyncFd<EpollFd>) {
    let shared = StopOnDrop(fd.get_ref().0.clone());
    let shared = &shared.0;
    let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    // The sweep time the timer is set to (`u64::MAX`: not set).
    let mut armed = u64::MAX;
    // Some relay spent its budget in the last turn: go on with it.
    let mut more = false;
    std::future::poll_fn(|cx| {
        let mut turned = false;
        loop {
            match fd.poll_read_ready(cx) {
                TaskPoll::Ready(Ok(mut ready)) => match shared.turn(true) {
                    // Drained: tokio keeps any readiness that came since it reported this one.
                    Ok(left) => {
                        ready.clear_ready();
                        (more, turned) = (left, true);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "relay loop: epoll_wait failed");
                        return TaskPoll::Ready(());
                    }
                },
                TaskPoll::Ready(Err(e)) => {
                    tracing::error!(error = %e, "relay loop: readiness failed");
                    return TaskPoll::Ready(());
                }
                TaskPoll::Pending => break,
            }
        }
        if more && !turned {
            more = shared.turn(false).unwrap_or(false);
        }
        let mut next = shared.arm(cx.waker());
        while next != u64::MAX {
            if next != armed {
                let wait = Duration::from_millis(next.saturating_sub(now_ms()));
                timer.as_mut().reset(tokio::time::Instant::now() + wait);
                armed = next;
            }
            if timer.as_mut().poll(cx).is_pending() {
                break;
            }
            armed = u64::MAX;
            next = shared.sweep();
        }
        if more {
            // Yields to the worker's other tasks, then comes back.
            cx.waker().wake_by_ref();
        }
        TaskPoll::Pending
    })
    .await
}
