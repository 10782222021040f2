//! `kiln emit`: lower a .kir file for a target of the registry
//! (`kiln_backends::registry`) through the build driver: text targets (`ptx`, `amdgpu`,
//! `kir`) print every kernel or the one `--kernel` names; binary targets (`spirv-cl`,
//! `spirv-vk`) write one kernel's module (`--text` prints its disassembly).

use std::io::{IsTerminal, Write};
use std::path::PathBuf;

use clap::Args;
use kiln::backends::driver;
use kiln::backends::options::BuildOptions;
use kiln::backends::ptx::Options;
use kiln::backends::registry::{self, TargetOptions};
use kiln::backends::target::{AnyTarget, BackendError, Emitted, Lowering, Target};
use kiln::backends::x86::X86Options;
use kiln::ir::{check_source, Kernel, Module, Verified};

use super::{file_name, read_source, Error};

/// Arguments of `kiln emit`.
#[derive(Args, Debug)]
pub struct EmitArgs {
    /// The .kir file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The target: `ptx`, `spirv-cl` (OpenCL Kernel flavour), `spirv-vk` (Vulkan compute),
    /// `amdgpu` (gfx900 assembly), `x86` (this host's machine code, as a listing) or `kir`
    /// (the kernels as the interpreter runs them).
    #[arg(long, value_name = "TARGET", value_parser = target)]
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
    /// Run the `-O` pipeline first, as devices do when they build (`kiln emit` lowers the
    /// kernels as written by default).
    #[arg(short = 'O', long)]
    optimize: bool,
    /// x86: only the scalar code, without the 8-lane AVX2 code.
    #[arg(long)]
    scalar: bool,
    /// Print the time lowering took (parsing excluded) to stderr.
    #[arg(long)]
    time: bool,
    /// Emit the kernels as the bounds sanitizer rewrites them (`-fsanitize=bounds`): every
    /// access and loop checked, with hidden parameters appended (see docs/sanitize.md).
    #[arg(long)]
    check_bounds: bool,
}

/// Runs `kiln emit`.
pub fn main(a: &EmitArgs) -> Result<(), Error> {
    let info = registry::info(&a.target).expect("--target passed the value parser");
    if info.binary && !a.text && a.output.is_none() && std::io::stdout().is_terminal() {
        // Binary on a terminal is garbage at best and terminal escapes at worst.
        clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            format!(
                "--target {} writes a binary SPIR-V module, and stdout is a terminal: give \
                 -o PATH, --text for the disassembly, or redirect stdout\n",
                a.target
            ),
        )
        .exit()
    }
    let src = read_source(&a.file)?;
    let module = check_source(&file_name(&a.file), &src).map_err(Error::Diagnostics)?;
    // A binary file holds one module, of one kernel.
    let kernels = if info.binary { vec![one_kernel(a, &module)?] } else { selected(a, &module)? };
    let names: Vec<String> = kernels.iter().map(|k| k.name().to_string()).collect();
    let module = module.retain(|k| names.iter().any(|n| n == k.name()));
    let options = TargetOptions {
        ptx: Options { sm: a.sm, ptx_version: a.ptx_version },
        x86: X86Options { scalar: a.scalar, ..X86Options::default() },
    };
    let target = registry::target(&a.target, &options)?;
    let build = BuildOptions { optimize: a.optimize, sanitize_bounds: a.check_bounds };
    let start = std::time::Instant::now();
    let chosen = Chosen { target: &*target, optimize: a.optimize };
    let out = driver::build_verified(&chosen, module, &build).map_err(|e| e.to_string())?.output;
    if a.time {
        let us = start.elapsed().as_secs_f64() * 1e6;
        eprintln!("kiln: emitted {} in {us:.1} us", a.target);
    }
    let write = |path: &PathBuf, data: &[u8]| {
        std::fs::write(path, data).map_err(|e| format!("cannot write `{}`: {e}", path.display()))
    };
    if let Some(p) = &a.output {
        write(p, &out.to_bytes())?;
    }
    if a.text || (a.output.is_none() && !out.is_binary()) {
        let listing = out.listing();
        out!("{listing}");
        if out.is_binary() {
            outln!();
        }
    } else if a.output.is_none() {
        std::io::stdout()
            .write_all(&out.to_bytes())
            .map_err(|e| format!("cannot write stdout: {e}"))?;
    }
    Ok(())
}

/// The registry's target as the build driver takes it, with `-O` asked for by name: it
/// applies to the kir target too, which devices (the interpreter) otherwise run as written.
struct Chosen<'a> {
    target: &'a dyn AnyTarget,
    optimize: bool,
}

/// A target's output, whatever the target.
struct Output(Box<dyn Emitted>);

impl Emitted for Output {
    fn listing(&self) -> String {
        self.0.listing()
    }
    fn to_bytes(&self) -> Vec<u8> {
        self.0.to_bytes()
    }
    fn is_binary(&self) -> bool {
        self.0.is_binary()
    }
}

impl Target for Chosen<'_> {
    type Output = Output;
    fn name(&self) -> String {
        self.target.name()
    }
    fn lowering(&self) -> Lowering {
        let mut lowering = self.target.lowering();
        lowering.optimize |= self.optimize;
        lowering
    }
    fn emit(&self, module: &Verified) -> Result<Output, BackendError> {
        self.target.emit_any(module).map(Output)
    }
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

/// A `--target` value; an unknown one is a usage error (exit code 2).
fn target(text: &str) -> Result<String, String> {
    match registry::info(text) {
        Some(t) => Ok(t.name.to_string()),
        None => Err(format!("unknown target `{text}` (targets: {})", registry::names().join(", "))),
    }
}

fn ptx_version(text: &str) -> Result<(u32, u32), String> {
    let bad = || format!("`{text}` is not a PTX version like 7.8");
    let (major, minor) = text.split_once('.').ok_or_else(bad)?;
    Ok((major.parse().map_err(|_| bad())?, minor.parse().map_err(|_| bad())?))
}
