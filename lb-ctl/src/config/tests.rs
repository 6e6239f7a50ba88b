use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::*;

pub(super) fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("lb.toml"))
}

pub(super) fn errors(text: &str) -> Vec<String> {
    match parse(text) {
        Ok(c) => panic!("expected errors, got {c:#?}"),
        Err(e) => e.problems(),
    }
}

/// The unknown keys among a file's mistakes, each with the place it names ("lb.toml:7").
pub(super) fn unknown_keys(errors: &[String]) -> Vec<(&str, &str)> {
    errors
        .iter()
        .filter(|m| m.contains("unknown field"))
        .map(|m| (m.split(": ").next().unwrap(), m.split('`').nth(1).unwrap()))
        .collect()
}

#[test]
fn example_file_is_valid() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lb.toml.example");
    let c = Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips.len(), 4);
    assert_eq!(c.daemon.nexthop_ttl_ms, 1000);
    let web = &c.vips[0];
    assert_eq!(web.name.as_deref(), Some("web"));
    assert_eq!(web.backends.len(), 3);
    assert_eq!(web.backends[1].weight, DEFAULT_WEIGHT);
    // Backend health overrides the VIP's key by key.
    let h = web.backends[2].health.as_ref().unwrap();
    assert_eq!(h.check, CheckKind::Http { path: "/ready".into(), status: 200 });
    assert_eq!(h.fall, 3);
    // The IPv6 half of the dual-stack "web" service.
    let web6 = &c.vips[1];
    assert_eq!((web6.name.as_deref(), web6.forwarding), (Some("web6"), Forwarding::Nat));
    assert_eq!(web6.backends[0].address, "[2001:db8::11]:8080".parse::<SocketAddr>().unwrap());
    // Backend port defaults to the VIP's.
    assert_eq!(c.vips[2].backends[0].address, "198.51.100.21:53".parse::<SocketAddr>().unwrap());
    assert!(c.vips[2].backends[0].health.is_none());
    assert_eq!(c.vips[3].forwarding, Forwarding::Proxy);
    assert!(c.vips[3].proxy.is_some());
}

#[test]
fn defaults() {
    let c = parse("[[vip]]\naddress = \"203.0.113.10\"\nport = 80\n").unwrap();
    assert_eq!(c.daemon, DaemonSettings::default());
    let v = &c.vips[0];
    assert_eq!((v.protocol, v.forwarding, v.hash), (Protocol::Tcp, Forwarding::Nat, HashMode::Ip));
    assert_eq!(v.all_down, AllDownPolicy::Forward);
    assert_eq!(v.label(), "203.0.113.10:80/tcp");
    assert_eq!(v.line, 2);
    assert_eq!(c.api_socket("eth0"), Path::new("/run/lb-ctl/eth0.sock"));
}

#[test]
fn health_defaults_and_overrides() {
    let c = parse(
        r#"
[[vip]]
address = "203.0.113.10"
port = 80
health = { kind = "tcp", interval = "500ms" }
backends = [ { address = "198.51.100.1" }, { address = "198.51.100.2", health = { kind = "none" } } ]
"#,
    )
    .unwrap();
    let h = c.vips[0].backends[0].health.clone().unwrap();
    assert_eq!(
        h,
        HealthSpec {
            check: CheckKind::Tcp,
            interval: Duration::from_millis(500),
            timeout: Duration::from_millis(500),
            address: None,
            rise: 2,
            fall: 3
        }
    );
    assert!(c.vips[0].backends[1].health.is_none());
}

const VIP: &str = "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\n";

/// A table of bad files and the exact messages they must produce.
#[test]
fn bad_files_give_exact_messages() {
    let cases: &[(&str, String, &[&str])] = &[
        ("syntax error", "[[vip]\n".into(), &["lb.toml:1: unclosed array table, expected `]`"]),
        (
            "unknown key in a backend",
            format!("{VIP}backends = [ {{ address = \"198.51.100.1\", wieght = 3 }} ]\n"),
            &["lb.toml:5: unknown field `wieght`, expected one of `address`, `port`, `weight`, `health`, `quic_server_id`"],
        ),
        (
            "unknown top-level key",
            "listen = 1\n".into(),
            &["lb.toml:1: unknown field `listen`, expected one of `daemon`, `defaults`, `cluster`, `fleet`, `vip`"],
        ),
        (
            "unknown enum value",
            format!("{VIP}protocol = \"sctp\"\n"),
            &["lb.toml:5: protocol = \"sctp\" is not one of \"tcp\", \"udp\", \"http\""],
        ),
        ("missing port", "[[vip]]\naddress = \"203.0.113.10\"\n".into(), &["lb.toml:1: missing key `port`: this table needs it"]),
        (
            "backend port out of range",
            format!("{VIP}backends = [ {{ address = \"198.51.100.1\", port = 70000 }} ]\n"),
            &["lb.toml:5: vip \"web\": backend port must be 1-65535, got 70000"],
        ),
        (
            "weight out of range",
            format!(
                "{VIP}backends = [\n  {{ address = \"198.51.100.1\", weight = 70000 }},\n  {{ address = \"198.51.100.2\", weight = -1 }},\n]\n"
            ),
            &[
                "lb.toml:6: vip \"web\": backend weight 70000 is out of range (0-65535)",
                "lb.toml:7: vip \"web\": backend weight -1 is out of range (0-65535)",
            ],
        ),
        (
            "malformed addresses",
            "[[vip]]\naddress = \"203.0.113.300\"\nport = 80\nbackends = [ { address = \"backend_1\" } ]\n".into(),
            &[
                "lb.toml:2: vip \"203.0.113.300:80/tcp\": address \"203.0.113.300\" is not an IP address",
                "lb.toml:4: vip \"203.0.113.300:80/tcp\": backend address \"backend_1\" is neither an IP address nor a host name",
            ],
        ),
        (
            "duplicate backend",
            format!(
                "{VIP}backends = [\n  {{ address = \"198.51.100.1\", port = 8080 }},\n  {{ address = \"198.51.100.1\", port = 8080 }},\n]\n"
            ),
            &["lb.toml:7: vip \"web\": duplicate backend 198.51.100.1:8080"],
        ),
        (
            "duplicate VIP and name",
            format!("{VIP}\n{VIP}"),
            &["lb.toml:7: duplicate vip name \"web\"", "lb.toml:8: vip \"web\": duplicate VIP 203.0.113.10:80/tcp"],
        ),
        (
            "http and tcp VIPs on the same address and port",
            format!("{VIP}\n[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nprotocol = \"http\"\n"),
            &["lb.toml:7: vip \"203.0.113.10:80/http\": duplicate VIP 203.0.113.10:80/tcp"],
        ),
        (
            "ring size not prime",
            "[daemon]\nring_size = 65536\n".into(),
            &["lb.toml:2: daemon: ring_size must be a prime number (Maglev), got 65536; e.g. 65537"],
        ),
        (
            "ring size too large",
            "[daemon]\nring_size = 2000003\n".into(),
            &["lb.toml:2: daemon: ring_size must be 2-1048576, got 2000003"],
        ),
        (
            "more backends than ring slots",
            format!(
                "[daemon]\nring_size = 2\n{VIP}backends = [ {{ address = \"198.51.100.1\" }}, {{ address = \"198.51.100.2\" }}, {{ address = \"198.51.100.3\" }} ]\n"
            ),
            &["lb.toml:5: vip \"web\": 3 backends do not fit a ring of 2 slots (raise daemon.ring_size)"],
        ),
        (
            "dsr without encap_source",
            format!("{VIP}forwarding = \"dsr-ipip\"\n"),
            &["lb.toml:5: vip \"web\": forwarding \"dsr-ipip\" needs encap_source (the outer source address)"],
        ),
        (
            "encap_source without dsr",
            format!("{VIP}encap_source = \"198.51.100.1\"\n"),
            &["lb.toml:5: vip \"web\": encap_source only applies to forwarding = \"dsr-ipip\" or \"dsr-gue\""],
        ),
        (
            "IPv4 backend of an IPv6 NAT VIP",
            "[[vip]]\nname = \"web6\"\naddress = \"2001:db8::10\"\nport = 80\nbackends = [\n  { address = \"2001:db8::11\", port = 8080 },\n  { address = \"198.51.100.1\", port = 8080 },\n]\n".into(),
            &[
                "lb.toml:7: vip \"web6\": backend 198.51.100.1:8080: an IPv4 backend cannot serve the IPv6 VIP [2001:db8::10]:80 with forwarding \"nat\" (NAT does not translate between families)",
            ],
        ),
        (
            "IPv6 backend of an IPv4 NAT VIP",
            format!("{VIP}backends = [ {{ address = \"2001:db8::2\" }} ]\n"),
            &[
                "lb.toml:5: vip \"web\": backend [2001:db8::2]:80: an IPv6 backend cannot serve the IPv4 VIP 203.0.113.10:80 with forwarding \"nat\" (NAT does not translate between families)",
            ],
        ),
        (
            "dsr-gue backends of another family than encap_source",
            "[[vip]]\nname = \"gue\"\naddress = \"2001:db8::10\"\nport = 443\nforwarding = \"dsr-gue\"\nencap_source = \"2001:db8:1::fe\"\nbackends = [ { address = \"198.51.100.1\" } ]\n".into(),
            &[
                "lb.toml:7: vip \"gue\": backend 198.51.100.1:443: an IPv4 backend cannot be reached with forwarding \"dsr-gue\" from the IPv6 encap_source 2001:db8:1::fe (the outer header goes from encap_source to the backend, so every backend must be of encap_source's family; the VIP's own family may differ)",
            ],
        ),
        (
            "link-local and IPv4-mapped backends of an IPv6 VIP",
            "[[vip]]\nname = \"web6\"\naddress = \"2001:db8::10\"\nport = 80\nbackends = [\n  { address = \"fe80::1\" },\n  { address = \"::ffff:198.51.100.1\" },\n]\n".into(),
            &[
                "lb.toml:6: vip \"web6\": backend [fe80::1]:80: a link-local address (fe80::/10) needs an interface scope, which the XDP data plane's route (FIB) lookup does not have: use a global or unique-local address",
                "lb.toml:7: vip \"web6\": backend [::ffff:198.51.100.1]:80: an IPv4-mapped IPv6 address (::ffff:0:0/96) is an IPv4 host: write its IPv4 address",
            ],
        ),
        (
            "IPv4-mapped VIP and encap_source",
            "[[vip]]\nname = \"m\"\naddress = \"::ffff:203.0.113.10\"\nport = 80\nforwarding = \"dsr-ipip\"\nencap_source = \"::ffff:198.51.100.254\"\n".into(),
            &[
                "lb.toml:3: vip \"m\": address ::ffff:203.0.113.10 is IPv4-mapped (::ffff:0:0/96): write the IPv4 address",
                "lb.toml:6: vip \"m\": encap_source ::ffff:198.51.100.254 is IPv4-mapped (::ffff:0:0/96): write the IPv4 address",
            ],
        ),
    ];
    assert_messages(cases);
}

/// Bad proxy, health and daemon settings, and the exact messages they must produce.
#[test]
fn bad_settings_give_exact_messages() {
    let cases: &[(&str, String, &[&str])] = &[
        (
            "http with nat",
            format!("{VIP}protocol = \"http\"\nforwarding = \"nat\"\n"),
            &[
                "lb.toml:6: vip \"web\": protocol \"http\" is served by the userspace proxy: forwarding must be \"proxy\"",
            ],
        ),
        (
            "udp proxy",
            format!("{VIP}protocol = \"udp\"\nforwarding = \"proxy\"\n"),
            &["lb.toml:6: vip \"web\": forwarding \"proxy\" supports protocol \"tcp\" and \"http\", not \"udp\""],
        ),
        (
            "proxy table on an XDP VIP",
            format!("{VIP}[vip.proxy]\nbalance = \"round_robin\"\n"),
            &["lb.toml:5: vip \"web\": [vip.proxy] only applies to forwarding = \"proxy\" VIPs"],
        ),
        (
            "a zero timeout, which would end every wait at once",
            format!("{VIP}forwarding = \"proxy\"\n[vip.proxy]\ntimeouts = {{ tunnel = \"0s\", queue = \"0s\" }}\n"),
            &["lb.toml:7: a timeout of 0 would end every wait at once: give a time above 0"],
        ),
        (
            "a zero client cap or body limit, which would refuse everyone or read as none",
            format!("{VIP}forwarding = \"proxy\"\n[vip.proxy]\nlimits = {{ requests_per_second_per_client = 0 }}\n"),
            &["lb.toml:7: a limit of 0 would refuse everything: leave the key out for no limit"],
        ),
        (
            "an HTTP/2 window the protocol does not allow",
            format!("{VIP}forwarding = \"proxy\"\n[vip.proxy]\nlimits = {{ h2_window_bytes = 1000 }}\n"),
            &[
                "lb.toml:7: vip \"web\": limits.h2_window_bytes = 1000 is outside what HTTP/2 allows: give 65535 to 2147483647 (default 1048576)",
            ],
        ),
        (
            "HTTP routes with mistakes, or on a TCP VIP",
            format!(
                "{VIP}forwarding = \"proxy\"\n[vip.proxy]\nroutes = [ {{ path_prefix = \"api\", backends = [\"198.51.100.1:80\"] }} ]\n"
            ),
            &[
                "lb.toml:6: vip \"web\": routes[0]: path_prefix \"api\" must start with /",
                "lb.toml:6: vip \"web\": routes apply to HTTP VIPs; TCP VIPs route TLS by server name (sni)",
            ],
        ),
        (
            "a redirect status that is not one, and a framing header set by hand",
            format!(
                "{VIP}protocol = \"http\"\n[vip.proxy]\nhttps_redirect = 200\nresponse_headers = {{ \"Content-Length\" = \"5\" }}\n"
            ),
            &["lb.toml:6: vip \"web\": https_redirect = 200: a redirect status is 301, 302, 303, 307 or 308"],
        ),
        (
            "a retry status that is not a server error",
            format!("{VIP}protocol = \"http\"\n[vip.proxy]\nretries = {{ on_status = [503, 404] }}\n"),
            &["lb.toml:6: vip \"web\": retries.on_status: 404 is not a 5xx status"],
        ),
        (
            "misspelt key inside a [vip.proxy] sub-table",
            format!("{VIP}forwarding = \"proxy\"\n[vip.proxy]\ntimeouts = {{ conect = \"1s\" }}\n"),
            &[
                "lb.toml:7: unknown field `conect`, expected one of `connect`, `client_header`, `backend_header`, `idle`, `request`, `queue`, `body`, `send`, `tunnel`, `tcp_keepalive`, `handshake`",
            ],
        ),
        (
            "bad health values",
            format!(
                "{VIP}health = {{ kind = \"http\", interval = \"1s\", timeout = \"2s\", rise = 0, status = 42 }}\nbackends = [ {{ address = \"198.51.100.1\" }} ]\n"
            ),
            &[
                "lb.toml:5: vip \"web\": health timeout (2s) must not exceed interval (1s)",
                "lb.toml:5: vip \"web\": health rise must be 1-100, got 0",
                "lb.toml:5: vip \"web\": health status must be 100-599, got 42",
            ],
        ),
        (
            "bad duration",
            format!("{VIP}health = {{ interval = \"soon\" }}\n"),
            &[
                "lb.toml:5: vip \"web\": health interval \"soon\": expected number at 0 (write e.g. \"2s\" or \"500ms\")",
            ],
        ),
        (
            "path on a tcp check",
            format!("{VIP}health = {{ kind = \"tcp\", path = \"/x\" }}\n"),
            &["lb.toml:5: vip \"web\": health path and status only apply to kind = \"http\""],
        ),
        (
            "bad name",
            "[[vip]]\nname = \"203.0.113.10\"\naddress = \"203.0.113.10\"\nport = 80\n".into(),
            &[
                "lb.toml:2: vip \"203.0.113.10\": name must start with a letter and use only letters, digits, '-', '_' and '.'",
            ],
        ),
        (
            "public TCP admin port",
            "[daemon]\napi_tcp = \"0.0.0.0:9180\"\n".into(),
            &[
                "lb.toml:2: daemon: api_tcp 0.0.0.0:9180 is not a loopback address; the API has no authentication, set api_tcp_allow_remote = true to expose it anyway",
            ],
        ),
        (
            "next-hop cache too long",
            "[daemon]\nnexthop_ttl = \"2h\"\n".into(),
            &["lb.toml:2: daemon: nexthop_ttl must be at most 1h"],
        ),
        (
            "relative socket path",
            "[daemon]\napi_socket = \"lb.sock\"\n".into(),
            &["lb.toml:2: daemon: api_socket must be an absolute path, got \"lb.sock\""],
        ),
    ];
    assert_messages(cases);
}

/// Checks each bad file gives exactly its messages, reporting every mismatch at once.
fn assert_messages(cases: &[(&str, String, &[&str])]) {
    let mut failures = Vec::new();
    for (what, text, want) in cases {
        let got = errors(text);
        if got != *want {
            failures.push(format!("{what}:\n  want {want:?}\n  got  {got:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn ipv6_nat_vip_with_ipv6_backends_is_valid() {
    let c = parse(
        r#"
[[vip]]
name = "web6"
address = "2001:db8::10"
port = 80
backends = [ { address = "2001:db8::11", port = 8080 }, { address = "2001:db8::12", port = 8080, weight = 50 } ]
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let v = &c.vips[0];
    assert_eq!(v.address, "2001:db8::10".parse::<IpAddr>().unwrap());
    assert_eq!(v.forwarding, Forwarding::Nat);
    let got: Vec<String> = v.backends.iter().map(|b| b.address.to_string()).collect();
    assert_eq!(got, ["[2001:db8::11]:8080", "[2001:db8::12]:8080"]);
    assert_eq!(v.label(), "web6");
}

#[test]
fn encapsulation_follows_encap_source_not_the_vip() {
    // An IPv4 VIP over an IPv6 underlay, and an IPv6 VIP over an IPv4 one.
    let c = parse(
        r#"
[[vip]]
name = "v4-over-v6"
address = "203.0.113.10"
port = 80
forwarding = "dsr-ipip"
encap_source = "2001:db8::fe"
backends = [ { address = "2001:db8::11" }, { address = "2001:db8::12" } ]

[[vip]]
name = "v6-over-v4"
address = "2001:db8::10"
port = 80
forwarding = "dsr-gue"
encap_source = "198.51.100.254"
backends = [ { address = "198.51.100.1" } ]

[[vip]]
name = "six-in-six"
address = "2001:db8::20"
port = 80
forwarding = "dsr-ip6ip6"
encap_source = "2001:db8::fe"
backends = [ { address = "2001:db8::11" } ]
"#,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.vips[0].encap_source, Some("2001:db8::fe".parse().unwrap()));
    assert_eq!(c.vips[0].backends[1].address, "[2001:db8::12]:80".parse::<SocketAddr>().unwrap());
    assert_eq!(c.vips[1].backends[0].address, "198.51.100.1:80".parse::<SocketAddr>().unwrap());
    // `dsr-ip6ip6` is `dsr-ipip` spelt another way.
    assert_eq!(c.vips[2].forwarding, Forwarding::DsrIpip);
}

#[test]
fn too_many_vips_and_backends() {
    let mut text = String::new();
    for i in 0..=lb_common::limits::MAX_VIPS {
        text.push_str(&format!("[[vip]]\naddress = \"203.0.113.{}\"\nport = {}\n", i % 250, 1000 + i));
    }
    let got = errors(&text);
    assert_eq!(got, vec![format!("lb.toml:{}: too many VIPs: 65 (at most 64)", 64 * 3 + 2)]);

    let backends: Vec<String> = (0..=lb_common::limits::MAX_BACKENDS)
        .map(|i| format!("{{ address = \"198.51.100.{}\", port = {} }}", i % 250, 1000 + i))
        .collect();
    let text = format!("{VIP}backends = [ {} ]\n", backends.join(", "));
    assert_eq!(errors(&text), vec!["lb.toml: too many backends: 4097 over all VIPs (at most 4096)".to_string()]);
}

#[test]
fn read_error_names_the_file() {
    let e = Config::load(Path::new("/nonexistent/lb.toml")).unwrap_err();
    assert!(e.to_string().starts_with("/nonexistent/lb.toml: "), "{e}");
}

#[test]
fn a_vip_without_backends_is_valid_with_a_warning() {
    let c = parse("[[vip]]\nname = \"empty\"\naddress = \"203.0.113.10\"\nport = 80\n").unwrap();
    let warnings: Vec<String> = c.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(
        warnings,
        [
            "lb.toml:3: warning: vip \"empty\" has no backends: its packets are dropped (or refused by the proxy) until one is added"
        ]
    );
    let example = Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("lb.toml.example")).unwrap();
    assert!(example.warnings.is_empty());
}

#[test]
fn impossible_backends_are_mistakes() {
    let vip = |backend: &str| {
        format!(
            "[[vip]]\nname = \"web\"\naddress = \"203.0.113.10\"\nport = 80\nbackends = [ {{ address = \"{backend}\", port = 8080 }} ]\n"
        )
    };
    assert_eq!(
        errors(&vip("0.0.0.0")),
        ["lb.toml:5: vip \"web\": backend 0.0.0.0:8080: the unspecified address reaches no host"]
    );
    assert_eq!(
        errors(&vip("255.255.255.255")),
        ["lb.toml:5: vip \"web\": backend 255.255.255.255:8080: a broadcast or multicast address is not one host"]
    );
    assert_eq!(
        errors(&vip("127.0.0.1")),
        [
            "lb.toml:5: vip \"web\": backend 127.0.0.1:8080: a loopback address is this host, which the XDP data plane cannot forward to (use forwarding = \"proxy\")"
        ]
    );
    assert_eq!(
        errors(&vip("203.0.113.10")),
        ["lb.toml:5: vip \"web\": backend 203.0.113.10:8080: the VIP itself: its traffic would loop"]
    );
}

#[test]
fn the_metrics_port_is_an_address() {
    let c = parse("[daemon]\nmetrics = \"127.0.0.1:9721\"\n").unwrap();
    assert_eq!(c.daemon.metrics, Some("127.0.0.1:9721".parse().unwrap()));
    assert_eq!(
        errors("[daemon]\nmetrics = \"9721\"\n"),
        ["lb.toml:2: daemon: metrics must be ADDR:PORT, got \"9721\""]
    );
}

#[test]
fn a_check_may_connect_elsewhere_than_the_backend() {
    let c = parse(&format!(
        "{VIP}health = {{ kind = \"tcp\" }}\nbackends = [ {{ address = \"198.51.100.1\", health = {{ address = \"127.0.0.1:9000\" }} }} ]\n"
    ))
    .unwrap();
    let h = c.vips[0].backends[0].health.as_ref().unwrap();
    assert_eq!((h.check.clone(), h.address), (CheckKind::Tcp, Some("127.0.0.1:9000".parse().unwrap())));
    assert_eq!(
        errors(&format!("{VIP}backends = [ {{ address = \"198.51.100.1\", health = {{ address = \"9000\" }} }} ]\n")),
        ["lb.toml:5: vip \"web\": health address must be ADDR:PORT, got \"9000\""]
    );
}

#[test]
fn the_new_flow_budget_is_a_daemon_setting() {
    assert_eq!(parse("[daemon]\nnew_flow_budget = 0\n").unwrap().daemon.new_flow_budget, 0);
    assert_eq!(
        errors("[daemon]\nnew_flow_budget = -1\n"),
        ["lb.toml:2: daemon: new_flow_budget must be 0-4294967295, got -1"]
    );
}

#[test]
fn the_shutdown_grace_is_a_duration() {
    assert_eq!(parse("").unwrap().daemon.shutdown_grace, Duration::from_secs(5));
    assert_eq!(parse("[daemon]\nshutdown_grace = \"30s\"\n").unwrap().daemon.shutdown_grace, Duration::from_secs(30));
    assert_eq!(
        errors("[daemon]\nshutdown_grace = \"1h\"\n"),
        ["lb.toml:2: daemon: shutdown_grace must be at most 10m"]
    );
}

#[test]
fn the_log_level_is_a_checked_filter() {
    assert_eq!(parse("").unwrap().daemon.log_level, "info");
    assert_eq!(parse("[daemon]\nlog_level = \"warn,lb_ctl=debug\"\n").unwrap().daemon.log_level, "warn,lb_ctl=debug");
    let e = errors("[daemon]\nlog_level = \"lb_ctl=loud\"\n");
    assert_eq!(e.len(), 1);
    assert!(e[0].starts_with("lb.toml:2: daemon: log_level: \"loud\" in \"lb_ctl=loud\" is not a log level"), "{e:?}");
}

#[test]
fn vips_inherit_defaults_key_by_key() {
    let c = parse(
        r#"
[defaults]
health = { kind = "http", path = "/health", interval = "500ms" }
proxy = { timeouts = { connect = "250ms", idle = "7s" }, retries = { max = 1 } }

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
health = { interval = "1s" }
backends = [ { address = "198.51.100.1" }, { address = "198.51.100.2", health = { kind = "none" } } ]

[[vip]]
name = "api"
address = "127.0.0.1"
port = 8000
protocol = "http"
backends = [ { address = "127.0.0.1", port = 8080 } ]
[vip.proxy]
timeouts = { connect = "1s" }
"#,
    )
    .unwrap();
    let web = &c.vips[0];
    let h = web.backends[0].health.clone().unwrap();
    assert_eq!(
        (h.check, h.interval),
        (CheckKind::Http { path: "/health".into(), status: 200 }, Duration::from_secs(1))
    );
    assert!(web.backends[1].health.is_none(), "a backend may still switch the check off");
    assert_eq!(web.health.as_ref().map(|h| h.interval), Some(Duration::from_secs(1)), "API-added backends too");
    let api = &c.vips[1];
    let proxy = api.proxy.as_ref().unwrap();
    assert_eq!(proxy.timeouts.connect, Duration::from_secs(1), "the VIP's own key wins");
    assert_eq!(proxy.timeouts.idle, Duration::from_secs(7), "keys it does not set come from [defaults.proxy]");
    assert_eq!(proxy.retries.max, 1);
    assert_eq!(api.backends[0].health.as_ref().map(|h| h.interval), Some(Duration::from_millis(500)));
    assert_eq!(
        errors("[defaults]\nhealth = { interval = \"0s\" }\n"),
        ["lb.toml:2: defaults: health interval must be more than zero"]
    );
    assert_eq!(errors("[defaults]\nproxy = { timeouts = { conect = \"1s\" } }\n").len(), 1);
    assert_eq!(errors("[defaults]\nlog = 1\n").len(), 1, "unknown keys are mistakes");
}

#[test]
fn proxy_workers_are_a_count() {
    assert_eq!(parse("").unwrap().daemon.proxy_workers, None);
    assert_eq!(parse("[daemon]\nproxy_workers = 4\n").unwrap().daemon.proxy_workers, Some(4));
    assert_eq!(errors("[daemon]\nproxy_workers = 0\n"), ["lb.toml:2: daemon: proxy_workers must be 1-256, got 0"]);
}

/// Certificate, key and CA paths in `[vip.proxy]` are taken under lb.toml's directory when
/// relative (the daemon's working directory is `/` under systemd), and the files are loaded
/// by the check: a missing one is a mistake at its line, named by its full path.
#[test]
fn proxy_tls_files_are_relative_to_the_config_file_and_checked() {
    let vip = "[[vip]]\nname = \"app\"\naddress = \"203.0.113.10\"\nport = 443\nprotocol = \"http\"\n\
               forwarding = \"proxy\"\nbackends = [ { address = \"198.51.100.1\", port = 80 } ]\n";
    let tls = "[vip.proxy.tls]\ncertificates = [ { chain = \"certs/app.pem\", key = \"/secure/app.key\" } ]\n";
    let got = errors_at(&format!("{vip}{tls}"), "/etc/lb-ctl/lb.toml");
    assert_eq!(got.len(), 1, "{got:?}");
    // At the line of the key that names the file.
    assert!(got[0].starts_with("/etc/lb-ctl/lb.toml:9: vip \"app\": "), "{got:?}");
    assert!(got[0].contains("/etc/lb-ctl/certs/app.pem"), "{got:?}");
    let backend_tls = "[vip.proxy.backend_tls]\nca_file = \"ca.pem\"\nserver_name = \"app.internal\"\n";
    let got = errors_at(&format!("{vip}{backend_tls}"), "/etc/lb-ctl/lb.toml");
    assert!(got.len() == 1 && got[0].contains("backend_tls.ca_file /etc/lb-ctl/ca.pem: cannot read"), "{got:?}");
}

/// A certificate and key that belong together, beside lb.toml and named relatively, pass.
#[test]
fn proxy_tls_files_that_load_pass_the_check() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["app.test".into()]).unwrap();
    std::fs::create_dir(dir.path().join("certs")).unwrap();
    std::fs::write(dir.path().join("certs/app.pem"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("certs/app.key"), cert.signing_key.serialize_pem()).unwrap();
    let text = "[[vip]]\nname = \"app\"\naddress = \"203.0.113.10\"\nport = 443\nprotocol = \"http\"\n\
                forwarding = \"proxy\"\nbackends = [ { address = \"198.51.100.1\", port = 80 } ]\n\
                [vip.proxy.tls]\ncertificates = [ { chain = \"certs/app.pem\", key = \"certs/app.key\" } ]\n";
    let c = Config::parse(text, &dir.path().join("lb.toml")).unwrap();
    let files = &c.vips[0].spec.proxy.as_ref().unwrap().tls.as_ref().unwrap().certificates[0];
    assert_eq!(files.chain, dir.path().join("certs/app.pem"));
}

fn errors_at(text: &str, path: &str) -> Vec<String> {
    match Config::parse(text, Path::new(path)) {
        Err(ConfigError::Invalid(problems)) => problems.iter().map(|p| p.to_string()).collect(),
        other => panic!("{other:?}"),
    }
}

/// `[vip.proxy.X]` headers with no `[vip.proxy]` line of their own (the implicit table) parse
/// (toml 0.8 refused them: "expected a borrowed string").
#[test]
fn proxy_sub_tables_parse_without_their_parent_header() {
    let base = "[[vip]]\nname = \"app\"\naddress = \"203.0.113.10\"\nport = 443\nprotocol = \"http\"\n\
                forwarding = \"proxy\"\nbackends = [ { address = \"198.51.100.1\", port = 80 } ]\n";
    let c = parse(&format!("{base}[vip.proxy.retries]\nmax = 3\n[vip.proxy.timeouts]\nconnect = \"2s\"\n")).unwrap();
    let proxy = c.vips[0].spec.proxy.as_ref().unwrap();
    assert_eq!((proxy.retries.max, proxy.timeouts.connect), (3, Duration::from_secs(2)));
    let text = format!("[defaults.proxy.retries]\nmax = 4\n\n{base}");
    assert_eq!(parse(&text).unwrap().vips[0].spec.proxy.as_ref().unwrap().retries.max, 4);
}

#[test]
fn every_unknown_key_is_reported_with_the_other_mistakes() {
    let text = format!(
        "[daemon]\nring_sise = 7\n{VIP}wieght = 1\nbackends = [ {{ address = \"198.51.100.1\", prot = 80 }} ]\n\
         forwarding = \"proxy\"\n[vip.proxy]\ntimeouts = {{ conect = \"1s\", idle = \"2s\", tunel = \"1h\" }}\n\
         limits = {{ max_conns = 5 }}\n[vip.proxy.retries]\nmaximum = 1\n[[vip]]\naddress = \"not-an-ip\"\nport = 0\n"
    );
    let e = errors(&text);
    let unknown = unknown_keys(&e);
    assert_eq!(
        unknown,
        [
            ("lb.toml:2", "ring_sise"),
            ("lb.toml:7", "wieght"),
            ("lb.toml:8", "prot"),
            ("lb.toml:11", "conect"),
            ("lb.toml:11", "tunel"),
            ("lb.toml:12", "max_conns"),
            ("lb.toml:14", "maximum"),
        ],
        "{e:#?}"
    );
    assert!(e[3].contains("expected one of `connect`, `client_header`"), "{e:#?}");
    // The file's other mistakes are still found.
    assert!(
        e.contains(&"lb.toml:16: vip \"not-an-ip:0/tcp\": address \"not-an-ip\" is not an IP address".into()),
        "{e:#?}"
    );
    assert!(e.contains(&"lb.toml:17: vip \"not-an-ip:0/tcp\": port must be 1-65535, got 0".into()), "{e:#?}");
    assert_eq!(e.len(), 9, "{e:#?}");
}

#[test]
fn an_unknown_table_is_one_mistake_and_a_type_mistake_still_shows_the_unknown_keys() {
    let e = errors(&format!("{VIP}[vip.prox]\nbalance = 1\ntimeouts = 2\n[vip.health]\nkin = \"tcp\"\n"));
    assert_eq!(e.len(), 2, "{e:#?}");
    assert!(e[0].starts_with("lb.toml:5: unknown field `prox`"), "{e:#?}");
    assert!(e[1].starts_with("lb.toml:9: unknown field `kin`"), "{e:#?}");
    let e = errors(&format!("[daemon]\nringsize = 1\n{VIP}weight = 2\nhash = 3\nzone = 1\n"));
    assert!(e[0].starts_with("lb.toml:2: unknown field `ringsize`"), "{e:#?}");
    assert!(e[1].starts_with("lb.toml:7: unknown field `weight`"), "{e:#?}");
    assert_eq!(e[2], "lb.toml:8: wanted string or table", "{e:#?}");
    assert!(e[3].starts_with("lb.toml:9: unknown field `zone`"), "{e:#?}");
    assert_eq!(e.len(), 4, "{e:#?}");
}

#[test]
fn log_level_may_be_set_in_defaults() {
    assert_eq!(parse("[defaults]\nlog_level = \"debug\"\n").unwrap().daemon.log_level, "debug");
    let both = "[daemon]\nlog_level = \"warn\"\n[defaults]\nlog_level = \"warn\"\n";
    assert_eq!(parse(both).unwrap().daemon.log_level, "warn", "the same in both is no mistake");
    assert_eq!(
        errors("[defaults]\nlog_level = \"debug\"\n[daemon]\nlog_level = \"warn\"\n"),
        ["lb.toml:4: log_level is set twice, to \"warn\" in [daemon] and to \"debug\" in [defaults]: keep one"]
    );
    assert_eq!(
        errors("[daemon]\nlog_level = \"warn\"\n[defaults]\nlog_level = \"debug\"\n"),
        ["lb.toml:4: log_level is set twice, to \"warn\" in [daemon] and to \"debug\" in [defaults]: keep one"]
    );
    let e = errors("[defaults]\nlog_level = \"lb_ctl=loud\"\n");
    assert!(e.len() == 1 && e[0].starts_with("lb.toml:2: defaults: log_level: \"loud\""), "{e:?}");
}

/// Where a probe is put: a table under a key, or a table in an array under a key.
#[derive(Clone)]
enum Step {
    Table(String),
    Array(String),
}

/// The keys the table at `path` accepts, read from the types themselves: a file with an
/// unknown key there is refused with serde's list of the keys the table knows. None when no
/// table of keys belongs there.
fn keys_at(path: &[Step]) -> Option<Vec<String>> {
    const PROBE: &str = "zz_probe";
    let mut value = toml::Value::Table(toml::Table::from_iter([(PROBE.to_string(), toml::Value::Integer(1))]));
    for step in path.iter().rev() {
        value = match step {
            Step::Table(key) => toml::Value::Table(toml::Table::from_iter([(key.clone(), value)])),
            Step::Array(key) => {
                toml::Value::Table(toml::Table::from_iter([(key.clone(), toml::Value::Array(vec![value]))]))
            }
        };
    }
    let text = toml::to_string(&value).unwrap();
    let e = toml::from_str::<super::raw::RawFile>(&text).err()?;
    let message = e.message();
    let expected = message.strip_prefix(&format!("unknown field `{PROBE}`, expected "))?;
    Some(expected.split('`').skip(1).step_by(2).map(str::to_string).collect())
}

/// Every key of every table at or under `path`.
fn keys_under(path: Vec<Step>, out: &mut std::collections::BTreeSet<String>) {
    let Some(keys) = keys_at(&path) else { return };
    for key in keys {
        out.insert(key.clone());
        for step in [Step::Table(key.clone()), Step::Array(key)] {
            let mut deeper = path.clone();
            deeper.push(step);
            if keys_at(&deeper).is_some() {
                keys_under(deeper, out);
                break;
            }
        }
    }
}

/// lb.toml.example documents every key the file accepts, at every depth ([vip.proxy]'s from
/// lb-proxy's types included): the keys come from the types, so a new field fails this test
/// until the example names it.
#[test]
fn the_example_documents_every_key() {
    let mut keys = std::collections::BTreeSet::new();
    keys_under(Vec::new(), &mut keys);
    // The walk reaches the deepest tables (a check of the walk itself).
    for deep in ["ring_size", "min_healthy", "rise", "weight", "h2_max_streams", "chain", "names", "ca_file", "max"] {
        assert!(keys.contains(deep), "{deep} not found: {keys:?}");
    }
    assert!(keys.len() > 80, "{} keys: {keys:?}", keys.len());
    let example = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("lb.toml.example")).unwrap();
    let is_key_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    let words: std::collections::HashSet<&str> = example.split(|c: char| !is_key_char(c)).collect();
    let missing: Vec<&String> = keys.iter().filter(|k| !words.contains(k.as_str())).collect();
    assert!(missing.is_empty(), "keys lb.toml.example does not document: {missing:?}");
}
