//! `kiln emit`: lower the kernels of a .kir file for a backend target and print the result.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::check_source;

use super::{file_name, read_source, Error};

#[derive(Args, Debug)]
pub struct EmitArgs {
    /// The .kir file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// What to emit: `ptx` (PTX text for NVIDIA GPUs).
    #[arg(long, value_name = "TARGET")]
    target: String,
    /// The SM architecture for `--target ptx` (70 or newer).
    #[arg(long, value_name = "N", default_value_t = 90)]
    sm: u32,
    /// The PTX ISA version to declare, MAJOR.MINOR (default: the lowest that supports --sm).
    #[arg(long, value_name = "X.Y", value_parser = ptx_version)]
    ptx_version: Option<(u32, u32)>,
    /// Emit only this kernel (default: every kernel of the file).
    #[arg(short, long, value_name = "NAME")]
    kernel: Option<String>,
    /// Print the time lowering took (parsing excluded) to stderr.
    #[arg(long)]
    time: bool,
    /// Write to this file instead of stdout.
    #[arg(short, long, value_name = "OUT")]
    output: Option<PathBuf>,
}

pub fn main(a: &EmitArgs) -> Result<(), Error> {
    let src = read_source(&a.file)?;
    let mut module = check_source(&file_name(&a.file), &src).map_err(Error::Diagnostics)?;
    if let Some(name) = &a.kernel {
        let k = module
            .kernel(name)
            .cloned()
            .ok_or_else(|| format!("`{}` has no kernel named `{name}`", a.file.display()))?;
        module.kernels = vec![k];
    }
    let start = std::time::Instant::now();
    let text = match a.target.as_str() {
        "ptx" => {
            let options = kiln::backends::ptx::Options { sm: a.sm, ptx_version: a.ptx_version };
            kiln::backends::ptx::emit_module(&module, &options).map_err(|e| e.to_string())?
        }
        t => return Err(Error::Message(format!("unknown target `{t}` (targets: ptx)"))),
    };
    if a.time {
        let us = start.elapsed().as_secs_f64() * 1e6;
        eprintln!("kiln: emitted {} kernel(s) as {} in {us:.1} us", module.kernels.len(), a.target);
    }
    match &a.output {
        Some(p) => std::fs::write(p, text)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", p.display())))?,
        None => print!("{text}"),
    }
    Ok(())
}

fn ptx_version(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{text}` is not a PTX version like 7.8");
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    Ok((major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?))
}
