//! Names of per-interface things (pins, sockets, saved ids) are shared by every network
//! namespace on the host, interface names are not: outside the initial namespace they carry
//! the namespace's inode ("eth0@netns4026532xxx").
use std::os::unix::fs::MetadataExt as _;

/// The initial namespace's fixed inode (PROC_NET_INIT_INO), for when /proc/1 is not ours to
/// read (containers, sandboxes).
const PROC_NET_INIT_INO: u64 = 0xEFFF_FFF9;

/// "" in the initial network namespace, "@netnsINODE" in any other.
pub fn suffix() -> String {
    let inode = |path: &str| std::fs::metadata(path).map(|m| m.ino()).ok();
    let Some(own) = inode("/proc/thread-self/ns/net") else { return String::new() };
    let init = inode("/proc/1/ns/net").unwrap_or(PROC_NET_INIT_INO);
    if own == init || own == PROC_NET_INIT_INO { String::new() } else { format!("@netns{own}") }
}
