//! `lb-ctl completions SHELL` and `lb-ctl man DIR`: generated from the clap definition in
//! `args`, so they always match the command line.
use std::path::Path;

use anyhow::Context as _;
use clap::CommandFactory as _;

use super::args::Cli;

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    clap_complete::generate(shell, &mut Cli::command(), "lb-ctl", &mut std::io::stdout().lock());
    Ok(())
}

/// lb-ctl.1 and one page per visible subcommand, nested ones included (lb-ctl-backends-add.1).
pub fn man_pages(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    clap_mangen::generate_to(Cli::command(), dir)
        .with_context(|| format!("writing the man pages into {}", dir.display()))?;
    Ok(())
}
