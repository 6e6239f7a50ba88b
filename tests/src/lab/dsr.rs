//! DSR backends in the lab: the VIP on `lo`, a test backend on the VIP's port, and the
//! decapsulator attached by the product command (`lb-ctl decap attach`), taken off again when
//! the guard drops (also on panic: the namespaces go with the lab, bpffs pins would stay).
use std::net::Ipv4Addr;
use std::path::Path;

use lb_ctl::paths::AttachPaths;

use super::{LB_BACKEND_SIDE, Lab};

/// The decapsulators the lab's DSR backends run; dropping this takes them off.
#[derive(Default)]
pub struct DecapPins(Vec<AttachPaths>);

impl Drop for DecapPins {
    fn drop(&mut self) {
        for paths in &self.0 {
            let _ = lb_ctl::dataplane::attach::detach_decap_at(paths);
        }
    }
}

impl Lab {
    /// Makes backend `i` a DSR (IPIP) backend of `vip`: the VIP on its `lo`, `lb-test-backend`
    /// (`backend_bin`, named `backend-i`) on port `port` of every address (the VIP for clients,
    /// its own for health checks), the decapsulator on its `eth0`.
    pub fn dsr_backend(&mut self, i: usize, vip: Ipv4Addr, port: u16, backend_bin: &Path, pins: &mut DecapPins) {
        let ns_name = self.backends[i].name.clone();
        self.backends[i].exec(&["ip", "addr", "add", &format!("{vip}/32"), "dev", "lo"]);
        let listen = format!("0.0.0.0:{port}");
        self.spawn(&ns_name, &[backend_bin.to_str().unwrap(), &listen, &format!("backend-{i}")]);
        crate::netns::sh(&[
            "nsenter",
            &format!("--net=/run/netns/{ns_name}"),
            crate::lb_ctl_bin().to_str().unwrap(),
            "decap",
            "attach",
            "eth0",
            "--from",
            LB_BACKEND_SIDE,
            "--xdp-mode",
            "native",
        ]);
        let _in = self.backends[i].enter();
        pins.0.push(AttachPaths::decap("eth0"));
    }
}
