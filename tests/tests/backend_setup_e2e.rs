//! `lb-ctl backend-setup` on a DSR backend (a namespace of its own with a veth): `--check`
//! finds what is missing, `--apply` makes it so (the VIP on lo, ARP and reverse-path sysctls,
//! the pinned decapsulator), and `--check` then passes. Needs root.
use std::process::Command;

use lb_tests::netns::Netns;
use lb_tests::privileges::require_root;

#[test]
fn backend_setup_checks_applies_and_checks_again() {
    if !require_root("backend_setup_checks_applies_and_checks_again") {
        return;
    }
    let ns = Netns::new("bs");
    ns.exec(&["ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"]);
    ns.exec(&["ip", "link", "set", "eth0", "up"]);
    ns.exec(&["ip", "link", "set", "eth1", "up"]);
    let bin = lb_tests::lb_ctl_bin();
    let setup = |extra: &str| {
        Command::new("nsenter")
            .arg(format!("--net=/run/netns/{}", ns.name))
            .arg(&bin)
            .args(["backend-setup", "eth0", "--vip", "203.0.113.20", "--from", "198.51.100.1", extra])
            .output()
            .unwrap()
    };
    /// Takes the decapsulator off at the end, also on panic (its pin outlives the namespace).
    struct Detach<'a>(&'a str, &'a std::path::Path);
    impl Drop for Detach<'_> {
        fn drop(&mut self) {
            let _ = Command::new("nsenter")
                .arg(format!("--net=/run/netns/{}", self.0))
                .arg(self.1)
                .args(["decap", "detach", "eth0"])
                .output();
        }
    }
    let _detach = Detach(&ns.name, &bin);
    let before = setup("--check");
    let text = String::from_utf8_lossy(&before.stdout).into_owned();
    assert_eq!(before.status.code(), Some(1), "{text}");
    assert!(
        text.contains("MISSING  VIP 203.0.113.20 on lo")
            && text.contains("MISSING  decapsulator (IPIP and GUE) on eth0"),
        "{text}"
    );
    let applied = setup("--apply");
    assert!(
        applied.status.success(),
        "{}{}",
        String::from_utf8_lossy(&applied.stdout),
        String::from_utf8_lossy(&applied.stderr)
    );
    let after = setup("--check");
    let text = String::from_utf8_lossy(&after.stdout).into_owned();
    assert!(after.status.success() && !text.contains("MISSING"), "{text}");
    let lo = String::from_utf8_lossy(&ns.exec(&["ip", "-4", "-o", "addr", "show", "dev", "lo"]).stdout).into_owned();
    assert!(lo.contains("203.0.113.20/32"), "{lo}");
    // Applying again changes nothing and succeeds.
    let again = setup("--apply");
    assert!(again.status.success() && !String::from_utf8_lossy(&again.stdout).contains("applied"));
}
