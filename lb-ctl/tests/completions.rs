//! Shell completion as a person meets it: the script `lb-ctl completions SHELL` prints, loaded
//! into the real bash, zsh and fish, each asked through its own completion machinery what
//! follows `lb-ctl <TAB>`, `lb-ctl backends <TAB>`, `lb-ctl attach --<TAB>` and a value
//! (`lb-ctl proxy --log-format <TAB>`). The shells come from the Debian package list
//! (`cargo xtask setup`); a missing shell fails under CI and is skipped loudly elsewhere.
use std::io::Read as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_lb-ctl");

/// What each shell must offer after each command line (the part before the cursor).
const CASES: &[(&str, &[&str])] = &[
    ("lb-ctl ", &["attach", "backends", "stats", "completions", "man"]),
    ("lb-ctl backends ", &["add", "remove", "drain", "list", "verify"]),
    ("lb-ctl attach --", &["--config", "--xdp-mode", "--log-format", "--enable-forwarding"]),
    ("lb-ctl proxy --log-format ", &["text", "json"]),
    ("lb-ctl attach eth0 --xdp-mode ", &["auto", "native", "skb"]),
];

/// The completion script for `shell`, written into `dir` under the name the shell looks for.
fn script(shell: &str, dir: &Path) -> std::path::PathBuf {
    let out = Command::new(BIN).args(["completions", shell]).output().unwrap();
    assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
    let name = match shell {
        "zsh" => "_lb-ctl",
        "fish" => "lb-ctl.fish",
        _ => "lb-ctl",
    };
    let path = dir.join(name);
    std::fs::write(&path, out.stdout).unwrap();
    path
}

/// True when `shell` is installed; otherwise fails under CI, or says loudly that it skips.
fn have(shell: &str) -> bool {
    if Command::new(shell).arg("-c").arg("exit 0").stdin(Stdio::null()).status().is_ok_and(|s| s.success()) {
        return true;
    }
    if std::env::var_os("CI").is_some() {
        panic!("{shell} is not installed and CI is set: run `cargo xtask setup`");
    }
    eprintln!("SKIPPED (needs {shell}): completion tests for {shell}");
    false
}

/// Runs a shell program; its stdout. Killed (by pid) if it hangs, so a broken script fails the
/// test instead of stalling the suite.
fn run(program: &str, args: &[&str]) -> String {
    let mut child = Command::new(program)
        .args(args)
        .env("HOME", std::env::temp_dir())
        .env("TERM", "dumb")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("{program} {args:?} did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(child.wait().unwrap().success(), "{program} failed: {err}");
    out
}

/// Checks every case with `complete`, which gives the candidates for a command line.
fn check(shell: &str, complete: impl Fn(&str) -> Vec<String>) {
    let mut failed = Vec::new();
    for (line, want) in CASES {
        let got = complete(line);
        let missing: Vec<&&str> = want.iter().filter(|w| !got.iter().any(|g| g == **w)).collect();
        if !missing.is_empty() {
            failed.push(format!("{shell}: `{line}<TAB>` lacks {missing:?}; offered {got:?}"));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

/// bash: the function `complete -p lb-ctl` names, called as readline would call it.
#[test]
fn bash_completes_subcommands_flags_and_values() {
    if !have("bash") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = script("bash", dir.path());
    let driver = r#"
source "$1"
line="$2"
read -ra COMP_WORDS <<< "$line"
[[ "$line" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
COMP_LINE="$line"
COMP_POINT=${#line}
spec=$(complete -p lb-ctl)
function=$(sed -E 's/.* -F ([^ ]+) .*/\1/' <<< "$spec")
prev=""
(( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"
"$function" lb-ctl "${COMP_WORDS[COMP_CWORD]}" "$prev"
printf '%s\n' "${COMPREPLY[@]}"
"#;
    let script = script.to_str().unwrap();
    check("bash", |line| {
        run("bash", &["--norc", "--noprofile", "-c", driver, "driver", script, line])
            .split_whitespace()
            .map(String::from)
            .collect()
    });
}

/// zsh: an interactive zsh in a pseudo-terminal (zpty) with compinit and the script on its
/// fpath; the line is typed and TAB pressed, and every candidate compadd is given is printed.
#[test]
fn zsh_completes_subcommands_flags_and_values() {
    if !have("zsh") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    script("zsh", dir.path());
    // The markers are written split in two, so the terminal's echo of what is typed never
    // matches them.
    let driver = r#"
zmodload zsh/zpty || exit 3
zpty lbc zsh -f -i
zpty -w lbc "PS1=''; fpath=($1 \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w lbc 'compadd() { if (( ${@[(I)-[OAD]]} )); then builtin compadd "$@"; return; fi; local -a hits; builtin compadd -A hits "$@"; local h; for h in $hits; do print -r -- "LBC""HIT:$h"; done; builtin compadd "$@"; }'
zpty -w lbc 'lbc_done() { print -r -- "LBC""DONE"; exit 0; }; comppostfuncs=(lbc_done); bindkey "^I" complete-word'
zpty -w -n lbc "$2"$'\t'
while zpty -r lbc line; do
  [[ $line == *LBCDONE* ]] && break
  [[ $line == *LBCHIT:* ]] && print -r -- "${${line#*LBCHIT:}%%$'\r'*}"
done
zpty -d lbc
"#;
    let dir_text = dir.path().to_str().unwrap();
    check("zsh", |line| {
        run("zsh", &["-f", "-c", driver, "driver", dir_text, line]).lines().map(String::from).collect()
    });
}

/// fish: `complete --do-complete`, fish's own completion of a command line, with the script
/// sourced as fish loads it from vendor_completions.d.
#[test]
fn fish_completes_subcommands_flags_and_values() {
    if !have("fish") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = script("fish", dir.path());
    let script = script.to_str().unwrap();
    check("fish", |line| {
        let program = "source $argv[1]; complete --do-complete=$argv[2]";
        run("fish", &["--no-config", "-c", program, script, line])
            .lines()
            // Each candidate, then a tab and its description.
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect()
    });
}
