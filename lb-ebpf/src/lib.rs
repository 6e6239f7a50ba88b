//! What both XDP programs (`lb_ingress`, `lb_decap`) share: bounds-checked packet access, the
//! link-layer parse, header constants and the panic handler.
//!
//! Every function here is `#[inline(always)]`: each program must stay one BPF function, as a
//! BPF-to-BPF call costs every packet ~10 ns (measured with `cargo xtask bench dataplane`).
//!
//! The crate's programs are binaries (docs/architecture.md lists them and their tail calls):
//! - `src/ingress/` (`lb_ingress` and the programs it jumps to): `main.rs` the `#[xdp]` entries,
//!   `balance.rs` which path a packet takes, `parse.rs`/`parse6.rs` the headers, `flow.rs`,
//!   `select.rs` and `table.rs` the connection tables and the ring, `nat.rs`, `encap.rs`,
//!   `l2.rs` the rewrites, `icmp*.rs` ICMP answers and errors, `forward.rs` the next hop,
//!   `verdict.rs`, `ip.rs` either family, `maps.rs` every map.
//! - `src/decap/` (`lb_decap`, `lb_pass`): the DSR backend's decapsulator and a bare pass.
//! - [`packet`], here: what both share.
#![no_std]

pub mod packet;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
