//! `kiln emit`: lower a kernel to a backend's output format.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use kiln::ir::check_source;

use super::{file_name, read_source, Error};

/// Arguments of `kiln emit`.
#[derive(Args, Debug)]
pub struct EmitArgs {
    /// The .kir file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The target: `spirv-cl` (OpenCL Kernel flavour) or `spirv-vk` (Vulkan compute).
    #[arg(long, value_name = "TARGET")]
    target: String,
    /// The kernel to emit; needed only when the file has several.
    #[arg(short, long, value_name = "NAME")]
    kernel: Option<String>,
    /// Write the binary module here (default: stdout, unless --text).
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// Print a textual disassembly to stdout.
    #[arg(long)]
    text: bool,
}

/// Runs `kiln emit`.
pub fn main(a: &EmitArgs) -> Result<(), Error> {
    let src = read_source(&a.file)?;
    let module = check_source(&file_name(&a.file), &src).map_err(Error::Diagnostics)?;
    let names = || module.kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    let kernel = match (&a.kernel, module.kernels.len()) {
        (Some(n), _) => module.kernel(n).ok_or_else(|| {
            format!("`{}` has no kernel named `{n}` (kernels: {})", a.file.display(), names())
        })?,
        (None, 1) => &module.kernels[0],
        (None, 0) => return Err(format!("`{}` has no kernels", a.file.display()).into()),
        (None, _) => {
            return Err(format!(
                "`{}` has several kernels ({}); choose one with --kernel",
                a.file.display(),
                names()
            )
            .into())
        }
    };
    let (bytes, text) = match a.target.as_str() {
        "spirv-cl" | "spirv-vk" => {
            use kiln::backends::spirv::{emit, Flavour};
            let flavour = if a.target == "spirv-cl" { Flavour::OpenCl } else { Flavour::Vulkan };
            let m = emit(kernel, flavour).map_err(|e| e.to_string())?;
            (m.to_bytes(), m.disassemble())
        }
        t => return Err(format!("unknown target `{t}` (targets: spirv-cl, spirv-vk)").into()),
    };
    if let Some(path) = &a.output {
        std::fs::write(path, &bytes)
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    if a.text {
        println!("{text}");
    } else if a.output.is_none() {
        std::io::stdout().write_all(&bytes).map_err(|e| format!("cannot write stdout: {e}"))?;
    }
    Ok(())
}
