//! `kiln tune gemm|conv ... --device D`: the fastest blocking of a generated kernel on a
//! device (kiln::tune): a winner stored in the on-disk cache for the problem's bucket is
//! used as it is; otherwise candidates are timed and the winner stored. Prints the blocking
//! and where it came from; `-o FILE` also writes the kernel generated with it.

use clap::Args;
use kiln::runtime::device::registry::{self, OpenOptions};
use kiln::tune::{tune, How, Problem, TuneOptions, WRONG_OUTPUT};

use super::gen::{render, write_stdout, What};
use super::Error;

/// Arguments of `kiln tune`.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// The device to time on: `cpu`, `vulkan` or `cuda` (on `interp` the heuristic choice
    /// is printed: the interpreter is no timing device).
    #[arg(long, value_name = "DEVICE", global = true, default_value = "cpu")]
    device: String,
    /// Most candidate blockings to time.
    #[arg(long, value_name = "N", global = true, default_value_t = 24)]
    max_candidates: usize,
    /// Time every blocking of the documented subset (unrolled, double-buffered; see
    /// docs/generator.md) instead of the model-guided search.
    #[arg(long, global = true)]
    exhaustive: bool,
    /// Timed samples per candidate (after 50 ms of warm-up launches; a kernel shorter than
    /// a millisecond is launched in series per sample); the median counts.
    #[arg(long, value_name = "N", global = true, default_value_t = 5)]
    repeat: u32,
    /// The problem (its blocking flags are what the tuner chooses, and are ignored).
    #[command(subcommand)]
    what: What,
}

fn tc_flags(a: &TuneArgs) -> super::tune_tc::Flags<'_> {
    super::tune_tc::Flags {
        device: &a.device,
        max_candidates: if a.exhaustive { usize::MAX } else { a.max_candidates },
        repeat: a.repeat,
    }
}

/// Runs `kiln tune`.
pub fn main(a: &TuneArgs) -> Result<(), Error> {
    // The problem first: sizes it cannot have are refused before anything is opened or built.
    let (gemm, batched, conv);
    let (problem, output) = match &a.what {
        What::Gemm(g) => {
            gemm = g.problem();
            gemm.views().map_err(Error::Message)?;
            batched = g.batched();
            match &batched {
                Some(b) => {
                    b.views().map_err(Error::Message)?;
                    (Problem::batched_gemm(b), g.output())
                }
                None => (Problem::gemm(&gemm), g.output()),
            }
        }
        What::Conv(c) => {
            conv = c.problem();
            (Problem::conv(&conv).map_err(Error::Message)?, c.output())
        }
        What::TcGemm(_) | What::TcConv(_) | What::TcAttn(_) => {
            return super::tune_tc::from_args(&a.what, &tc_flags(a))
        }
    };
    let dev = registry::open(&a.device, &OpenOptions::default())
        .map_err(|e| Error::Message(e.to_string()))?;
    let mut opts = TuneOptions::from_config(super::config());
    opts.max_candidates = a.max_candidates;
    opts.repeats = a.repeat;
    opts.exhaustive = a.exhaustive;
    let t = tune(&problem, &*dev, &opts);
    // What the on-disk cache refused or could not do (a directory others can write, a
    // record that does not authenticate), once each.
    for w in opts.cache.iter().flat_map(|c| c.warnings()) {
        eprintln!("kiln: warning: {w}");
    }
    let t = t.map_err(Error::Message)?;
    let mut text = String::new();
    match &t.how {
        How::Cached => text.push_str(&format!("{}: stored winner for `{}`\n", t.config, t.key)),
        How::Heuristic(why) => {
            text.push_str(&format!("{}: heuristic for `{}` ({why})\n", t.config, t.key))
        }
        How::Searched { timings, errors } => {
            candidate_lines(&mut text, timings, errors);
            text.push_str(&format!(
                "{}: winner of {} timed on {} for `{}` (stored)\n",
                t.config,
                timings.len(),
                dev.name(),
                t.key
            ));
        }
    }
    write_stdout(&text)?;
    if let Some(path) = output {
        let g = (problem.generate)(&t.config).map_err(Error::Message)?;
        let kir = render(&g, &format!("tuned for `{}`", t.key), &t.config);
        std::fs::write(path, kir)
            .map_err(|e| Error::Message(format!("cannot write `{}`: {e}", path.display())))?;
    }
    Ok(())
}

/// Appends a search's candidate lines to `text`: each timed one with its time, then each
/// that failed with why (a wrong output also warned about on standard error).
pub(super) fn candidate_lines<C: std::fmt::Display>(
    text: &mut String,
    timings: &[(C, f64)],
    errors: &[(C, String)],
) {
    for (c, s) in timings {
        text.push_str(&format!("  {c}: {:.3} ms\n", s * 1e3));
    }
    for (c, e) in errors {
        text.push_str(&format!("  {c}: failed: {e}\n"));
        if e.starts_with(WRONG_OUTPUT) {
            eprintln!("kiln: warning: candidate {c}: {e}");
        }
    }
}
