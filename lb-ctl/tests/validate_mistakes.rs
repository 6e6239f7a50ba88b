//! `lb-ctl validate` meets files with the mistakes a newcomer makes: every mistake is reported
//! in one run, each at its own FILE:LINE, in the words of the file (not the parser's).
use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

/// What a run of `lb-ctl` printed.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn lb_ctl(args: &[&str]) -> Run {
    let out = Command::new(BIN).args(args).output().unwrap();
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A directory holding configuration files.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new() -> Dir {
        Dir(tempfile::tempdir().unwrap())
    }

    fn file(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.path().join(name);
        std::fs::write(&path, content).unwrap();
        path
    }

    /// `lb-ctl validate` of `content` written as `name`.
    fn validate(&self, name: &str, content: impl AsRef<[u8]>) -> (PathBuf, Run) {
        let path = self.file(name, content);
        let run = lb_ctl(&["validate", "--config", path.to_str().unwrap()]);
        (path, run)
    }
}

/// Asserts the run failed and printed exactly one line per `(line, words)`, each naming
/// `path:line` and containing `words`.
fn mistakes_at(path: &Path, run: &Run, expected: &[(usize, &str)]) {
    assert_eq!(run.code, Some(1), "the file must be refused: {}{}", run.stdout, run.stderr);
    let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.contains(": warning: ")).collect();
    for (line, words) in expected {
        let at = format!("{}:{line}: ", path.display());
        assert!(
            lines.iter().any(|l| l.starts_with(&at) && l.contains(words)),
            "no mistake at {at} saying {words:?} in:\n{}",
            run.stderr
        );
    }
    assert_eq!(lines.len(), expected.len(), "one line per mistake, each once:\n{}", run.stderr);
}

/// Parser words that mean nothing to the person who wrote the file.
fn no_parser_words(run: &Run) {
    for words in ["expected i64", "expected u32", "expected usize", "invalid type", "unknown variant", "stream did not"]
    {
        assert!(!run.stderr.contains(words), "{words:?} in:\n{}", run.stderr);
    }
}

#[test]
fn a_misspelt_log_level_is_refused_at_its_line() {
    let dir = Dir::new();
    let levels = "off, error, warn, info, debug, trace";
    let (path, run) = dir.validate("daemon.toml", "[daemon]\nlog_level = \"verbose\"\n");
    mistakes_at(&path, &run, &[(2, "\"verbose\" is not a log level")]);
    assert!(run.stderr.contains(levels), "{}", run.stderr);
    let (path, run) = dir.validate("defaults.toml", "# the daemon's log\n[defaults]\nlog_level = \"inf\"\n");
    mistakes_at(&path, &run, &[(3, "\"inf\" is not a log level")]);

    // The flag: a usage error naming the levels, before anything starts.
    let run = lb_ctl(&["proxy", "--config", "/nonexistent.toml", "--log-level", "verbose"]);
    assert_eq!(run.code, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--log-level") && run.stderr.contains(levels), "{}", run.stderr);
}

#[test]
fn zeros_that_break_serving_are_mistakes_at_their_lines() {
    let dir = Dir::new();
    let text = r#"[defaults.proxy.limits]
max_header_bytes = 0

[[vip]]
name = "web"
address = "127.0.0.1"
port = 8080
protocol = "http"
backends = [{ address = "127.0.0.1", port = 9000 }]
[vip.proxy]
max_connections = 0
[vip.proxy.limits]
max_connections = 0
"#;
    let (path, run) = dir.validate("lb.toml", text);
    mistakes_at(
        &path,
        &run,
        &[(2, "max_header_bytes = 0"), (11, "max_connections = 0 lets no request"), (13, "limits.max_connections = 0")],
    );
}

#[test]
fn a_vip_whose_backends_all_have_weight_zero_is_warned_of() {
    let dir = Dir::new();
    let text = r#"[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
backends = [
  { address = "198.51.100.1", weight = 0 },
  { address = "198.51.100.2", weight = 0 },
]
"#;
    let (path, run) = dir.validate("lb.toml", text);
    assert_eq!(run.code, Some(0), "{}", run.stderr);
    let warning = format!("{}:3: warning: vip \"web\" has only backends of weight 0", path.display());
    assert!(run.stderr.contains(&warning), "{}", run.stderr);
    assert!(run.stdout.contains("(1 VIP, 2 backends)"), "{}", run.stdout);
}

#[test]
fn one_run_lists_every_mistake_each_at_its_own_line() {
    let dir = Dir::new();
    let text = r#"[daemon]
ring_size = "big"
log_level = "inf"

[[vip]]
name = "web"
address = "203.0.113.10"
port = 80
forwarding = "dsr-ipipp"
backends = [
  { address = "198.51.100.1", port = 8080 },
  { address = "198.51.100.1", port = 8080 },
  { address = "198.51.100.2", weight = "heavy" },
]

[[vip]]
name = "web2"
address = "203.0.113.10"
port = 80
backends = [{ address = "198.51.100.3" }]
"#;
    let (path, run) = dir.validate("lb.toml", text);
    mistakes_at(
        &path,
        &run,
        &[
            (2, "ring_size: the text \"big\""),
            (3, "\"inf\" is not a log level"),
            (9, "did you mean \"dsr-ipip\"?"),
            (12, "duplicate backend 198.51.100.1:8080"),
            (13, "weight: the text \"heavy\""),
            (18, "duplicate VIP 203.0.113.10:80/tcp"),
        ],
    );
    no_parser_words(&run);
}

#[test]
fn every_tls_file_is_checked_at_the_line_that_names_it() {
    let dir = Dir::new();
    let text = r#"[[vip]]
name = 7
address = "127.0.0.1"
port = 8443
protocol = "http"
backends = [{ address = "127.0.0.1", port = 9000 }]
[vip.proxy.backend_tls]
ca_file = "missing-ca.pem"
server_name = "backend.internal"
[[vip.proxy.tls.certificates]]
chain = "missing-chain.pem"
key = "missing-key.pem"
[[vip.proxy.tls.certificates]]
chain = "missing-chain2.pem"
key = "missing-key2.pem"
"#;
    let (path, run) = dir.validate("lb.toml", text);
    mistakes_at(
        &path,
        &run,
        &[
            (2, "name: the number 7 is written here, but text in quotes is expected"),
            (8, "missing-ca.pem: cannot read"),
            (11, "missing-chain.pem: cannot read"),
            (14, "missing-chain2.pem: cannot read"),
        ],
    );
}

#[test]
fn the_parsers_words_become_the_files_words() {
    let dir = Dir::new();
    // A byte that is not UTF-8 (Latin-1 é) on line 2, a type error on line 5.
    let mut text = b"[[vip]]\nname = \"caf".to_vec();
    text.extend([0xE9, b'"', b'\n']);
    text.extend(b"address = \"203.0.113.10\"\n# the port\nport = \"eighty\"\n");
    let (path, run) = dir.validate("lb.toml", &text);
    mistakes_at(&path, &run, &[(2, "byte 0xE9 at column 12 is not UTF-8"), (5, "port: the text \"eighty\"")]);
    no_parser_words(&run);

    let (path, run) = dir.validate("dup.toml", "[[vip]]\naddress = \"203.0.113.10\"\nport = 80\nport = 81\n");
    mistakes_at(&path, &run, &[(4, "`port` is written twice")]);
}

#[test]
fn yaml_mistakes_are_at_their_line_in_the_files_words() {
    let dir = Dir::new();
    let (path, run) = dir.validate("tab.yaml", "vip:\n  - name: web\n\taddress: 203.0.113.10\n");
    mistakes_at(&path, &run, &[(3, "tab")]);
    assert!(run.stderr.contains("spaces"), "{}", run.stderr);
    let text = "daemon:\n  ring_size: big\nvip:\n  - name: web\n    address: 203.0.113.10\n    port: eighty\n";
    let (path, run) = dir.validate("types.yaml", text);
    mistakes_at(&path, &run, &[(2, "ring_size: the text \"big\""), (6, "port: the text \"eighty\"")]);
}
