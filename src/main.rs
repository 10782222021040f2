//! The `kiln` command line; see `kiln --help`.

#![warn(missing_docs)]

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
