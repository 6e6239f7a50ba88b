//! The fleet's store against a real etcd: push, diff, the revision guard, and values refused.
use std::path::{Path, PathBuf};

use super::state::{self, Snapshot, VIPS};
use super::store::{Store, StoreError};
use crate::config::fleet::FleetSettings;
use crate::testing::etcd::Etcd;

pub(crate) fn settings(etcd: &Etcd, prefix: &str, node: &str) -> FleetSettings {
    FleetSettings {
        endpoints: vec![etcd.endpoint.clone()],
        prefix: prefix.into(),
        node: node.into(),
        encap_source: Vec::new(),
        ca_file: None,
        cert_file: None,
        key_file: None,
    }
}

pub(crate) const FLEET_FILE: &str = r#"
[daemon]
ring_size = 251

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
backends = [ { address = "198.51.100.1", port = 8080 }, { address = "198.51.100.2", port = 8080, weight = 50 } ]

[[vip]]
address = "203.0.113.11"
port = 53
protocol = "udp"
backends = [ { address = "198.51.100.3" } ]
"#;

pub(crate) fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[tokio::test]
async fn a_push_writes_one_key_per_vip_and_a_second_push_of_the_same_file_changes_nothing() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "lb.toml", FLEET_FILE);
    let mut store = Store::connect(&settings(&etcd, "/lb/t1", "n0")).await.unwrap();
    let empty = store.read().await.unwrap();
    assert!(empty.values.is_empty() && empty.generation == 0);
    let values = state::values_of_file(&file).unwrap();
    let lines = state::diff(&empty.values, &values);
    assert_eq!(lines, ["+ vip 203.0.113.10:80/tcp: 2 backends", "+ vip 203.0.113.11:53/udp: 1 backend"]);
    let revision = store.write(&empty, &values, "push").await.unwrap();
    let read = store.read().await.unwrap();
    assert_eq!(read.generation, revision, "the generation key was written in the same transaction");
    assert_eq!(read.vip_labels(), ["203.0.113.10:80/tcp", "203.0.113.11:53/udp"]);
    assert!(read.values[&format!("{VIPS}203.0.113.10:80/tcp")].contains("198.51.100.2"));
    assert!(state::diff(&read.values, &state::values_of_file(&file).unwrap()).is_empty());
    // The node's view: the values compose with a node file into the same VIPs as the file.
    let node = write(dir.path(), "node.toml", "[daemon]\nring_size = 251\n");
    let (config, drained) = read.compose(&node).unwrap();
    let pushed = crate::config::Config::load(&file).unwrap();
    assert_eq!(
        config.vips.iter().map(|v| (&v.spec, &v.backends)).collect::<Vec<_>>(),
        pushed.vips.iter().map(|v| (&v.spec, &v.backends)).collect::<Vec<_>>()
    );
    assert!(drained.is_empty());
}

#[tokio::test]
async fn a_write_from_a_stale_read_is_refused_and_changes_nothing() {
    let etcd = Etcd::start();
    let dir = tempfile::tempdir().unwrap();
    let file = write(dir.path(), "lb.toml", FLEET_FILE);
    let mut a = Store::connect(&settings(&etcd, "/lb/t2", "a")).await.unwrap();
    let mut b = a.clone();
    let seen_by_a = a.read().await.unwrap();
    let seen_by_b = b.read().await.unwrap();
    let values = state::values_of_file(&file).unwrap();
    let first = a.write(&seen_by_a, &values, "push by a").await.unwrap();
    let mut other = values.clone();
    other.remove(&format!("{VIPS}203.0.113.11:53/udp"));
    match b.write(&seen_by_b, &other, "push by b").await {
        Err(StoreError::Conflict(at)) => assert_eq!(at, first),
        r => panic!("a write from a stale read must be refused, got {r:?}"),
    }
    let now = a.read().await.unwrap();
    assert_eq!(now.values, values, "a's state stands");
    assert_eq!(now.generation, first);
    // Read again, b's write goes through; the diff says what it removes.
    assert_eq!(state::diff(&now.values, &other), ["- vip 203.0.113.11:53/udp"]);
    b.write(&now, &other, "push by b").await.unwrap();
}

#[tokio::test]
async fn malformed_oversized_and_mislabelled_values_are_refused_by_key() {
    let dir = tempfile::tempdir().unwrap();
    let node = write(dir.path(), "node.toml", "[daemon]\nring_size = 251\n");
    let good = state::values_of_file(&write(dir.path(), "lb.toml", FLEET_FILE)).unwrap();
    let snapshot = |edit: &dyn Fn(&mut std::collections::BTreeMap<String, String>)| {
        let mut values = good.clone();
        edit(&mut values);
        Snapshot { revision: 9, generation: 9, values }
    };
    let web = format!("{VIPS}203.0.113.10:80/tcp");
    let cases: Vec<(Snapshot, &str)> = vec![
        (
            snapshot(&|v| {
                v.insert(web.clone(), "address = ".into());
            }),
            "etcd key state/vips/203.0.113.10:80/tcp: not a TOML table",
        ),
        (
            snapshot(&|v| {
                v.insert(web.clone(), format!("# {}\n", "x".repeat(state::MAX_VALUE_BYTES)));
            }),
            "more than the 65536 allowed",
        ),
        (
            snapshot(&|v| {
                let dns = v.remove(&format!("{VIPS}203.0.113.11:53/udp")).unwrap();
                v.insert(format!("{VIPS}203.0.113.99:53/udp"), dns);
            }),
            "holds VIP 203.0.113.11:53/udp",
        ),
        (
            snapshot(&|v| {
                v.insert(web.clone(), with(&v[&web], "drained", toml::Value::Array(vec!["198.51.100.9:8080".into()])));
            }),
            "drains 198.51.100.9:8080, not one of its backends",
        ),
        (
            snapshot(&|v| {
                v.insert(web.clone(), with(&v[&web], "port", toml::Value::Integer(0)));
            }),
            "fleet state at revision 9",
        ),
    ];
    for (s, expected) in cases {
        let problems = s.compose(&node).expect_err(expected);
        assert!(problems.iter().any(|p| p.contains(expected)), "{expected:?} not in {problems:?}");
    }
    // A drain of one of its backends is taken.
    let drained = snapshot(&|v| {
        v.insert(web.clone(), with(&v[&web], "drained", toml::Value::Array(vec!["198.51.100.2:8080".into()])));
    });
    let (_, drains) = drained.compose(&node).unwrap();
    assert_eq!(drains, [("203.0.113.10:80/tcp".to_string(), "198.51.100.2:8080".parse().unwrap())]);
}

/// A VIP value with `key` set to `value`.
fn with(vip: &str, key: &str, value: toml::Value) -> String {
    state::edit_vip(vip, |t| {
        t.insert(key.into(), value);
        Ok(())
    })
    .unwrap()
}

#[test]
fn a_diff_names_each_backend_change() {
    let before = state::values_of_file(&write(tempfile::tempdir().unwrap().path(), "a.toml", FLEET_FILE)).unwrap();
    let mut after = before.clone();
    let web = format!("{VIPS}203.0.113.10:80/tcp");
    after.insert(
        web.clone(),
        state::edit_vip(&before[&web], |t| {
            let list = t.get_mut("backends").unwrap().as_array_mut().unwrap();
            list.remove(0);
            list.push(toml::Value::Table(toml::toml! { address = "198.51.100.7" port = 8080 }));
            t.insert("drained".into(), toml::Value::Array(vec!["198.51.100.2:8080".into()]));
            Ok(())
        })
        .unwrap(),
    );
    assert_eq!(
        state::diff(&before, &after),
        [
            "~ vip 203.0.113.10:80/tcp: backend 198.51.100.2:8080 drained, backend 198.51.100.7:8080 added, backend 198.51.100.1:8080 removed"
        ]
    );
}

#[tokio::test]
async fn a_dead_member_among_the_endpoints_fails_no_request() {
    let etcd = Etcd::start();
    let dead = format!("http://127.0.0.1:{}", crate::testing::ports::free_port());
    let mut settings = settings(&etcd, "/lb/t-dead", "n0");
    // First in the list, as a member that crashed would be for some nodes.
    settings.endpoints.insert(0, dead);
    for _ in 0..20 {
        let mut store = Store::connect(&settings).await.expect("a live member serves");
        for _ in 0..5 {
            store.read().await.expect("every request goes to a live member");
        }
    }
}
