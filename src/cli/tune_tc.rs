//! `kiln tune tc-gemm|tc-conv ... --device D`: the fastest blocking of a tensor-core kernel
//! (kiln::tune_tc): a stored winner is used as it is; on CUDA the model's best candidates are
//! timed and the winner stored; elsewhere the model's first choice. Prints the blocking and
//! where it came from.

use kiln::runtime::device::registry::{self, OpenOptions};
use kiln::tune::TuneOptions;
use kiln::tune_tc::{tune_tc, TcHow, TcProblem};

use super::gen::{write_stdout, What};
use super::tune::candidate_lines;
use super::Error;

/// The tuner's settings from `kiln tune`'s flags.
pub(super) struct Flags<'a> {
    pub device: &'a str,
    pub max_candidates: usize,
    pub repeat: u32,
}

/// Tunes the tensor-core problem `what` describes.
pub(super) fn from_args(what: &What, f: &Flags) -> Result<(), Error> {
    let (problem, output) = match what {
        What::TcGemm(t) => {
            let p = t.problem()?;
            p.validate().map_err(Error::Message)?;
            (TcProblem::gemm(&p), &t.output)
        }
        What::TcConv(t) => {
            let p = t.problem()?;
            p.validate().map_err(Error::Message)?;
            (TcProblem::conv(&p), &t.output)
        }
        What::TcAttn(_) => {
            return Err(Error::Message(
                "kiln tune does not tune attention kernels (they have no blocking to choose \
                 but --warps)"
                    .into(),
            ))
        }
        _ => return Err(Error::Message("not a tensor-core kernel".into())),
    };
    if output.is_some() {
        return Err(Error::Message(
            "kiln tune does not write tensor-core kernels (-o): pass the blocking it prints to \
             `kiln gen tc-gemm` or `kiln gen tc-conv` (--block, --warps, --k-tile, --stages)"
                .into(),
        ));
    }
    main(&problem, f)
}

/// Tunes `problem` (already validated) and prints the result.
fn main(problem: &TcProblem, f: &Flags) -> Result<(), Error> {
    let dev = registry::open(f.device, &OpenOptions::default())
        .map_err(|e| Error::Message(e.to_string()))?;
    let mut opts = TuneOptions::from_config(super::config());
    opts.max_candidates = f.max_candidates;
    opts.repeats = f.repeat;
    let t = tune_tc(problem, &*dev, &opts);
    for w in opts.cache.iter().flat_map(|c| c.warnings()) {
        eprintln!("kiln: warning: {w}");
    }
    let t = t.map_err(Error::Message)?;
    let mut text = String::new();
    match &t.how {
        TcHow::Cached => text.push_str(&format!("{}: stored winner for `{}`\n", t.config, t.key)),
        TcHow::Heuristic(why) => {
            text.push_str(&format!("{}: heuristic for `{}` ({why})\n", t.config, t.key))
        }
        TcHow::Searched { timings, errors } => {
            candidate_lines(&mut text, timings, errors);
            text.push_str(&format!(
                "{}: fastest of {} on {} for `{}` (stored)\n",
                t.config,
                timings.len(),
                dev.name(),
                t.key
            ));
        }
    }
    write_stdout(&text)
}
