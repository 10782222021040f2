//! The `kiln` command line: `check`, `fmt`, `run`, `opt`, `emit`, `fuse`, `divergence`,
//! `cache` and `gen`.
//!
//! Exit codes: 0 on success, 1 when the work fails (a diagnostic in the file, an npy file
//! that does not fit, an interpreter error, a `KILN_*` value that is not understood), 2 for a
//! malformed command line (unknown flags, values of the wrong form, missing arguments). A
//! reader that closes the pipe early (`kiln emit ... | head`) ends the command quietly with 0.

/// `print!` for the command's standard output. A reader that has gone (`kiln emit ... |
/// head`) ends the process quietly with status 0, as Unix tools end, instead of a panic;
/// any other write error is reported and exits with status 1.
macro_rules! out {
    ($($t:tt)*) => { $crate::cli::write_out(format_args!($($t)*)) };
}

/// `println!` for the command's standard output (see [`out!`]).
macro_rules! outln {
    () => { out!("\n") };
    ($($t:tt)*) => { out!("{}\n", format_args!($($t)*)) };
}

mod buffers;
mod cache;
mod check;
mod device;
mod divergence;
mod emit;
mod fmt;
mod fuse;
mod gen;
mod gen_tc;
mod gen_tc_attn;
mod gen_tc_conv;
mod graph;
mod npy;
mod opt;
mod run;
mod tune;
mod tune_tc;
mod value;

use std::path::Path;
use std::process::ExitCode;
use std::sync::OnceLock;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
    // The summary lists the backends' registry: see `summaries`.
    Emit(emit::EmitArgs),
    /// Fuse kernels of a .kir file into one, as a TOML spec says (see docs/fusion.md).
    #[command(after_help = fuse::AFTER_HELP)]
    Fuse(fuse::FuseArgs),
    /// Validate, draw (--dot, --svg) or run (--run) a command graph described in TOML.
    Graph(graph::GraphArgs),
    // The summary lists the devices' registry: see `summaries`.
    #[command(after_long_help = run::AFTER_HELP)]
    Run(Box<run::RunArgs>),
    /// Print kernels with each binding and branch annotated uniform/divergent.
    Divergence(divergence::DivergenceArgs),
    /// Inspect or trim the persistent program cache: ls, show KEY, stats, clear, evict.
    Cache(cache::CacheArgs),
    /// Optimize a .kir file with a list of passes or the default pipeline (-O).
    #[command(after_long_help = opt::pass_list())]
    Opt(opt::OptArgs),
    /// Generate a GEMM or convolution kernel (docs/generator.md) and print it as .kir.
    Gen(gen::GenArgs),
    /// Time a generated kernel's candidate blockings on a device and keep the fastest in the
    /// on-disk cache (docs/generator.md#autotuning); KILN_TUNE=0 skips the search.
    Tune(tune::TuneArgs),
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

/// The top-level help's footer: exit codes and every `KILN_*` variable kiln reads, from the
/// runtime's table (so help, README and code cannot drift apart).
fn help_footer() -> String {
    use kiln::runtime::env::{Scope, VARIABLES};
    let mut s = String::from(
        "Exit status: 0 on success, 1 when the work fails, 2 for a malformed command line.\n\n\
         Environment (a value that is not understood is an error):\n",
    );
    for v in VARIABLES.iter().filter(|v| v.scope == Scope::Kiln) {
        s += &format!("  {}: {}\n      {}\n", v.name, v.accepts, v.meaning);
    }
    s += "\nThe test suite reads more (KILN_REQUIRE_TOOLS, KILN_SPIRV_VAL, ...); see README.md.";
    s
}

/// `a`, `b` or `c`, each in backticks.
fn one_of(names: &[&str]) -> String {
    let quoted: Vec<String> = names.iter().map(|n| format!("`{n}`")).collect();
    match quoted.split_last() {
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// The command's summaries that list a registry (the targets of `emit`, the devices of
/// `run`), made from the registry so that they cannot leave one out.
fn summaries(cmd: clap::Command) -> clap::Command {
    let targets = one_of(&kiln::backends::registry::names());
    let devices = one_of(&kiln::runtime::device::registry::names());
    cmd.mut_subcommand("emit", |c| c.about(format!("Lower a .kir file for a target: {targets}")))
        .mut_subcommand("run", |c| {
            c.about(format!("Run a kernel of a .kir file over an nd-range on a device: {devices}"))
        })
}

/// Runs the command line and returns the process exit code.
pub fn main() -> ExitCode {
    let matches = summaries(Cli::command()).after_help(help_footer()).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    // Settings first, read once: a value that is not understood is an error before anything
    // runs, and every command takes them from `config()`.
    match kiln::runtime::Config::from_env() {
        Ok(config) => CONFIG.get_or_init(|| config).install(),
        Err(e) => {
            report(&Error::Message(e.to_string()));
            return ExitCode::from(1);
        }
    }
    let result = match cli.command {
        Command::Check(a) => check::main(&a),
        Command::Fmt(a) => fmt::main(&a),
        Command::Emit(a) => emit::main(&a),
        Command::Run(a) => run::main(&a),
        Command::Fuse(a) => fuse::main(&a),
        Command::Graph(a) => graph::main(&a),
        Command::Divergence(a) => divergence::main(&a),
        Command::Cache(a) => cache::main(&a),
        Command::Opt(a) => opt::main(&a),
        Command::Gen(a) => gen::main(&a),
        Command::Tune(a) => tune::main(&a),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report(&e);
            ExitCode::from(1)
        }
    }
}

/// kiln's settings, read from the environment once by [`main`] before any command runs.
static CONFIG: OnceLock<kiln::Config> = OnceLock::new();

/// The settings [`main`] read.
fn config() -> &'static kiln::Config {
    // Unit tests call commands without `main`: they get the defaults, not the environment.
    #[cfg(test)]
    let _ = CONFIG.set(kiln::Config::default());
    CONFIG.get().expect("main reads the settings before running a command")
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

/// Writes `args` to standard output (the [`out!`] macro's body).
fn write_out(args: std::fmt::Arguments) {
    use std::io::Write;
    if let Err(e) = std::io::stdout().lock().write_fmt(args) {
        if e.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("kiln: cannot write to standard output: {e}");
        std::process::exit(1);
    }
}
