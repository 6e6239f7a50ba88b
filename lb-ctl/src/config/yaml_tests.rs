//! lb.yaml: the same configurations as lb.toml, and mistakes named by their YAML line.
use std::path::Path;

use yaml_rust2::YamlEmitter;
use yaml_rust2::yaml::{Hash, Yaml};

use super::*;

fn parse_yaml(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("lb.yaml"))
}

fn errors(text: &str) -> Vec<String> {
    match parse_yaml(text) {
        Ok(c) => panic!("expected errors, got {c:#?}"),
        Err(e) => e.problems(),
    }
}

/// A TOML value as YAML, built independently of the translation under test.
fn to_yaml(value: &toml::Value) -> Yaml {
    match value {
        toml::Value::String(s) => Yaml::String(s.clone()),
        toml::Value::Integer(i) => Yaml::Integer(*i),
        toml::Value::Float(f) => Yaml::Real(f.to_string()),
        toml::Value::Boolean(b) => Yaml::Boolean(*b),
        toml::Value::Datetime(d) => Yaml::String(d.to_string()),
        toml::Value::Array(items) => Yaml::Array(items.iter().map(to_yaml).collect()),
        toml::Value::Table(table) => {
            let mut hash = Hash::new();
            for (k, v) in table {
                hash.insert(Yaml::String(k.clone()), to_yaml(v));
            }
            Yaml::Hash(hash)
        }
    }
}

#[test]
fn the_example_file_in_yaml_is_the_same_configuration() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("lb.toml.example");
    let text = std::fs::read_to_string(&path).unwrap();
    let from_toml = Config::parse(&text, Path::new("lb.yaml.toml")).unwrap_or_else(|e| panic!("{e}"));
    let mut yaml = String::new();
    YamlEmitter::new(&mut yaml).dump(&to_yaml(&toml::Value::Table(text.parse::<toml::Table>().unwrap()))).unwrap();
    let from_yaml = Config::parse(&yaml, Path::new("lb.yaml")).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let lines_apart = |c: &Config| -> Vec<VipSpec> { c.vips.iter().map(|v| v.spec.clone()).collect() };
    assert_eq!(lines_apart(&from_yaml), lines_apart(&from_toml));
    let backends = |c: &Config| -> Vec<Vec<BackendConfig>> { c.vips.iter().map(|v| v.backends.clone()).collect() };
    assert_eq!(backends(&from_yaml), backends(&from_toml));
    assert_eq!(from_yaml.daemon, from_toml.daemon);
}

#[test]
fn a_small_file_reads_as_its_toml_twin() {
    let yaml = "\
# the web service
daemon:
  flow_table_size: 65536
vip:
  - name: web
    address: 203.0.113.10
    port: 80
    health: { kind: http, path: /health, interval: 500ms }
    backends:
      - address: 198.51.100.1
        weight: 200
      - { address: 198.51.100.2, port: 8080 }
  - name: app
    address: 203.0.113.11
    port: 8443
    protocol: http
    proxy:
      timeouts:
        connect: 1s
      close_after_response: true
    backends:
      - address: \"198.51.100.3\"
";
    let toml = r#"
[daemon]
flow_table_size = 65536
[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
health = { kind = "http", path = "/health", interval = "500ms" }
backends = [ { address = "198.51.100.1", weight = 200 }, { address = "198.51.100.2", port = 8080 } ]
[[vip]]
name = "app"
address = "203.0.113.11"
port = 8443
protocol = "http"
proxy = { timeouts = { connect = "1s" }, close_after_response = true }
backends = [ { address = "198.51.100.3" } ]
"#;
    let from_yaml = parse_yaml(yaml).unwrap_or_else(|e| panic!("{e}"));
    let from_toml = Config::parse(toml, Path::new("lb.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        from_yaml.vips.iter().map(|v| &v.spec).collect::<Vec<_>>(),
        from_toml.vips.iter().map(|v| &v.spec).collect::<Vec<_>>()
    );
    assert_eq!(from_yaml.vips[0].backends, from_toml.vips[0].backends);
    assert_eq!(from_yaml.daemon, from_toml.daemon);
    assert_eq!(from_yaml.vips.iter().map(|v| v.line).collect::<Vec<_>>(), [6, 14], "a VIP's line is its address's");
}

#[test]
fn mistakes_name_the_yaml_line() {
    let vip = "vip:\n  - name: web\n    address: 203.0.113.10\n    port: 80\n";
    let e = errors(&format!("{vip}    colour: blue\n"));
    assert!(e[0].starts_with("lb.yaml:5: unknown field `colour`, expected one of `name`, "), "{e:?}");
    let e = errors(&format!(
        "{vip}    backends:\n      - address: 198.51.100.1\n      - address: 198.51.100.2\n        weight: 70000\n"
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(e[0].starts_with("lb.yaml:8: ") && e[0].contains("weight"), "the backend's line: {e:?}");
    let e = errors(&format!("{vip}    protocol: http\n    proxy:\n      timeouts:\n        conect: 1s\n"));
    assert!(e[0].starts_with("lb.yaml:8: ") && e[0].contains("conect"), "{e:?}");
    assert_eq!(
        errors("daemon:\n  api_socket: run/lb.sock\n"),
        ["lb.yaml:2: daemon: api_socket must be an absolute path, got \"run/lb.sock\""]
    );
}

#[test]
fn yaml_mistakes_are_named_too() {
    assert_eq!(errors("daemon:\n  metrics:\n"), ["lb.yaml:2: a value is missing here (null)"]);
    assert_eq!(
        errors(
            "defaults:\n  health: &h { kind: tcp }\nvip:\n  - address: 203.0.113.10\n    port: 80\n    health: *h\n"
        ),
        ["lb.yaml:6: aliases (*name) are not supported: write the value, or use defaults:"]
    );
    let e = errors("vip:\n  - address: 203.0.113.10\n    port: [80\n");
    assert!(e[0].starts_with("lb.yaml:"), "{e:?}");
    assert_eq!(errors("- 1\n- 2\n"), ["lb.yaml:1: the document must be a mapping (daemon:, defaults:, vip:)"]);
    // Quoted scalars are strings; plain ones are typed.
    let e = errors("vip:\n  - address: 203.0.113.10\n    port: \"80\"\n");
    assert!(e[0].starts_with("lb.yaml:3: ") && e[0].contains("a whole number"), "{e:?}");
}

#[test]
fn warnings_name_the_yaml_line() {
    let c = parse_yaml("\n\nvip:\n  - name: empty\n    address: 203.0.113.10\n    port: 80\n").unwrap();
    assert_eq!(c.warnings.len(), 1);
    assert_eq!(c.warnings[0].line, Some(5), "{}", c.warnings[0]);
}

#[test]
fn an_empty_file_is_the_defaults() {
    let c = parse_yaml("# nothing yet\n").unwrap();
    assert!(c.vips.is_empty());
    assert_eq!(c.daemon, DaemonSettings::default());
}

#[test]
fn every_unknown_key_names_its_yaml_line() {
    let e = errors(
        "daemon:\n  ring_sise: 7\nvip:\n  - name: web\n    address: 203.0.113.10\n    port: 80\n    colour: blue\n\
         \x20   protocol: http\n    proxy:\n      timeouts:\n        conect: 1s\n        idle: 2s\n      limits:\n\
         \x20       max_conns: 5\n    backends:\n      - address: 198.51.100.1\n        wieght: 3\n\
         \x20 - address: 203.0.113.11\n    port: 0\n",
    );
    let unknown = super::tests::unknown_keys(&e);
    assert_eq!(
        unknown,
        [
            ("lb.yaml:2", "ring_sise"),
            ("lb.yaml:7", "colour"),
            ("lb.yaml:11", "conect"),
            ("lb.yaml:14", "max_conns"),
            ("lb.yaml:17", "wieght"),
        ],
        "{e:#?}"
    );
    assert!(e.contains(&"lb.yaml:19: vip \"203.0.113.11:0/tcp\": port must be 1-65535, got 0".into()), "{e:#?}");
    assert_eq!(e.len(), 6, "{e:#?}");
}
