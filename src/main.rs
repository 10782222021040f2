//! The `kiln` command line; see `kiln --help`.

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
