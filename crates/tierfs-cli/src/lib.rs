//! The `tierfs` command line. Parsing (clap) and validation are separate
//! steps: `args` holds what the user typed, `mount_cmd::validate` turns it
//! into a checked `MountConfig`.

mod args;
mod bench;
mod demo;
mod devices_cmd;
mod migrate_cmd;
mod mount_cmd;
mod mounts;
mod plan_cmd;
mod policy;
mod progress;
mod shell_help;
mod sim_cmd;
mod stats;
mod trace_cmd;
mod umount;
mod where_cmd;

use clap::Parser;
use std::ffi::OsString;
use std::process::ExitCode;

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let argv: Vec<OsString> = std::env::args_os().collect();
    let argv = match args::expand_in_argv(args::helper_form(argv)) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("tierfs: {e}");
            return ExitCode::from(2);
        }
    };
    let cli = match args::Cli::try_parse_from(&argv) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() { ExitCode::from(2) } else { ExitCode::SUCCESS };
        }
    };
    let r = match cli.command {
        args::Command::Mount(m) => mount_cmd::run(*m),
        args::Command::Umount(u) => umount::run(&u),
        args::Command::Stats(s) => stats::run(&s),
        args::Command::Policy(p) => policy::run(&p),
        args::Command::Bench(b) => bench::run(&b),
        args::Command::Demo(d) => demo::run(&d),
        args::Command::Where(w) => where_cmd::run(&w),
        args::Command::Migrate(m) => migrate_cmd::run(&m),
        args::Command::Trace(t) => trace_cmd::run(&t),
        args::Command::Plan(p) => plan_cmd::run(&p),
        args::Command::Sim(s) => sim_cmd::run(&s),
        args::Command::Completions { shell } => shell_help::completions(shell),
        args::Command::Manpage => shell_help::manpage(),
    };
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("tierfs: {e:#}");
            ExitCode::FAILURE
        }
    }
}
