//! `kiln fuse FILE.kir --spec SPEC.toml [--name NAME] [-o OUT.kir]`: fuse kernels of a module
//! into one. The spec format and the output are documented in docs/fusion.md.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::{check_source, Module};
use kiln::passes::fusion::{explain, explain_epilogue, fuse_kernels, fusion_key, FusionSpec};
use kiln::runtime::fusion::settled_spec;

use super::{file_name, read_source, Error};

/// Where the spec format is documented, shown under `kiln fuse --help`.
pub const AFTER_HELP: &str =
    "The spec format (every key, with examples), the promotion legality rule and the \
#fused(args = ...) mapping in the output: see docs/fusion.md.";

/// `kiln fuse`'s arguments.
#[derive(Args, Debug)]
pub struct FuseArgs {
    /// The .kir file holding the kernels to fuse.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The fusion spec (TOML: name, kernels, ndranges, identical, promote, constants,
    /// barriers, remap, epilogue).
    #[arg(long, value_name = "SPEC.toml")]
    spec: PathBuf,
    /// The fused kernel's name (overrides the spec's `name`); must be an identifier that is
    /// not a keyword.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Where to write the fused module (default: standard output).
    #[arg(short, long, value_name = "OUT.kir")]
    output: Option<PathBuf>,
    /// Also print the fusion key (for caching) to standard error.
    #[arg(long)]
    key: bool,
    /// Print, for every buffer the kernels share, each access with its guard and whether it
    /// is analysable and in bounds, and the verdicts: may it stay in global memory (per
    /// work-item, per work-group), is a requested promotion done or why not. Printed on
    /// standard output instead of the fused module (which `-o` still writes).
    #[arg(long)]
    explain: bool,
}

pub fn main(a: &FuseArgs) -> Result<(), Error> {
    let src = read_source(&a.file)?;
    let module = check_source(&file_name(&a.file), &src).map_err(Error::Diagnostics)?;
    let spec_text = read_source(&a.spec)?;
    let mut spec = FusionSpec::from_toml_for(&spec_text, &module)
        .map_err(|e| Error::Message(format!("`{}`: {e}", a.spec.display())))?;
    if let Some(n) = &a.name {
        // An empty name would silently become the default one.
        if n.is_empty() {
            return Err(Error::Message("--name is empty: give the fused kernel's name".into()));
        }
        spec.name = n.clone();
    }
    // The barrier rule of every fusion API (`Jit::fuse`, queue fusion, graphs).
    let spec = settled_spec(&module, &spec).map_err(|e| Error::Message(e.to_string()))?;
    // An epilogue fusion is explained consumer by consumer, a refusal included.
    if a.explain && spec.epilogue {
        let report = explain_epilogue(&module, &spec);
        outln!("{report}");
        if let Some(e) = report.refused {
            return Err(Error::Message(e.to_string()));
        }
    }
    let fused = fuse_kernels(&module, &spec).map_err(|e| Error::Message(e.to_string()))?;
    if a.explain && !spec.epilogue {
        let reports = explain(&module, &spec).map_err(|e| Error::Message(e.to_string()))?;
        if reports.is_empty() {
            outln!("no buffer is shared by the kernels or named by a promotion");
        }
        for r in reports {
            outln!("{r}");
        }
    }
    for w in &fused.warnings {
        eprintln!("kiln: warning: {w}");
    }
    if a.key {
        eprintln!("fusion key: {}", fusion_key(&module, &spec));
    }
    // The canonical form `kiln fmt` writes: the printed module and exactly one final newline.
    let text = format!("{}\n", Module::new(vec![fused.kernel]).to_string().trim_end_matches('\n'));
    match &a.output {
        Some(p) => std::fs::write(p, text)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", p.display())))?,
        None if a.explain => {}
        None => out!("{text}"),
    }
    Ok(())
}
