//! The program's debug messages (aya-log): a dropped packet's line reaches the log with the
//! counter and what it means, when the program was loaded at debug level; loaded below it,
//! the program makes none (the real lb_ingress, run with BPF_PROG_TEST_RUN); and a daemon
//! whose log filter wants them writes them to its log (the namespace lab). Needs root.
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use aya_log::EbpfLogger;
use lb_common::program_names;
use lb_common::stats::Counter;
use lb_ctl::dataplane::Dataplane as _;
use lb_ctl::dataplane::aya::AyaDataplane;
use lb_ctl::dataplane::load::{LoadOptions, load_ingress, program};
use lb_ctl::dataplane::messages;
use lb_tests::fixture::{CLIENT, FLOW_TABLE, RING, configure, lab, vips};
use lb_tests::lab::{Daemon, Lab, client_addr};
use lb_tests::netns::{enter_named, ifindex};
use lb_tests::packets::Frame;
use lb_tests::privileges::require_root;
use lb_tests::testrun::{action_name, run_xdp};

const VIP: Ipv4Addr = Ipv4Addr::new(203, 0, 113, 10);

/// The log records the program's messages became: (level, target, text).
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<(log::Level, String, String)>>>);

impl log::Log for Captured {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let line = (record.level(), record.target().to_string(), record.args().to_string());
        self.0.lock().unwrap().push(line);
    }
    fn flush(&self) {}
}

/// Drops one packet (a TCP SYN to the fixture's VIP without backends) through a balancer
/// loaded with `debug_messages`, and returns the messages it made.
fn messages_of_a_drop(debug_messages: bool) -> Vec<(log::Level, String, String)> {
    let ns = lab();
    let _inside = ns.enter();
    let options = LoadOptions { ring_size: RING, flow_table_size: FLOW_TABLE, debug_messages, ..Default::default() };
    let mut ebpf = load_ingress(&options).expect("loading lb_ingress");
    let captured = Captured::default();
    let mut logger = EbpfLogger::init_with_logger(&mut ebpf, captured.clone()).expect("the program's AYA_LOGS");
    let mut dp = AyaDataplane::new(ebpf, RING);
    configure(&mut dp, &vips());
    let syn = Frame::tcp(CLIENT, 40000, [203, 0, 113, 30], 80).bytes();
    let before = dp.counters().unwrap();
    let prog = program(dp.ebpf_mut(), program_names::INGRESS).unwrap();
    let result = run_xdp(prog, &syn, ifindex("g0"));
    assert_eq!(action_name(result.action), "XDP_DROP");
    let after = dp.counters().unwrap();
    let dropped = |c: &Vec<(Counter, u64)>| c.iter().find(|(k, _)| *k == Counter::DropNoBackend).map_or(0, |(_, v)| *v);
    assert_eq!(dropped(&after) - dropped(&before), 1, "counted drop_no_backend");
    logger.flush();
    captured.0.lock().unwrap().clone()
}

#[test]
fn a_drop_is_told_at_debug_level() {
    if !require_root("a_drop_is_told_at_debug_level") {
        return;
    }
    let lines = messages_of_a_drop(true);
    assert_eq!(lines.len(), 1, "one line for one drop: {lines:?}");
    let (level, target, text) = &lines[0];
    assert_eq!(*level, log::Level::Debug);
    assert_eq!(target, messages::TARGET);
    let bytes = Frame::tcp(CLIENT, 40000, [203, 0, 113, 30], 80).bytes().len();
    assert!(text.starts_with(&format!("dropped {bytes} bytes from ifindex ")), "{text}");
    assert!(text.contains("drop_no_backend (the VIP has no backend taking connections)"), "{text}");
}

#[test]
fn below_debug_the_program_says_nothing() {
    if !require_root("below_debug_the_program_says_nothing") {
        return;
    }
    let lines = messages_of_a_drop(false);
    assert!(lines.is_empty(), "{lines:?}");
}

/// The daemon, started with the program's messages in its filter, writes a drop's line to its
/// log: a VIP without backends drops a client's SYN.
#[test]
fn the_daemon_logs_the_programs_messages() {
    if !require_root("the_daemon_logs_the_programs_messages") {
        return;
    }
    let lab = Lab::new("pm", 1, 1);
    let filter = format!("info,{}=debug", messages::TARGET);
    let mut d = Daemon::new(&lab.lb, "eth0", "pm", &["--xdp-mode", "native", "--log-level", &filter]);
    d.write_config_text(&format!(
        "[daemon]\napi_socket = \"{}\"\n\n[[vip]]\nname = \"web\"\naddress = \"{VIP}\"\nport = 80\nbackends = []\n",
        d.socket().display(),
    ));
    d.start();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        {
            let _in = enter_named(&lab.client.name);
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
            socket.bind(&SocketAddr::from((client_addr(0), 0)).into()).unwrap();
            let _ = socket.connect_timeout(&SocketAddr::from((VIP, 80)).into(), Duration::from_millis(300));
        }
        let log = d.log_text();
        if log.contains("drop_no_backend (the VIP has no backend taking connections)") {
            assert!(log.contains(messages::TARGET), "the line carries its target:\n{log}");
            break;
        }
        assert!(Instant::now() < deadline, "no drop was told in the log:\n{log}\n{}", d.ok(&["stats"]));
    }
    assert!(d.stop().success());
}
