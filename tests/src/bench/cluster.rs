//! `cargo xtask bench cluster` (root, BIRD 2): the scale-out scenario (`cluster::scenario`)
//! repeated with BFD on and, as the comparison an operator without BFD gets, off (the BGP hold
//! time, 3 s here, finds a dead node), interleaved. Prints the router's failover after a node
//! crash and after `node drain`, and the connections broken; then a fleet's propagation
//! (`bench::fleet`); asserts nothing.
use std::time::Duration;

use anyhow::Result;

use crate::bench::stats::median;
use crate::cluster::scenario::{self, Options, Outcome};
use crate::lab::sibling_bin;

pub fn run(repetitions: usize) -> Result<()> {
    let backend = sibling_bin("lb-test-backend");
    println!(
        "bench cluster: {} nodes behind a BIRD router (ECMP), {} DSR backends, {} long-lived connections per phase",
        scenario::NODES,
        scenario::BACKENDS,
        scenario::CLIENTS
    );
    println!("router and nodes: BGP hold 3 s, keepalive 1 s; BFD (when on) 100 ms x 3");
    let rows_options = [
        ("BFD on, flows shared", Options { bfd: true, share: true, bad_peers: false }),
        ("BFD off (BGP hold time)", Options { bfd: false, share: true, bad_peers: false }),
        ("flows not shared", Options { bfd: true, share: false, bad_peers: false }),
    ];
    let mut rows: Vec<(&str, Options, Vec<Outcome>)> = rows_options.iter().map(|(n, o)| (*n, *o, Vec::new())).collect();
    for rep in 0..repetitions {
        for (i, (name, options, outcomes)) in rows.iter_mut().enumerate() {
            let (mut cluster, mut daemons) = scenario::start(&format!("bc{i}"), &backend.to_string_lossy(), *options);
            let out = scenario::run(&mut cluster, &mut daemons, *options, &mut |_| {});
            println!(
                "  run {} {name}: crash failover {} ms, drain failover {} ms, broken {} of {}",
                rep + 1,
                out.crash_failover.as_millis(),
                out.drain_failover.as_millis(),
                out.broken.len(),
                out.connections
            );
            outcomes.push(out);
        }
    }
    println!("\n{:<26} {:>22} {:>22} {:>10}", "", "crash failover ms", "drain failover ms", "broken");
    for (name, _, outcomes) in &rows {
        let ms = |f: fn(&Outcome) -> Duration| -> String {
            let v: Vec<f64> = outcomes.iter().map(|o| f(o).as_secs_f64() * 1000.0).collect();
            let (lo, hi) = v.iter().fold((f64::MAX, 0.0f64), |(lo, hi), x| (lo.min(*x), hi.max(*x)));
            format!("{:.0} ({lo:.0}-{hi:.0})", median(v.iter().copied()))
        };
        let broken: usize = outcomes.iter().map(|o| o.broken.len()).sum();
        let total: usize = outcomes.iter().map(|o| o.connections).sum();
        println!(
            "{name:<26} {:>22} {:>22} {:>10}",
            ms(|o| o.crash_failover),
            ms(|o| o.drain_failover),
            format!("{broken}/{total}")
        );
    }
    println!(
        "(median, min-max over {repetitions} runs; each run ends by removing a backend on every node and killing a node: without flow sharing, the flows ECMP then moves whose ring slot moved break)"
    );
    absorb_rate()?;
    super::fleet::run()
}

/// How many flow-sharing messages a node absorbs a second: each message's signature checked
/// and its 20 flows written into a real connection table (the fixture's balancer, loaded, not
/// attached), in one thread, as the daemon's receiver and writer do; the UDP receive and the
/// hop between the two tasks are not in it.
fn absorb_rate() -> Result<()> {
    use lb_common::flow::SharedFlow;
    use lb_ctl::cluster::wire::{self, MAX_FLOWS, WireFlow};
    use lb_ctl::dataplane::Dataplane as _;

    const MESSAGES: usize = 20_000;
    let mut dp = crate::fixture::balancer();
    let vips = crate::fixture::vips();
    crate::fixture::configure(&mut dp, &vips);
    let key = b"lab-cluster-key-0123456789abcdef";
    let vip = &vips[12];
    let wire_flow = |i: usize| WireFlow {
        protocol: lb_common::ip_proto::TCP,
        client: std::net::SocketAddr::from(([192, 0, 2, (i / 60000 % 250) as u8 + 1], (1024 + i % 60000) as u16)),
        vip: std::net::SocketAddr::from((vip.addr, 80)),
        backend: std::net::SocketAddr::from((vip.backends[i % 2].1, 80)),
    };
    let messages: Vec<Vec<u8>> = (0..MESSAGES)
        .map(|m| {
            wire::encode(m as u64 + 1, &(0..MAX_FLOWS).map(|f| wire_flow(m * MAX_FLOWS + f)).collect::<Vec<_>>(), key)
        })
        .collect();
    let started = std::time::Instant::now();
    let mut recorded = 0;
    for message in &messages {
        let flows = wire::decode(message, key).expect("signed").flows;
        let shared: Vec<SharedFlow> = flows
            .iter()
            .map(|f| SharedFlow {
                key: crate::golden::flow_key(
                    match f.client.ip() {
                        std::net::IpAddr::V4(v4) => v4.octets(),
                        _ => unreachable!(),
                    },
                    vip.addr,
                    f.client.port(),
                    80,
                ),
                backend_id: if f.backend.ip() == std::net::IpAddr::from(vip.backends[0].1) {
                    vip.backends[0].0
                } else {
                    vip.backends[1].0
                },
                vip_id: 12,
            })
            .collect();
        recorded += dp.record_shared_flows(&shared)?;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "\nabsorbing shared flows (one thread; signature check and connection-table writes, no socket): {:.0} messages/s, {:.0} flows/s ({recorded} flows recorded of {})",
        MESSAGES as f64 / secs,
        (MESSAGES * MAX_FLOWS) as f64 / secs,
        MESSAGES * MAX_FLOWS
    );
    println!("(the receiver accepts at most [cluster] max_messages_per_second, default 2000: far below this)");
    Ok(())
}
