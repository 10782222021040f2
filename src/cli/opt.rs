//! `kiln opt FILE (--passes LIST | -O) [-o OUT] [--time-passes]`: parse and verify a .kir file,
//! run a list of passes (or the default pipeline) over every kernel, verifying after each pass,
//! and print the result (or write it to OUT). `KILN_VERBOSE=debuginfo` prints the IR after each
//! pass; `--time-passes` prints each pass's time to stderr.
//! `kiln opt --list-passes` prints every pass with one line on what it does.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::check_source;
use kiln::passes::manager::{PassManager, PASSES};
use kiln::passes::pipeline::default_pipeline;

use super::{file_name, read_source, Error};

#[derive(Args, Debug)]
pub struct OptArgs {
    /// The .kir file.
    #[arg(value_name = "FILE", required_unless_present = "list_passes")]
    file: Option<PathBuf>,
    /// Comma-separated passes to run in order (see --list-passes).
    #[arg(long, value_name = "LIST", conflicts_with = "optimize", value_parser = pass_names)]
    passes: Option<String>,
    /// Run the default optimization pipeline.
    #[arg(short = 'O', conflicts_with = "passes")]
    optimize: bool,
    /// Write the result here instead of standard output.
    #[arg(short = 'o', value_name = "OUT")]
    out: Option<PathBuf>,
    /// Print how long each pass (and each verification after it) took, per kernel, to
    /// standard error, as compilers' -ftime-report does.
    #[arg(long)]
    time_passes: bool,
    /// Print every pass with one line on what it does, and the passes -O runs; then exit.
    #[arg(long, exclusive = true)]
    list_passes: bool,
}

/// A `--passes` value: unknown pass names are usage errors (exit code 2).
fn pass_names(list: &str) -> Result<String, String> {
    PassManager::from_names(list).map(|_| list.to_string()).map_err(|e| e.to_string())
}

/// The help text listing the passes.
pub fn pass_list() -> String {
    let mut s = String::from("Passes:\n");
    for (name, _, what) in PASSES {
        s.push_str(&format!("  {name:<10} {what}\n"));
    }
    s.push_str(&format!("-O runs: {}\n", kiln::passes::pipeline::DEFAULT_PIPELINE));
    s
}

pub fn main(args: &OptArgs) -> Result<(), Error> {
    if args.list_passes {
        out!("{}", pass_list());
        return Ok(());
    }
    let Some(file) = &args.file else { unreachable!("clap requires FILE without --list-passes") };
    let pm = match (&args.passes, args.optimize) {
        (Some(list), _) => PassManager::from_names(list).map_err(|e| e.to_string())?,
        (None, true) => default_pipeline(),
        // A usage error (exit code 2), as clap reports a missing argument.
        (None, false) => clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            "give --passes LIST or -O (kiln opt --list-passes lists the passes)\n",
        )
        .exit(),
    }
    .with_verify(true);
    let src = read_source(file)?;
    let module = check_source(&file_name(file), &src).map_err(Error::Diagnostics)?;
    let out = if args.time_passes {
        let (out, reports) = pm.run_module_timed(&module).map_err(|e| e.to_string())?;
        for r in reports {
            eprintln!("{r}");
        }
        out
    } else {
        pm.run_module(&module).map_err(|e| e.to_string())?
    };
    let text = format!("{}\n", out.to_string().trim_end());
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", path.display())))?,
        None => out!("{text}"),
    }
    Ok(())
}
