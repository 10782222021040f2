//! Filetests for the optimization passes: each `tests/filetests/passes/*.kir` file starts
//! with `// passes: LIST` (pass names, or `-O`), then expectations on the printed output:
//!
//! * `// check: TEXT`  a later output line contains TEXT;
//! * `// nextln: TEXT` the line right after the previous match contains TEXT;
//! * `// not: TEXT`    no output line after the previous match contains TEXT.
//!
//! The output must also verify and give the same interpreter results as the input on a small
//! launch when the file has `// run: N` (N work-items, buffers of 64 elements of the
//! parameters' types filled with 0, 1, 2, ...; scalars 3).
//!
//! `KILN_BLESS=1 cargo test --test passes_filetests` rewrites each file's expectations to the
//! current output (one `check:` and then `nextln:` for every line), as Cranelift's filetests
//! do; review the diff before committing.

use std::path::Path;

use kiln::ir::interp::run;
use kiln::ir::launch::{Arg, Buffer, NdRange};
use kiln::ir::{check_source, verify_kernel, Imm, Kernel, Scalar, Type};
use kiln::passes::manager::PassManager;
use kiln::passes::pipeline::default_pipeline;
use kiln::runtime::device::cpu::CpuDevice;
use kiln::runtime::device::registry::OpenOptions;
use kiln::runtime::Device;

fn directives(src: &str) -> Vec<(String, String)> {
    src.lines()
        .filter_map(|l| l.trim().strip_prefix("//"))
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let k = k.trim();
            ["passes", "check", "nextln", "not", "run"]
                .contains(&k)
                .then(|| (k.to_string(), v.trim().to_string()))
        })
        .collect()
}

fn check_output(out: &str, dirs: &[(String, String)]) -> Result<(), String> {
    let lines: Vec<&str> = out.lines().collect();
    let mut pos: usize = 0; // next line to look at
    let mut last: Option<usize> = None;
    for (k, pat) in dirs {
        match k.as_str() {
            "check" => {
                let found = (pos..lines.len()).find(|&i| lines[i].contains(pat.as_str()));
                let i =
                    found.ok_or_else(|| format!("check: `{pat}` not found after line {pos}"))?;
                last = Some(i);
                pos = i + 1;
            }
            "nextln" => {
                let i = last.map_or(0, |l| l + 1);
                if !lines.get(i).is_some_and(|l| l.contains(pat.as_str())) {
                    return Err(format!(
                        "nextln: `{pat}` expected on line {i}, found `{}`",
                        lines.get(i).unwrap_or(&"<end>")
                    ));
                }
                last = Some(i);
                pos = i + 1;
            }
            "not" => {
                if let Some(l) =
                    lines[pos.min(lines.len())..].iter().find(|l| l.contains(pat.as_str()))
                {
                    return Err(format!("not: `{pat}` found in `{l}`"));
                }
            }
            _ => {}
        }
    }
    Ok(())
}

fn launch(k: &Kernel, items: u32, cpu: bool) -> Result<Vec<Buffer>, String> {
    let mut bufs = Vec::new();
    let mut args = Vec::new();
    for p in k.params() {
        match p.ty() {
            Type::Ptr(_, elem) => {
                let vals: Vec<Imm> = (0..64)
                    .map(|i| {
                        if elem.is_float() {
                            Imm::float(elem, i as f64)
                        } else if elem == Scalar::Bool {
                            Imm::Bool(i % 2 == 1)
                        } else {
                            Imm::int(elem, i)
                        }
                    })
                    .collect();
                bufs.push(Buffer::from_imms(elem, &vals).map_err(|e| e.to_string())?);
                args.push(Arg::Buffer(bufs.len() - 1));
            }
            Type::Scalar(s) => args.push(Arg::Scalar(if s.is_float() {
                Imm::float(s, 3.0)
            } else if s == Scalar::Bool {
                Imm::Bool(true)
            } else {
                Imm::int(s, 3)
            })),
            Type::Vector(..) | Type::Frag(_) => {
                return Err(format!("vector or fragment parameter `{}`", p.name()))
            }
        }
    }
    let range = NdRange::new(&[items]);
    if cpu {
        // The cpu device (x86-64 code) must give the interpreter's bits on every run case.
        let dev = CpuDevice::open(&OpenOptions::default()).map_err(|e| e.to_string())?;
        dev.build_and_run(k, &range, &args, &mut bufs).map_err(|e| e.to_string())?;
    } else {
        run(k, &range, &args, &mut bufs).map_err(|e| e.to_string())?;
    }
    Ok(bufs)
}

fn run_file(path: &Path, bless: bool) -> Result<(), String> {
    let src = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let dirs = directives(&src);
    let list =
        dirs.iter().find(|d| d.0 == "passes").map(|d| d.1.clone()).ok_or("no `// passes:`")?;
    let pm = if list == "-O" {
        default_pipeline()
    } else {
        PassManager::from_names(&list).map_err(|e| e.to_string())?
    };
    let m = check_source(&path.display().to_string(), &src)
        .map_err(|d| d.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))?;
    let out = pm.run_module(&m).map_err(|e| e.to_string())?;
    for k in &out.kernels {
        verify_kernel(k).map_err(|e| format!("{e:?}"))?;
    }
    if let Some(n) = dirs.iter().find(|d| d.0 == "run").and_then(|d| d.1.parse::<u32>().ok()) {
        for (a, b) in m.kernels.iter().zip(&out.kernels) {
            let (x, y) = (launch(a, n, false)?, launch(b, n, false)?);
            kiln::ir::testing::results_match(&x, &y)?;
            if cfg!(target_arch = "x86_64") {
                kiln::ir::testing::results_match(&x, &launch(b, n, true)?)
                    .map_err(|e| format!("cpu device: {e}"))?;
            }
        }
    }
    let text = out.to_string();
    if bless {
        let mut new = String::new();
        for l in src.lines() {
            let t = l.trim();
            let is_expect = ["// check:", "// nextln:", "// not:"].iter().any(|p| t.starts_with(p));
            if is_expect {
                continue;
            }
            new.push_str(l);
            new.push('\n');
            if t.starts_with("// passes:") {
                for (i, o) in text.lines().filter(|o| !o.trim().is_empty()).enumerate() {
                    let kind = if i == 0 { "check" } else { "nextln" };
                    new.push_str(&format!("// {kind}: {}\n", o.trim()));
                }
            }
        }
        if new != src {
            std::fs::write(path, new).map_err(|e| e.to_string())?;
        }
        return Ok(());
    }
    check_output(&text, &dirs).map_err(|e| format!("{e}\n--- output:\n{text}"))
}

#[test]
fn pass_filetests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/filetests/passes");
    let bless = std::env::var("KILN_BLESS").is_ok_and(|v| v == "1");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("filetest directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kir"))
        .collect();
    files.sort();
    assert!(files.len() >= 40, "only {} filetests", files.len());
    let failures: Vec<String> = files
        .iter()
        .filter_map(|f| run_file(f, bless).err().map(|e| format!("{}: {e}", f.display())))
        .collect();
    assert!(failures.is_empty(), "{} filetests failed:\n{}", failures.len(), failures.join("\n\n"));
}

#[test]
fn checker_rejects_what_it_should() {
    let out = "a\nb x\nc\n";
    let d = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert!(check_output(out, &[d("check", "b"), d("nextln", "c")]).is_ok());
    assert!(check_output(out, &[d("check", "a"), d("nextln", "c")]).is_err());
    assert!(check_output(out, &[d("check", "c"), d("check", "a")]).is_err());
    assert!(check_output(out, &[d("check", "a"), d("not", "x")]).is_err());
    assert!(check_output(out, &[d("check", "b"), d("not", "x")]).is_ok());
}
