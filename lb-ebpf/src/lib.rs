//! What both XDP programs (`lb_ingress`, `lb_decap`) share: bounds-checked packet access, the
//! link-layer parse, header constants and the panic handler.
//!
//! Every function here is `#[inline(always)]`: each program must stay one BPF function, as a
//! BPF-to-BPF call costs every packet ~10 ns (measured with `cargo xtask bench dataplane`).
#![no_std]

pub mod packet;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
