//! `kiln check FILE...`: parse and verify.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::{check_source, Kernel};

use super::{file_name, read_source, report, Error};

#[derive(Args, Debug)]
pub struct CheckArgs {
    /// The .kir files to check.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Also print each kernel's signature (what `kiln run` needs as --arg).
    #[arg(short, long)]
    verbose: bool,
}

pub fn main(args: &CheckArgs) -> Result<(), Error> {
    let mut failed = 0;
    for path in &args.files {
        let result = read_source(path).and_then(|src| {
            check_source(&file_name(path), &src).map_err(|ds| {
                let n = ds.len();
                report(&Error::Diagnostics(ds));
                Error::Message(format!(
                    "`{}`: {n} error{}",
                    path.display(),
                    if n == 1 { "" } else { "s" }
                ))
            })
        });
        match result {
            Ok(module) if args.verbose => {
                outln!("{}: ok", path.display());
                for k in &module.kernels {
                    outln!("  {}", signature(k));
                }
            }
            Ok(_) => {}
            Err(e) => {
                report(&e);
                failed += 1;
            }
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        Err(Error::Reported)
    }
}

/// `name(p: T, ...)`, as the kernel's header reads.
pub fn signature(k: &Kernel) -> String {
    let params: Vec<String> =
        k.params().iter().map(|p| format!("{}: {}", p.name(), p.ty())).collect();
    format!("{}({})", k.name(), params.join(", "))
}
