//! `kiln emit`: lower a .kir file for a backend target: `ptx` (PTX text for every kernel, or
//! the one `--kernel` names) or `spirv-cl` / `spirv-vk` (a binary SPIR-V module for one
//! kernel; `--text` prints its disassembly) or `amdgpu` (gfx900 assembly for every kernel,
//! or the one `--kernel` names).

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use kiln::ir::{check_source, Kernel, Module};

use super::{file_name, read_source, Error};

/// Arguments of `kiln emit`.
#[derive(Args, Debug)]
pub struct EmitArgs {
    /// The .kir file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The target: `ptx`, `spirv-cl` (OpenCL Kernel flavour), `spirv-vk` (Vulkan compute) or
    /// `amdgpu` (gfx900 assembly).
    #[arg(long, value_name = "TARGET")]
    target: String,
    /// The kernel to emit (ptx, amdgpu: default every kernel; spirv: needed when the file has
    /// several).
    #[arg(short, long, value_name = "NAME")]
    kernel: Option<String>,
    /// Write the output here instead of stdout.
    #[arg(short, long, value_name = "PATH")]
    output: Option<PathBuf>,
    /// SPIR-V: print a textual disassembly to stdout.
    #[arg(long)]
    text: bool,
    /// PTX: the SM architecture (70 or newer).
    #[arg(long, value_name = "N", default_value_t = 90)]
    sm: u32,
    /// PTX: the ISA version to declare, MAJOR.MINOR (default: the lowest that supports --sm).
    #[arg(long, value_name = "X.Y", value_parser = ptx_version)]
    ptx_version: Option<(u32, u32)>,
    /// Print the time lowering took (parsing excluded) to stderr.
    #[arg(long)]
    time: bool,
    /// Emit the kernels as the bounds sanitizer rewrites them (`-fsanitize=bounds`): every
    /// access and loop checked, with hidden parameters appended (see docs/sanitize.md).
    #[arg(long)]
    check_bounds: bool,
}

/// What a target produced: text, or a binary module with its disassembly.
enum Emitted {
    Text(String),
    Binary { bytes: Vec<u8>, text: String },
}

/// Runs `kiln emit`.
pub fn main(a: &EmitArgs) -> Result<(), Error> {
    let src = read_source(&a.file)?;
    let module = check_source(&file_name(&a.file), &src).map_err(Error::Diagnostics)?;
    let module = if a.check_bounds {
        let sanitize = |k: &Kernel| kiln::passes::sanitize::sanitize_kernel(k).kernel;
        Module::new(module.kernels.iter().map(sanitize).collect())
    } else {
        module
    };
    let start = std::time::Instant::now();
    let out = match a.target.as_str() {
        "ptx" => {
            let module = Module::new(selected(a, &module)?.into_iter().cloned().collect());
            let options = kiln::backends::ptx::Options { sm: a.sm, ptx_version: a.ptx_version };
            Emitted::Text(
                kiln::backends::ptx::emit_module(&module, &options).map_err(|e| e.to_string())?,
            )
        }
        "spirv-cl" | "spirv-vk" => {
            use kiln::backends::spirv::{emit, Flavour};
            let flavour = if a.target == "spirv-cl" { Flavour::OpenCl } else { Flavour::Vulkan };
            let m = emit(one_kernel(a, &module)?, flavour).map_err(|e| e.to_string())?;
            Emitted::Binary { bytes: m.to_bytes(), text: m.disassemble() }
        }
        "amdgpu" => {
            let mut asm = String::new();
            for k in selected(a, &module)? {
                asm += &kiln::backends::amdgpu::compile(k).map_err(|e| e.to_string())?.asm;
            }
            Emitted::Text(asm)
        }
        t => {
            let targets = "ptx, spirv-cl, spirv-vk, amdgpu";
            return Err(format!("unknown target `{t}` (targets: {targets})").into());
        }
    };
    if a.time {
        let us = start.elapsed().as_secs_f64() * 1e6;
        eprintln!("kiln: emitted {} in {us:.1} us", a.target);
    }
    let write = |path: &PathBuf, data: &[u8]| {
        std::fs::write(path, data).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
    };
    match out {
        Emitted::Text(text) => match &a.output {
            Some(p) => write(p, text.as_bytes())?,
            None => print!("{text}"),
        },
        Emitted::Binary { bytes, text } => {
            if let Some(p) = &a.output {
                write(p, &bytes)?;
            }
            if a.text {
                println!("{text}");
            } else if a.output.is_none() {
                std::io::stdout()
                    .write_all(&bytes)
                    .map_err(|e| format!("cannot write stdout: {e}"))?;
            }
        }
    }
    Ok(())
}

/// The kernel `--kernel` names, or every kernel of the file.
fn selected<'m>(a: &EmitArgs, module: &'m Module) -> Result<Vec<&'m Kernel>, Error> {
    match &a.kernel {
        Some(_) => Ok(vec![one_kernel(a, module)?]),
        None => Ok(module.kernels.iter().collect()),
    }
}

/// The kernel `--kernel` names, or the file's only kernel.
fn one_kernel<'m>(a: &EmitArgs, module: &'m Module) -> Result<&'m Kernel, Error> {
    let names = || module.kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    match (&a.kernel, module.kernels.len()) {
        (Some(n), _) => module.kernel(n).ok_or_else(|| {
            format!("`{}` has no kernel named `{n}` (kernels: {})", a.file.display(), names())
                .into()
        }),
        (None, 1) => Ok(&module.kernels[0]),
        (None, 0) => Err(format!("`{}` has no kernels", a.file.display()).into()),
        (None, _) => Err(format!(
            "`{}` has several kernels ({}); choose one with --kernel",
            a.file.display(),
            names()
        )
        .into()),
    }
}

fn ptx_version(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{text}` is not a PTX version like 7.8");
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    Ok((major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?))
}
