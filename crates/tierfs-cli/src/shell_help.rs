//! Shell completions and the manual page, generated from the clap
//! definitions (`tierfs completions SHELL`, `tierfs manpage`), so that they
//! never disagree with `--help`. `scripts/install.sh` installs both.

use crate::args::{Cli, ShellArg};
use anyhow::Result;
use clap::CommandFactory;
use std::io::Write;
use std::process::ExitCode;

/// Prints the completion script for `shell`.
pub fn completions(shell: ShellArg) -> Result<ExitCode> {
    let mut cmd = Cli::command();
    let shell = match shell {
        ShellArg::Bash => clap_complete::Shell::Bash,
        ShellArg::Zsh => clap_complete::Shell::Zsh,
        ShellArg::Fish => clap_complete::Shell::Fish,
    };
    let mut out = std::io::stdout().lock();
    clap_complete::generate(shell, &mut cmd, "tierfs", &mut out);
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Prints tierfs(1) in roff.
pub fn manpage() -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    clap_mangen::Man::new(Cli::command()).render(&mut out)?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
