//! Who holds the control API's connections, so that a client that opens many and leaves them
//! idle (a leaking script, a connection hog) can never lock the operator's own CLI out: at the
//! cap, a new connection takes the place of the oldest idle one (no request in progress;
//! a half-sent request header counts as idle), and is refused only when every connection is
//! busy with a request.
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::task::AbortHandle;

/// The open connections, oldest first.
pub struct Admission {
    max: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    next_id: u64,
    /// By admission order: the first entry is the oldest.
    connections: BTreeMap<u64, Held>,
}

struct Held {
    /// Requests in progress on the connection.
    busy: Arc<AtomicUsize>,
    /// Ends the connection's task; None until it is spawned.
    abort: Option<AbortHandle>,
}

/// What admitting a connection did.
#[derive(Debug, PartialEq, Eq)]
pub enum Admitted {
    /// There was room.
    Room,
    /// The oldest idle connection was closed to make room.
    ClosedOldestIdle,
}

impl Admission {
    pub fn new(max: usize) -> Arc<Admission> {
        Arc::new(Admission { max: max.max(1), open: Mutex::new(Open::default()) })
    }

    /// Admits a new connection, closing the oldest idle one if the cap is reached; None when
    /// every connection is busy.
    pub fn admit(self: &Arc<Self>) -> Option<(Ticket, Admitted)> {
        let mut open = self.open.lock().expect("admission lock");
        let mut admitted = Admitted::Room;
        if open.connections.len() >= self.max {
            let idle = open
                .connections
                .iter()
                .find(|(_, held)| held.abort.is_some() && held.busy.load(Ordering::Acquire) == 0)
                .map(|(id, _)| *id)?;
            let held = open.connections.remove(&idle).expect("found above");
            held.abort.expect("checked above").abort();
            admitted = Admitted::ClosedOldestIdle;
        }
        let id = open.next_id;
        open.next_id += 1;
        let busy = Arc::new(AtomicUsize::new(0));
        open.connections.insert(id, Held { busy: busy.clone(), abort: None });
        Some((Ticket { id, busy, admission: self.clone() }, admitted))
    }

    /// Names the task serving connection `id` (which owns its ticket): closing the connection
    /// as idle aborts it. Nothing if the task has already ended.
    pub fn serving(&self, id: u64, task: AbortHandle) {
        if let Some(held) = self.open.lock().expect("admission lock").connections.get_mut(&id) {
            held.abort = Some(task);
        }
    }

    /// Connections held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.open.lock().expect("admission lock").connections.len()
    }
}

/// A connection's place, given back when it is dropped (its task ended or was aborted).
pub struct Ticket {
    id: u64,
    busy: Arc<AtomicUsize>,
    admission: Arc<Admission>,
}

impl Ticket {
    /// The connection's number, to name its task with [`Admission::serving`].
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A handle for the connection's service to mark requests with.
    pub fn busy_marker(&self) -> BusyMarker {
        BusyMarker(self.busy.clone())
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.admission.open.lock().expect("admission lock").connections.remove(&self.id);
    }
}

/// Marks requests of one connection as in progress.
#[derive(Clone)]
pub struct BusyMarker(Arc<AtomicUsize>);

impl BusyMarker {
    pub fn request(&self) -> Busy {
        self.0.fetch_add(1, Ordering::AcqRel);
        Busy(self.0.clone())
    }
}

/// A request in progress.
pub struct Busy(Arc<AtomicUsize>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_cap_the_oldest_idle_connection_gives_way() {
        let admission = Admission::new(2);
        let task = || tokio::spawn(std::future::pending::<()>());
        let (first, _) = admission.admit().unwrap();
        let first_task = task();
        admission.serving(first.id(), first_task.abort_handle());
        let (second, _) = admission.admit().unwrap();
        let second_task = task();
        admission.serving(second.id(), second_task.abort_handle());
        let busy = second.busy_marker().request();
        // Full: the first (idle) is closed for the third.
        let (third, admitted) = admission.admit().unwrap();
        assert_eq!(admitted, Admitted::ClosedOldestIdle);
        assert!(first_task.await.unwrap_err().is_cancelled(), "the oldest idle connection was closed");
        drop(first);
        assert_eq!(admission.held(), 2);
        // The third has no task yet and the second is busy: nothing can give way.
        assert!(admission.admit().is_none(), "every connection busy (or starting): refused");
        drop(busy);
        // Idle again: the second gives way, being older than the third.
        let third_task = task();
        admission.serving(third.id(), third_task.abort_handle());
        let (_fourth, admitted) = admission.admit().unwrap();
        assert_eq!(admitted, Admitted::ClosedOldestIdle);
        assert!(second_task.await.unwrap_err().is_cancelled());
        assert!(!third_task.is_finished());
        third_task.abort();
    }
}
