//! `explain` tells what the program does. The real daemon (its writer and API, over the loaded
//! program's maps) explains where flows go; BPF_PROG_TEST_RUN of each flow's packets shows
//! where they actually went. Many clients of an IP-hash VIP and of a 5-tuple VIP, first
//! packets (ring slot) and later ones (connection-table hit), and a backend removed: the
//! two must agree every time. Needs root.
use std::time::Duration;

use aya::programs::Xdp;
use lb_common::program_names;
use lb_ctl::api::client::Client;
use lb_ctl::api::types::{BackendRequest, Decision, ExplainRequest};
use lb_ctl::config::Config;
use lb_ctl::daemon::{self, Listeners, Options};
use lb_ctl::dataplane::load::program;
use lb_tests::fixture::{self, B1, B2, FLOW_TABLE, RING};
use lb_tests::netns::ifindex;
use lb_tests::packets::{Frame, L4};
use lb_tests::privileges::require_root;
use lb_tests::testrun::run_xdp;

const XDP_TX: u32 = 3;

fn addr(a: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", a[0], a[1], a[2], a[3])
}

/// Where the program sent a NAT packet: destination address and port of its output.
fn sent_to(output: &[u8]) -> String {
    let ip = &output[14..34];
    let port = u16::from_be_bytes([output[36], output[37]]);
    format!("{}.{}.{}.{}:{port}", ip[16], ip[17], ip[18], ip[19])
}

#[test]
fn explain_equals_the_programs_choice() {
    if !require_root("explain_equals_the_programs_choice") {
        return;
    }
    let lab = fixture::lab();
    let _in = lab.enter();
    let g0 = ifindex("g0");
    let mut dp = Box::new(fixture::balancer());
    // The daemon takes the data plane; the test runs the program it holds. The program lives
    // in the loaded object's heap storage, which moving the box does not move.
    let prog: *const Xdp = program(dp.ebpf_mut(), program_names::INGRESS).unwrap();
    // SAFETY: `dp` is owned by the daemon until `daemon` is joined at the end of this test,
    // and test runs only read the program (its fd).
    let prog: &Xdp = unsafe { &*prog };

    let dir = tempfile::tempdir().unwrap();
    let text = format!(
        "[daemon]\nring_size = {RING}\nflow_table_size = {FLOW_TABLE}\nhash_seed = 77\nnexthop_ttl = \"0s\"\n\
         [[vip]]\nname = \"ip\"\naddress = \"203.0.113.10\"\nport = 80\n\
         backends = [ {{ address = \"{b1}\", port = 8080 }}, {{ address = \"{b2}\", port = 8080 }}, {{ address = \"{b2}\", port = 8081 }} ]\n\
         [[vip]]\nname = \"flow\"\naddress = \"203.0.113.60\"\nport = 80\nhash = \"flow\"\n\
         backends = [ {{ address = \"{b1}\", port = 9090 }}, {{ address = \"{b2}\", port = 9090 }} ]\n",
        b1 = addr(B1),
        b2 = addr(B2),
    );
    std::fs::write(dir.path().join("lb.toml"), &text).unwrap();
    let config = Config::load(&dir.path().join("lb.toml")).unwrap_or_else(|e| panic!("{e}"));
    let socket = dir.path().join("lb.sock");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let control = runtime.block_on(async { lb_ctl::api::server::bind_unix(&socket) }).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let options = Options { interface: "g0".into(), ..Default::default() };
    let daemon = runtime.spawn(daemon::serve(config, Listeners::unix(control), dp, options, async {
        let _ = stopped.await;
    }));
    let client = Client::new(&socket);
    runtime.block_on(async {
        for _ in 0..100 {
            if client.status().await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("the daemon did not answer");
    });
    let explain = |vip: &str, client_addr: &str| {
        runtime
            .block_on(client.explain(&ExplainRequest { vip: vip.into(), client: client_addr.into(), quic_cid: None }))
            .unwrap()
    };

    let mut checked = 0;
    let mut check = |vip: &str, vip_addr: [u8; 4], src: [u8; 4], port: u16, l4: L4, want: Decision| {
        let said = explain(vip, &format!("{}:{port}", addr(src)));
        let frame = Frame::tcp(src, port, vip_addr, 80).with(|f| f.l4 = l4).bytes();
        let out = run_xdp(prog, &frame, g0);
        assert_eq!(out.action, XDP_TX, "{vip} from {}:{port}: the program forwards", addr(src));
        let went = sent_to(&out.output);
        let explained = said.backend.map(|b| b.to_string());
        assert_eq!(explained.as_deref(), Some(went.as_str()), "{vip} from {}:{port}: {}", addr(src), said.reason);
        assert_eq!(said.decision, want, "{vip} from {}:{port}: {}", addr(src), said.reason);
        checked += 1;
    };
    for i in 0..40u8 {
        let src = [192, 0, 2, 100 + i];
        for (vip, vip_addr) in [("ip", [203, 0, 113, 10]), ("flow", [203, 0, 113, 60])] {
            let port = 40_000 + u16::from(i);
            // Before the first packet: a new flow, placed by its ring slot.
            check(vip, vip_addr, src, port, L4::TcpSyn, Decision::Ring);
            // After it: the flow is in the connection table.
            check(vip, vip_addr, src, port, L4::TcpAck, Decision::Conntrack);
        }
    }
    // A removed backend: its flows are placed again, and explain says where.
    runtime
        .block_on(client.remove_backend(&BackendRequest {
            vip: "ip".into(),
            address: format!("{}:8080", addr(B2)),
            weight: None,
        }))
        .unwrap();
    for i in 0..40u8 {
        let src = [192, 0, 2, 100 + i];
        let port = 40_000 + u16::from(i);
        let said = explain("ip", &format!("{}:{port}", addr(src)));
        let frame = Frame::tcp(src, port, [203, 0, 113, 10], 80).with(|f| f.l4 = L4::TcpAck).bytes();
        let out = run_xdp(prog, &frame, g0);
        assert_eq!(out.action, XDP_TX);
        assert_eq!(said.backend.map(|b| b.to_string()), Some(sent_to(&out.output)), "after removal: {}", said.reason);
        checked += 1;
    }
    stop.send(()).unwrap();
    runtime.block_on(daemon).unwrap().unwrap();
    println!("explain agreed with the program on {checked} flows");
}
