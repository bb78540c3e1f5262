//! The `tierfs` command. All of its code lives in the `tierfs-cli` crate.

fn main() -> std::process::ExitCode {
    tierfs_cli::main()
}
