//! The `kiln` command line: `check`, `fmt`, `run`, `opt`, `emit`, `fuse`, `divergence` and
//! `cache`.
//!
//! Exit codes: 0 on success, 1 when the input is wrong (a diagnostic, a bad argument value, an
//! interpreter error), 2 for usage errors found by the argument parser.

mod buffers;
mod cache;
mod check;
mod divergence;
mod emit;
mod fmt;
mod fuse;
mod npy;
mod opt;
mod run;
mod value;

use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use kiln::ir::Diagnostic;

/// kiln: a compiler IR framework and JIT runtime for GPU-style kernels.
#[derive(Parser, Debug)]
#[command(name = "kiln", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Parse and verify .kir files; print every error with its location.
    Check(check::CheckArgs),
    /// Print .kir files in canonical form, or check that they are in it.
    Fmt(fmt::FmtArgs),
    /// Lower a .kir file for a target: `ptx`, `spirv-cl`, `spirv-vk` or `amdgpu`.
    Emit(emit::EmitArgs),
    /// Fuse kernels of a .kir file into one, as a TOML spec says.
    Fuse(fuse::FuseArgs),
    /// Run a kernel of a .kir file over an nd-range on the reference interpreter.
    #[command(after_long_help = run::AFTER_HELP)]
    Run(Box<run::RunArgs>),
    /// Print kernels with each binding and branch annotated uniform/divergent.
    Divergence(divergence::DivergenceArgs),
    /// Inspect or trim the persistent program cache: ls, show KEY, stats, clear, evict.
    Cache(cache::CacheArgs),
    /// Optimize a .kir file with a list of passes or the default pipeline (-O).
    #[command(after_long_help = opt::pass_list())]
    Opt(opt::OptArgs),
}

/// Why a command failed.
#[derive(Debug)]
pub enum Error {
    /// Located errors in a source file, printed as they are.
    Diagnostics(Vec<Diagnostic>),
    /// Anything else, printed as `kiln: error: MESSAGE`.
    Message(String),
    /// The failure has already been reported.
    Reported,
}

impl From<String> for Error {
    fn from(m: String) -> Error {
        Error::Message(m)
    }
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(a) => check::main(&a),
        Command::Fmt(a) => fmt::main(&a),
        Command::Emit(a) => emit::main(&a),
        Command::Run(a) => run::main(&a),
        Command::Fuse(a) => fuse::main(&a),
        Command::Divergence(a) => divergence::main(&a),
        Command::Cache(a) => cache::main(&a),
        Command::Opt(a) => opt::main(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e);
            ExitCode::from(1)
        }
    }
}

/// Prints an error to stderr.
fn report(e: &Error) {
    match e {
        Error::Diagnostics(ds) => {
            for d in ds {
                eprintln!("{d}\n");
            }
        }
        Error::Message(m) => eprintln!("kiln: error: {m}"),
        Error::Reported => {}
    }
}

/// Reads a source file, naming it in the error.
fn read_source(path: &Path) -> Result<String, Error> {
    let bytes = std::fs::read(path)
        .map_err(|e| Error::Message(format!("cannot read `{}`: {e}", path.display())))?;
    kiln::ir::Diagnostic::decode_source(&file_name(path), bytes)
        .map_err(|d| Error::Diagnostics(vec![d]))
}

/// The name a file goes by in diagnostics.
fn file_name(path: &Path) -> String {
    path.display().to_string()
}
