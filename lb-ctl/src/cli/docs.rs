//! `lb-ctl completions SHELL` and `lb-ctl man DIR`: generated from the clap definition in
//! `args`, so they always match the command line.
use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;

use super::args::Cli;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut script = Vec::new();
    let mut command = Cli::command();
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
    print!("{script}");
    Ok(())
}

/// The long names of hidden options anywhere in the command tree.
fn hidden_longs(command: &clap::Command) -> Vec<String> {
    let own = command.get_arguments().filter(|a| a.is_hide_set()).filter_map(|a| a.get_long().map(String::from));
    own.chain(command.get_subcommands().flat_map(hidden_longs)).collect()
}

/// lb-ctl.1 and one page per visible subcommand, nested ones included (lb-ctl-backends-add.1).
pub fn man_pages(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))?;
    Ok(())
}
