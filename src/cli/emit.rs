//! `kiln emit FILE --target T`: print the code a backend generates for each kernel.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use kiln::ir::check_source;

use super::{file_name, read_source, Error};

/// A code-generation target.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Target {
    /// gfx900 assembly (accepted by `llvm-mc -triple=amdgcn-amd-amdhsa -mcpu=gfx900`).
    Amdgpu,
}

#[derive(Args, Debug)]
pub struct EmitArgs {
    /// The .kir file to compile.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The backend.
    #[arg(long, value_enum)]
    target: Target,
}

pub fn main(args: &EmitArgs) -> Result<(), Error> {
    let src = read_source(&args.file)?;
    let module = check_source(&file_name(&args.file), &src).map_err(Error::Diagnostics)?;
    for k in &module.kernels {
        let text = match args.target {
            Target::Amdgpu => kiln::backends::amdgpu::compile(k).map_err(|e| e.to_string())?.asm,
        };
        print!("{text}");
    }
    Ok(())
}
