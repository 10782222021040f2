//! `kiln divergence FILE`: print each kernel with every binding and branch annotated
//! uniform/divergent by the divergence analysis.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::check_source;
use kiln::passes::divergence::{analyze, annotate};

use super::{file_name, read_source, Error};

#[derive(Args, Debug)]
pub struct DivergenceArgs {
    /// The .kir file to analyze.
    #[arg(value_name = "FILE")]
    file: PathBuf,
}

pub fn main(args: &DivergenceArgs) -> Result<(), Error> {
    let src = read_source(&args.file)?;
    let module = check_source(&file_name(&args.file), &src).map_err(Error::Diagnostics)?;
    for (i, k) in module.kernels.iter().enumerate() {
        if i > 0 {
            outln!();
        }
        out!("{}", annotate(k, &analyze(k)));
    }
    Ok(())
}
