//! The Halide columns of the cpu suite: `halide.py` (the suite's kernels as Halide
//! pipelines, each result checked against NumPy) run by `python3` in the same run, where the
//! `halide` package imports, and its times set beside kiln's. `KILN_CPU_SUITE_HALIDE=0` skips it.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

const SCRIPT: &str = include_str!("halide.py");

/// Kiln's medians of one kernel: one thread, all threads.
pub struct Kiln<'a> {
    pub name: &'a str,
    pub one: Duration,
    pub all: Duration,
}

/// Runs the Halide pipelines of the kernels in `kiln` (2^`log2n` elements, `threads` threads)
/// and prints their medians beside kiln's, or the reason there are none.
pub fn compare(kiln: &[Kiln], log2n: u32, threads: usize) {
    if std::env::var("KILN_CPU_SUITE_HALIDE").is_ok_and(|v| v == "0") {
        return;
    }
    let only = kiln.iter().map(|k| k.name).collect::<Vec<_>>().join(",");
    let out = (|| {
        let mut child = Command::new("python3")
            .args(["-", "--log2n", &log2n.to_string(), "--threads", &threads.to_string()])
            .args(["--only", &only])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        child.stdin.take().expect("piped stdin").write_all(SCRIPT.as_bytes())?;
        child.wait_with_output()
    })();
    let out = match out {
        Ok(out) => out,
        Err(e) => return println!("halide: no comparison (python3: {e})"),
    };
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !text.contains("halide done") {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = text.lines().chain(err.lines()).last();
        return println!("halide: no comparison ({})", why.unwrap_or("no output").trim());
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!("\nHalide pipelines (cpu_suite/halide.py), medians of 7 in this run (above 1: kiln is faster):");
    println!(
        "{:<14} {:>11} {:>11} {:>17} {:>19}",
        "kernel", "halide 1t", "halide all", "kiln 1t : halide", "kiln all : halide"
    );
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [_, name, one, all] = f[..] else { continue };
        let (Ok(one), Ok(all)) = (one.parse::<f64>(), all.parse::<f64>()) else { continue };
        let Some(k) = kiln.iter().find(|k| k.name == name) else { continue };
        println!(
            "{name:<14} {one:>11.3} {all:>11.3} {:>16.3}x {:>18.3}x",
            one / ms(k.one),
            all / ms(k.all)
        );
    }
}
