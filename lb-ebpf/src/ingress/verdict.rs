//! What the program answers for a packet.
use lb_common::stats::Counter;

/// An XDP action and the counter that explains it.
pub type Verdict = (u32, Counter);
