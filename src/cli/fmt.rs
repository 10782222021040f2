//! `kiln fmt FILE... [--check | --write]`: the canonical text, `print(parse(file))`. Files must
//! parse but need not verify; comments and single empty lines are kept.

use std::path::PathBuf;

use clap::Args;
use kiln::ir::parse_file;
use kiln::ir::print::format_source;

use super::{file_name, read_source, report, Error};

#[derive(Args, Debug)]
pub struct FmtArgs {
    /// The .kir files (exactly one unless --check or --write is given).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print nothing; fail, naming each file, if a file is not already formatted.
    #[arg(long, conflicts_with = "write")]
    check: bool,
    /// Rewrite files in place (only those that change).
    #[arg(long)]
    write: bool,
}

/// The canonical text of a source file: the printed module with the file's comments and
/// single empty lines kept, ending in one newline.
pub fn canonical(file: &str, src: &str) -> Result<String, Error> {
    let parsed = parse_file(file, src).map_err(|d| Error::Diagnostics(vec![d]))?;
    let text = format_source(&parsed, src);
    Ok(format!("{}\n", text.trim_end_matches('\n')))
}

pub fn main(args: &FmtArgs) -> Result<(), Error> {
    if !args.check && !args.write && args.files.len() != 1 {
        return Err(Error::Message(
            "give one file to print, or use --check or --write for several".into(),
        ));
    }
    let mut failed = 0;
    for path in &args.files {
        let result = read_source(path).and_then(|src| {
            let text = canonical(&file_name(path), &src)?;
            if args.check {
                if text != src {
                    return Err(Error::Message(format!(
                        "`{}` is not formatted (first difference on line {}); run `kiln fmt \
                         --write {}`",
                        path.display(),
                        first_difference(&src, &text),
                        path.display()
                    )));
                }
            } else if args.write {
                if text != src {
                    std::fs::write(path, &text).map_err(|e| {
                        Error::Message(format!("cannot write `{}`: {e}", path.display()))
                    })?;
                }
            } else {
                out!("{text}");
            }
            Ok(())
        });
        if let Err(e) = result {
            report(&e);
            failed += 1;
        }
    }
    if failed == 0 {
        Ok(())
    } else {
        Err(Error::Reported)
    }
}

/// The 1-based number of the first line where `a` and `b` differ.
fn first_difference(a: &str, b: &str) -> usize {
    let mut la = a.split_inclusive('\n');
    let mut lb = b.split_inclusive('\n');
    let mut n = 1;
    loop {
        match (la.next(), lb.next()) {
            (Some(x), Some(y)) if x == y => n += 1,
            _ => return n,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn first_difference() {
        assert_eq!(super::first_difference("a\nb\n", "a\nc\n"), 2);
        assert_eq!(super::first_difference("a\n", "a\nb\n"), 2);
        assert_eq!(super::first_difference("x", "y"), 1);
    }
}
