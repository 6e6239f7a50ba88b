//! `lb-ctl completions SHELL` and `lb-ctl man DIR`: generated from the clap definition in
//! `args`, so they always match the command line. [`command`] is that definition as people
//! see it (help, man pages, completions): `--socket` and `--iface` only where they matter.
use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;

use super::args::Cli;

/// The subcommands that talk to a running daemon over its control socket: they take
/// `--socket` and `--iface` (see `client::client_command`).
const DAEMON_COMMANDS: &[&str] = &["reload", "backends", "vips", "node", "status", "stats", "top", "explain"];
/// The subcommands that take `--socket` alone: `proxy` (where its control socket goes) and
/// `detach` (the daemon that must have stopped).
const SOCKET_COMMANDS: &[&str] = &["proxy", "detach"];

/// The command line as help, man pages and completions show it: the global `--socket` and
/// `--iface` are hidden on the subcommands that do not use them (they are still accepted
/// there, as before, and ignored).
pub fn command() -> clap::Command {
    let command = Cli::command();
    let globals: Vec<clap::Arg> = command.get_arguments().filter(|a| a.is_global_set()).cloned().collect();
    let names: Vec<String> = command.get_subcommands().map(|s| s.get_name().to_string()).collect();
    names.into_iter().fold(command, |command, name| {
        let hidden: &[&str] = match name.as_str() {
            n if DAEMON_COMMANDS.contains(&n) => &[],
            n if SOCKET_COMMANDS.contains(&n) => &["daemon_iface"],
            _ => &["socket", "daemon_iface"],
        };
        // The subcommand gets its own hidden copy of each (global too, so its subcommands have
        // it), which the build then does not copy over from the top. Hiding the copies a build
        // made instead leaves clap's index of long flags pointing at the wrong arguments
        // (`attach --help` read as `--iface` without a value).
        let copies: Vec<clap::Arg> =
            globals.iter().filter(|a| hidden.contains(&a.get_id().as_str())).map(|a| a.clone().hide(true)).collect();
        command.mut_subcommand(name, |s| s.args(copies))
    })
}

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    let mut command = command();
    clap_complete::generate(shell, &mut command, "lb-ctl", &mut script);
    let mut script = String::from_utf8(script).context("the completion script is not UTF-8")?;
    // clap_complete offers hidden options too (test-only switches): take them out.
    for long in hidden_longs(&command) {
        let flag = format!("--{long}");
        script = script
            .lines()
            .filter(|l| !(l.contains(&format!("'{flag}[")) || l.contains(&format!(" -l {long} "))))
            .map(|l| l.replace(&format!(" {flag} "), " ").replace(&format!(" {flag}\""), "\""))
            .collect::<Vec<_>>()
            .join("\n")
            + "\n";
    }
    if shell == clap_complete::Shell::Bash {
        script = bash_states_spelt_alike(&script, "lb-ctl");
    }
    print!("{script}");
    Ok(())
}

/// clap_complete's bash script (clap-rs/clap#6421) tracks the words typed so far as a state
/// it spells `lb__ctl__subcmd__backends`, but names the case arm of that state
/// `lb__subcmd__ctl__subcmd__backends` (the binary name's hyphen escaped twice): no arm after
/// the first word ever matches, so nothing completes after a subcommand. The arms are spelt
/// here as the state is.
fn bash_states_spelt_alike(script: &str, bin: &str) -> String {
    let state = bin.replace('-', "__");
    let arm = bin.replace('-', "__subcmd__");
    if state == arm { script.to_string() } else { script.replace(&arm, &state) }
}

/// The long names of options hidden on a subcommand, or anywhere in the command tree (not
/// the global ones hidden only where they do not apply: those are offered where they do).
fn hidden_longs(command: &clap::Command) -> Vec<String> {
    let own = command
        .get_arguments()
        .filter(|a| a.is_hide_set() && !a.is_global_set())
        .filter_map(|a| a.get_long().map(String::from));
    own.chain(command.get_subcommands().flat_map(hidden_longs)).collect()
}

/// lb-ctl.1 and one page per visible subcommand, nested ones included (lb-ctl-backends-add.1).
pub fn man_pages(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(command(), dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command path: `["attach"]`, `["backends", "add"]`, ...
    fn paths(c: &clap::Command, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        for sub in c.get_subcommands() {
            let mut path = prefix.clone();
            path.push(sub.get_name().to_string());
            out.push(path.clone());
            paths(sub, path, out);
        }
    }

    #[test]
    fn every_command_shows_its_help() {
        let mut all = Vec::new();
        paths(&command(), Vec::new(), &mut all);
        all.retain(|path| !path.iter().any(|p| p == "help"));
        let failed: Vec<String> = all
            .iter()
            .filter_map(|path| {
                let args = std::iter::once("lb-ctl").chain(path.iter().map(String::as_str)).chain(["--help"]);
                match command().try_get_matches_from(args) {
                    Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => None,
                    Err(e) => Some(format!("{}: {e}", path.join(" "))),
                    Ok(_) => Some(format!("{}: no help", path.join(" "))),
                }
            })
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
    }
}
