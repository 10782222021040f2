//! `kiln opt FILE (--passes LIST | -O) [-o OUT]`: parse and verify a .kir file, run a list of
//! passes (or the default pipeline) over every kernel, verifying after each pass, and print
//! the result (or write it to OUT). `KILN_VERBOSE=debuginfo` prints the IR after each pass.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::check_source;
use kiln::passes::manager::{PassManager, PASSES};
use kiln::passes::pipeline::default_pipeline;

use super::{file_name, read_source, Error};

#[derive(Args, Debug)]
pub struct OptArgs {
    /// The .kir file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// Comma-separated passes to run in order (see --list).
    #[arg(long, value_name = "LIST", conflicts_with = "optimize")]
    passes: Option<String>,
    /// Run the default optimization pipeline.
    #[arg(short = 'O', conflicts_with = "passes")]
    optimize: bool,
    /// Write the result here instead of standard output.
    #[arg(short = 'o', value_name = "OUT")]
    out: Option<PathBuf>,
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
    let pm = match (&args.passes, args.optimize) {
        (Some(list), _) => PassManager::from_names(list).map_err(|e| e.to_string())?,
        (None, true) => default_pipeline(),
        (None, false) => return Err(Error::Message("give --passes LIST or -O".into())),
    }
    .with_verify(true);
    let src = read_source(&args.file)?;
    let module = check_source(&file_name(&args.file), &src).map_err(Error::Diagnostics)?;
    let out = pm.run_module(&module).map_err(|e| e.to_string())?;
    let text = format!("{}\n", out.to_string().trim_end());
    match &args.out {
        Some(path) => std::fs::write(path, text)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", path.display())))?,
        None => print!("{text}"),
    }
    Ok(())
}
