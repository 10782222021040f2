//! The `kiln` binary: saxpy against an independent computation, the examples through `check`
//! and `fmt --check`, and every user error giving a non-zero exit and a message that names
//! the problem.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use npyz::WriterBuilder;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Runs `kiln` in the repository root.
fn kiln<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .current_dir(root())
        .args(args)
        .output()
        .expect("run kiln")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
fn assert_ok(o: &Output) {
    assert!(o.status.success(), "kiln failed ({}):\n{}{}", o.status, stdout(o), stderr(o));
}

/// Asserts exit code `code` and that stderr mentions every needle (and no panic).
#[track_caller]
fn assert_fails(o: &Output, code: i32, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(code), "expected exit code {code}; stderr:\n{err}");
    for n in needles {
        assert!(err.contains(n), "stderr does not mention {n:?}:\n{err}");
    }
    assert!(!err.contains("panicked"), "kiln panicked:\n{err}");
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kiln-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_npy<T: npyz::AutoSerialize + Clone>(path: &Path, shape: &[u64], data: &[T]) {
    let file = BufWriter::new(File::create(path).unwrap());
    let mut w =
        npyz::WriteOptions::new().default_dtype().shape(shape).writer(file).begin_nd().unwrap();
    w.extend(data.iter().cloned()).unwrap();
    w.finish().unwrap();
}

fn read_npy_f32(path: &Path) -> (Vec<u64>, String, Vec<f32>) {
    let npy = npyz::NpyFile::new(std::io::BufReader::new(File::open(path).unwrap())).unwrap();
    let shape = npy.shape().to_vec();
    let dtype = match npy.dtype() {
        npyz::DType::Plain(ts) => ts.to_string(),
        other => format!("{other:?}"),
    };
    (shape, dtype, npy.into_vec::<f32>().unwrap())
}

fn examples() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(root().join("examples"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "kir"))
        .collect();
    v.sort();
    assert!(v.len() >= 4, "examples/*.kir: {v:?}");
    v
}

/// Deterministic awkward f32 inputs: fractions, negatives, large and tiny magnitudes.
fn inputs(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            let mantissa = (s >> 8) as f32 / (1u32 << 24) as f32 - 0.5;
            let exp = ((s & 0xff) % 24) as i32 - 12;
            mantissa * 2f32.powi(exp)
        })
        .collect()
}

#[test]
fn saxpy_matches_an_independent_computation() {
    let dir = scratch("saxpy");
    let (len, n, a) = (64usize, 50usize, -1.7f32);
    let x = inputs(len, 1);
    let y = inputs(len, 2);
    write_npy(&dir.join("x.npy"), &[len as u64], &x);
    write_npy(&dir.join("y.npy"), &[len as u64], &y);
    let out_path = dir.join("out.npy");
    let o = kiln(&[
        "run".to_string(),
        "examples/saxpy.kir".into(),
        "--global".into(),
        len.to_string(),
        "--arg".into(),
        format!("x=@{}", dir.join("x.npy").display()),
        "--arg".into(),
        format!("y=@{}", dir.join("y.npy").display()),
        "--arg".into(),
        format!("a={a}"),
        "--arg".into(),
        format!("n={n}"),
        "--out".into(),
        format!("y={}", out_path.display()),
    ]);
    assert_ok(&o);
    assert_eq!(stdout(&o), "", "with --out nothing is printed");
    let (shape, dtype, got) = read_npy_f32(&out_path);
    assert_eq!(shape, [len as u64]);
    assert_eq!(dtype, "<f4");
    for i in 0..len {
        // One multiply and one add, each rounded to f32: IEEE makes this exact and portable.
        let want = if i < n { a * x[i] + y[i] } else { y[i] };
        assert_eq!(got[i].to_bits(), want.to_bits(), "y[{i}]: got {} want {want}", got[i]);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn saxpy_prints_buffers_without_out() {
    let o = kiln(&[
        "run",
        "examples/saxpy.kir",
        "--global",
        "8",
        "--arg",
        "x=iota:8",
        "--arg",
        "y=zeros:8",
        "--arg",
        "a=2.0",
        "--arg",
        "n=8",
    ]);
    assert_ok(&o);
    assert_eq!(
        stdout(&o),
        "x: f32[8] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]\n\
         y: f32[8] = [0.0, 2.0, 4.0, 6.0, 8.0, 10.0, 12.0, 14.0]\n"
    );
}

#[test]
fn multi_dimensional_npy_is_flattened_in_c_order() {
    let dir = scratch("flatten");
    let x: Vec<f32> = (0..8).map(|v| v as f32).collect();
    write_npy(&dir.join("x.npy"), &[2, 4], &x);
    let o = kiln(&[
        "run".to_string(),
        "examples/saxpy.kir".into(),
        "--global=8".into(),
        format!("--arg=x=@{}", dir.join("x.npy").display()),
        "--arg=y=zeros:8".into(),
        "--arg=a=1".into(),
        "--arg=n=8".into(),
    ]);
    assert_ok(&o);
    assert!(stdout(&o).contains("y: f32[8] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]"));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_example_checks() {
    let o = kiln(&[&[PathBuf::from("check")], &examples()[..]].concat());
    assert_ok(&o);
    assert_eq!(stdout(&o), "", "check prints nothing on success");
    let o = kiln(&["check", "--verbose", "examples/saxpy.kir"]);
    assert_ok(&o);
    assert_eq!(
        stdout(&o),
        "examples/saxpy.kir: ok\n  saxpy(x: ptr<global, f32>, y: ptr<global, f32>, a: f32, n: u32)\n"
    );
}

#[test]
fn every_example_is_formatted() {
    let o = kiln(&[&[PathBuf::from("fmt"), PathBuf::from("--check")], &examples()[..]].concat());
    assert_ok(&o);
    let saxpy = root().join("examples/saxpy.kir");
    let o = kiln(&[Path::new("fmt"), saxpy.as_path()]);
    assert_ok(&o);
    assert_eq!(stdout(&o), std::fs::read_to_string(saxpy).unwrap());
}

#[test]
fn every_example_runs() {
    for args in [
        &[
            "examples/stencil2d.kir",
            "--global",
            "8,6",
            "--arg",
            "src=iota:48",
            "--arg",
            "dst=zeros:48",
            "--arg",
            "w=8",
            "--arg",
            "h=6",
        ][..],
        &[
            "examples/reduce.kir",
            "--global",
            "256",
            "--arg",
            "x=iota:256",
            "--arg",
            "partial=zeros:4",
            "--arg",
            "n=256",
        ][..],
        &[
            "examples/divergent.kir",
            "--global",
            "16",
            "--arg",
            "data=iota:16",
            "--arg",
            "steps=zeros:16",
            "--arg",
            "kind=zeros:16",
            "--arg",
            "n=16",
        ][..],
    ] {
        let o = kiln(&[&["run"][..], args].concat());
        assert_ok(&o);
    }
    let o = kiln(&[
        "run",
        "examples/reduce.kir",
        "--global",
        "256",
        "--arg",
        "x=iota:256",
        "--arg",
        "partial=zeros:4",
        "--arg",
        "n=256",
    ]);
    assert!(stdout(&o).contains("partial: f32[4] = [2016.0, 6112.0, 10208.0, 14304.0]"));
    let o = kiln(&[
        "run",
        "examples/divergent.kir",
        "--global",
        "16",
        "--arg",
        "data=iota:16",
        "--arg",
        "steps=zeros:16",
        "--arg",
        "kind=zeros:16",
        "--arg",
        "n=16",
    ]);
    let out = stdout(&o);
    assert!(out.contains("steps: u32[16] = [0, 0, 1, 7, 2, 5, 8, 16, 3, 19, 6, 14, 9, 9, 17, 17]"));
    assert!(out
        .contains("kind: i32[16] = [0, -1, -2, 3, -1, -1, 1, 103, -1, 0, -2, 103, 0, -1, 101, 3]"));
}

// ---- errors in files ----

#[test]
fn check_reports_located_errors() {
    let dir = scratch("check-errors");
    let bad = dir.join("bad.kir");
    std::fs::write(
        &bad,
        "kernel k(n: u32) {\n  let i: u32 = global_id(0);\n  let j: u32 = i + ;\n}\n",
    )
    .unwrap();
    let o = kiln(&[Path::new("check"), bad.as_path()]);
    assert_fails(&o, 1, &["error:", "bad.kir:3:", "let j: u32 = i + ;", "^"]);
    let o = kiln(&["check", "no/such/file.kir"]);
    assert_fails(&o, 1, &["kiln: error: cannot read `no/such/file.kir`"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fmt_check_names_unformatted_files() {
    let dir = scratch("fmt-check");
    let messy = dir.join("messy.kir");
    let src = std::fs::read_to_string(root().join("examples/saxpy.kir")).unwrap();
    std::fs::write(&messy, src.replace("  ", "      ")).unwrap();
    let o = kiln(&[Path::new("fmt"), Path::new("--check"), messy.as_path()]);
    assert_fails(&o, 1, &["messy.kir", "is not formatted"]);
    let o = kiln(&[Path::new("fmt"), Path::new("--write"), messy.as_path()]);
    assert_ok(&o);
    assert_eq!(std::fs::read_to_string(&messy).unwrap(), src);
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- errors in `kiln run` ----

/// `kiln run examples/saxpy.kir --global 8` plus `extra`, with defaults for the --args that
/// `extra` does not mention.
fn saxpy_with(extra: &[&str]) -> Output {
    let mut args: Vec<String> =
        ["run", "examples/saxpy.kir", "--global", "8"].map(String::from).to_vec();
    let mentions = |name: &str| {
        extra.windows(2).any(|w| w[0] == "--arg" && w[1].starts_with(&format!("{name}=")))
    };
    for (name, value) in [("x", "iota:8"), ("y", "zeros:8"), ("a", "2.0"), ("n", "8")] {
        if !mentions(name) {
            args.push("--arg".into());
            args.push(format!("{name}={value}"));
        }
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    kiln(&args)
}

#[test]
fn run_rejects_bad_kernels_and_args() {
    let o = saxpy_with(&["--kernel", "nope"]);
    assert_fails(&o, 1, &["kiln: error:", "no kernel named `nope`", "saxpy"]);

    let o = kiln(&["run", "examples/saxpy.kir", "--global", "8", "--arg", "x=iota:8"]);
    assert_fails(&o, 1, &["missing --arg", "y: ptr<global, f32>", "a: f32", "n: u32"]);

    let mut args = vec!["run", "examples/saxpy.kir", "--global", "8", "--arg", "x=iota:8"];
    args.extend(["--arg", "y=zeros:8", "--arg", "a=2.0", "--arg", "n=8", "--arg", "a=3.0"]);
    assert_fails(&kiln(&args), 1, &["`a` is given twice"]);

    let o = saxpy_with(&["--arg", "z=1"]);
    assert_fails(&o, 1, &["no parameter `z`"]);

    let o = saxpy_with(&["--arg", "a=abc"]);
    assert_fails(&o, 1, &["a=abc", "not a valid f32"]);

    let o = saxpy_with(&["--arg", "n=-1"]);
    assert_fails(&o, 1, &["n=-1", "u32"]);

    let o = saxpy_with(&["--arg", "n=5u8"]);
    assert_fails(&o, 1, &["suffix `u8`", "u32"]);

    let o = saxpy_with(&["--arg", "x=1.5"]);
    assert_fails(&o, 1, &["`x` is a pointer", "@FILE.npy"]);

    let o = saxpy_with(&["--arg", "a=zeros:8"]);
    assert_fails(&o, 1, &["`a` is a scalar"]);

    // A malformed buffer form is a malformed command line (exit code 2).
    let o = saxpy_with(&["--arg", "x=iota:x"]);
    assert_fails(&o, 2, &["iota:x"]);

    let o = saxpy_with(&["--out", "a=a.npy"]);
    assert_fails(&o, 1, &["--out a=a.npy", "`a` is a scalar"]);

    let o = saxpy_with(&["--out", "q=q.npy"]);
    assert_fails(&o, 1, &["no parameter `q`"]);
}

#[test]
fn run_rejects_bad_npy_files() {
    let dir = scratch("npy-errors");
    let f64s = dir.join("f64.npy");
    write_npy(&f64s, &[8], &[0.5f64; 8]);
    let o = saxpy_with(&["--arg", &format!("x=@{}", f64s.display())]);
    assert_fails(&o, 1, &["f64.npy", "float64", "float32"]);

    let scalar = dir.join("scalar.npy");
    write_npy(&scalar, &[], &[1.0f32]);
    let o = saxpy_with(&["--arg", &format!("x=@{}", scalar.display())]);
    assert_fails(&o, 1, &["scalar.npy", "0-d"]);

    let missing = dir.join("missing.npy");
    let o = saxpy_with(&["--arg", &format!("x=@{}", missing.display())]);
    assert_fails(&o, 1, &["missing.npy", "cannot open"]);

    let junk = dir.join("junk.npy");
    std::fs::write(&junk, "x,y\n1,2\n").unwrap();
    let o = saxpy_with(&["--arg", &format!("x=@{}", junk.display())]);
    assert_fails(&o, 1, &["junk.npy", "not a valid .npy"]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_needs_a_kernel_name_when_there_are_several() {
    let dir = scratch("two-kernels");
    let two = dir.join("two.kir");
    let saxpy = std::fs::read_to_string(root().join("examples/saxpy.kir")).unwrap();
    std::fs::write(&two, format!("{saxpy}\n{}", saxpy.replace("kernel saxpy", "kernel saxpy2")))
        .unwrap();
    let run = |extra: &[&str]| {
        let mut args: Vec<String> = vec!["run".into(), two.display().to_string()];
        args.extend(
            [
                "--global",
                "8",
                "--arg",
                "x=iota:8",
                "--arg",
                "y=zeros:8",
                "--arg",
                "a=1",
                "--arg",
                "n=8",
            ]
            .map(String::from),
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        kiln(&args)
    };
    assert_fails(&run(&[]), 1, &["several kernels", "saxpy, saxpy2", "--kernel"]);
    assert_ok(&run(&["--kernel", "saxpy2"]));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_rejects_bad_size_lists_and_devices() {
    // Malformed size lists are usage errors (exit code 2).
    let o = saxpy_with(&["--local", "8,,2"]);
    assert_fails(&o, 2, &["--local", "empty size"]);
    let o = kiln(&["run", "examples/saxpy.kir", "--global", "1,2,3,4"]);
    assert_fails(&o, 2, &["--global", "1 to 3"]);
    let o = kiln(&["run", "examples/saxpy.kir", "--global", "x"]);
    assert_fails(&o, 2, &["--global", "`x` is not a size"]);
    let o = kiln(&["run", "examples/saxpy.kir", "--arg", "a=1"]);
    assert_fails(&o, 2, &["--global"]);
    let o = kiln(&["run", "examples/saxpy.kir", "--global", "8", "--arg", "a"]);
    assert_fails(&o, 2, &["NAME=VALUE"]);

    // A device that opens here gives the interpreter's output; one that does not (CI has no
    // CUDA driver) makes `kiln run` fail with exactly the reason opening it gives, and the
    // device is skipped by the one skip rule (an error when KILN_REQUIRE_TOOLS, or for CUDA
    // KILN_REQUIRE_CUDA, says it must be there). The cpu device opens on every x86-64 host.
    let reference = saxpy_with(&["--device", "interp"]);
    assert_ok(&reference);
    for (device, require) in [
        ("cpu", "KILN_REQUIRE_TOOLS"),
        ("vulkan", "KILN_REQUIRE_TOOLS"),
        ("cuda", "KILN_REQUIRE_CUDA"),
    ] {
        let o = saxpy_with(&["--device", device]);
        let opened = kiln::runtime::device::registry::open(device, &Default::default());
        if let Err(e) = &opened {
            assert_fails(&o, 1, &[&format!("kiln: error: {e}")]);
        }
        if device == "cpu" && cfg!(target_arch = "x86_64") {
            assert!(opened.is_ok(), "the cpu device does not open on an x86-64 host");
        }
        if kiln_ir::testing::optional(require, opened).is_some() {
            assert_ok(&o);
            assert_eq!(stdout(&o), stdout(&reference), "{device} differs from the interpreter");
        }
    }
    let o = saxpy_with(&["--device", "abacus"]);
    assert_fails(&o, 2, &["unknown device `abacus`"]);
}

#[test]
fn run_rejects_bad_ranges() {
    let o = saxpy_with(&["--local", "4,1"]);
    assert_fails(&o, 1, &["--local has 2 dimensions but --global has 1"]);
    let o = saxpy_with(&["--local", "3"]);
    assert_fails(&o, 1, &["not a multiple"]);
    let o = saxpy_with(&["--offset", "1,1"]);
    assert_fails(&o, 1, &["--offset has 2 dimensions"]);
}

#[test]
fn run_reports_interpreter_errors() {
    // n = 8 but y has 4 elements: work-item 4 stores out of bounds.
    let o = saxpy_with(&["--arg", "y=zeros:4"]);
    assert_fails(&o, 1, &["kiln: error:", "saxpy"]);
}

#[test]
fn run_on_cpu_quotes_the_source_of_a_failing_division() {
    // `-O` (the cpu device's default) binds `x[i]` and `a[(i + 1) % 8]` to `let`s: the error
    // still quotes the division as written, as the interpreter does (issue 29 U1).
    let dir = scratch("division-source");
    let k = dir.join("k.kir");
    std::fs::write(
        &k,
        "kernel k(x: ptr<global, i32>, a: ptr<global, i32>, o: ptr<global, i32>) {
           let i: u32 = global_id(0);
           o[i] = x[i] / a[(i + 1) % 8] + x[i] * a[(i + 1) % 8];
         }",
    )
    .unwrap();
    let want = "kiln: error: kernel `k`, work-item (0, 0, 0): integer division by zero in \
                `x[i] / a[(i + 1) % 8]`\n";
    for device in ["interp", "cpu"] {
        let o = kiln(&[
            "run".as_ref(),
            k.as_os_str(),
            "--device".as_ref(),
            device.as_ref(),
            "--global".as_ref(),
            "8".as_ref(),
            "--arg".as_ref(),
            "x=iota:8".as_ref(),
            "--arg".as_ref(),
            "a=zeros:8".as_ref(),
            "--arg".as_ref(),
            "o=zeros:8".as_ref(),
        ] as &[&std::ffi::OsStr]);
        assert_eq!(o.status.code(), Some(1), "{device}: {}", stderr(&o));
        assert_eq!(stderr(&o), want, "{device}");
    }
}

#[test]
fn usage() {
    let o = kiln(&["--help"]);
    assert_ok(&o);
    for cmd in ["check", "fmt", "run"] {
        assert!(stdout(&o).contains(cmd), "{}", stdout(&o));
    }
    let o = kiln(&["run", "--help"]);
    assert_ok(&o);
    for needle in ["zeros:N", "iota:N", "@PATH.npy", "--out", "--device", "Fortran"] {
        assert!(stdout(&o).contains(needle), "run --help lacks {needle}");
    }
    let o = kiln(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn emit_ptx() {
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "ptx"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains(".target sm_90") && text.contains(".visible .entry saxpy("), "{text}");
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "ptx", "--sm", "80"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains(".target sm_80"));
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "ptx", "--ptx-version", "8.0"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains(".version 8.0"));
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "gcn"]);
    assert_fails(&o, 2, &["unknown target `gcn`"]);
}

#[test]
fn emit_check_bounds_emits_the_sanitized_kernels() {
    // Every target gets the checks: the error buffer's compare-and-swap appears only with
    // --check-bounds.
    for (target, cas) in [("ptx", "atom.global.cas.b32"), ("amdgpu", "global_atomic_cmpswap")] {
        let plain = kiln(&["emit", "examples/saxpy.kir", "--target", target]);
        assert_ok(&plain);
        assert!(!stdout(&plain).contains(cas), "{}", stdout(&plain));
        let checked = kiln(&["emit", "examples/saxpy.kir", "--target", target, "--check-bounds"]);
        assert_ok(&checked);
        assert!(stdout(&checked).contains(cas), "{target}: {}", stdout(&checked));
    }
    let o =
        kiln(&["emit", "examples/saxpy.kir", "--target", "spirv-vk", "--text", "--check-bounds"]);
    assert_ok(&o);
    assert!(stdout(&o).contains("OpAtomicCompareExchange"), "{}", stdout(&o));
}

#[test]
fn emit_text_targets_cover_every_kernel() {
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "ptx"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let ptx = String::from_utf8_lossy(&o.stdout);
    assert!(ptx.contains(".entry saxpy") && ptx.contains(".target sm_90"), "{ptx}");
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "amdgpu"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let asm = String::from_utf8_lossy(&o.stdout);
    assert!(asm.contains("s_endpgm") && asm.contains(".amdhsa_kernel saxpy"), "{asm}");
    let o = kiln(&["emit", "examples/saxpy.kir", "--target", "x87"]);
    assert_fails(&o, 2, &["unknown target `x87`", "ptx, spirv-cl, spirv-vk, amdgpu"]);
}

/// `--time --repeat N` times the build and N launches (each sees the previous one's writes:
/// saxpy five times adds 2x five times) and prints the numbers to stderr, not stdout.
#[test]
fn run_time_and_repeat() {
    let o = kiln(&[
        "run",
        "examples/saxpy.kir",
        "--global",
        "4",
        "--arg",
        "x=iota:4",
        "--arg",
        "y=zeros:4",
        "--arg",
        "a=2.0",
        "--arg",
        "n=4",
        "--time",
        "--repeat",
        "5",
    ]);
    assert_ok(&o);
    assert!(stdout(&o).contains("y: f32[4] = [0.0, 10.0, 20.0, 30.0]"), "{}", stdout(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    let line =
        err.lines().find(|l| l.starts_with("kiln: build ")).unwrap_or_else(|| panic!("{err}"));
    assert!(line.contains("; 5 launches: median ") && line.ends_with(" ms"), "{line}");
    let o = kiln(&["run", "examples/saxpy.kir", "--global", "4", "--repeat", "0"]);
    assert_fails(&o, 2, &["--repeat"]);
}

/// `--target kir` prints the kernels as the interpreter runs them (canonical, so `kiln fmt
/// --check` accepts it); `-O` runs the devices' optimizer first, through the same driver.
#[test]
fn emit_kir_with_and_without_the_optimizer() {
    let dir = scratch("emit-kir");
    let src = "kernel k(x: ptr<global, u32>) {\n  let i: u32 = global_id(0);\n  x[i] = 2 + 3;\n}\n";
    let file = dir.join("k.kir");
    std::fs::write(&file, src).unwrap();
    let o = kiln(&["emit", file.to_str().unwrap(), "--target", "kir"]);
    assert_ok(&o);
    assert_eq!(stdout(&o), src);
    let o = kiln(&["emit", file.to_str().unwrap(), "--target", "kir", "-O"]);
    assert_ok(&o);
    let optimized = stdout(&o);
    assert!(optimized.contains("= 5") && !optimized.contains("2 + 3"), "{optimized}");
    let out = dir.join("k_opt.kir");
    std::fs::write(&out, optimized.as_bytes()).unwrap();
    assert_ok(&kiln(&["fmt", "--check", out.to_str().unwrap()]));
}

#[test]
fn fuse_then_run_matches_the_unfused_chain() {
    let dir = scratch("fuse");
    let fused = dir.join("chain_fused.kir");
    let o = kiln(&[
        "fuse",
        "examples/fusion/chain.kir",
        "--spec",
        "examples/fusion/chain.toml",
        "-o",
        fused.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = std::fs::read_to_string(&fused).unwrap();
    assert!(text.contains("#nd_range(global = [64]") && text.contains("promoted(private, 1)"));
    // `kiln run` takes the nd-range the fused kernel records.
    let out = dir.join("out.npy");
    let o = kiln(&[
        "run",
        fused.to_str().unwrap(),
        "--arg",
        "add_a=iota:64",
        "--arg",
        "add_b=iota:64",
        "--arg",
        "mul_c=iota:64",
        "--arg",
        "sub_out=zeros:64",
        "--out",
        &format!("sub_out={}", out.display()),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let got: Vec<f32> = npyz::NpyFile::new(File::open(&out).unwrap()).unwrap().into_vec().unwrap();
    let want: Vec<f32> = (0..64).map(|i| ((i + i) * i - i) as f32).collect();
    assert_eq!(got, want);

    let o = kiln(&["fuse", "examples/fusion/chain.kir", "--spec", "/nonexistent.toml"]);
    assert_fails(&o, 1, &["nonexistent.toml"]);
}

/// Issue 13: `kiln fuse` output is canonical (`kiln fmt --check` accepts it; it used to end in
/// an extra blank line) for every example spec, and `kiln fuse --help` points to the spec docs.
#[test]
fn fuse_output_passes_fmt_check() {
    let dir = scratch("fuse-fmt");
    for example in ["chain", "scale", "neighbour"] {
        let out = dir.join(format!("{example}_fused.kir"));
        let o = kiln(&[
            "fuse",
            &format!("examples/fusion/{example}.kir"),
            "--spec",
            &format!("examples/fusion/{example}.toml"),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_ok(&o);
        assert_ok(&kiln(&["fmt", "--check", out.to_str().unwrap()]));
        // Standard output is the same canonical text.
        let o = kiln(&[
            "fuse",
            &format!("examples/fusion/{example}.kir"),
            "--spec",
            &format!("examples/fusion/{example}.toml"),
        ]);
        assert_eq!(stdout(&o), std::fs::read_to_string(&out).unwrap());
    }
    let o = kiln(&["fuse", "--help"]);
    assert_ok(&o);
    assert!(stdout(&o).contains("see docs/fusion.md"), "{}", stdout(&o));
    assert!(root().join("docs/fusion.md").is_file());
}

/// Issue 29 (W1): signalling NaNs from a `.npy` file and from `--arg` were quieted on a plain
/// copy by the interpreter (f32 0x7f800001 became 0x7fc00001). Every device copies every bit
/// into `--out`, and the printed values read back as the same bits.
#[test]
fn run_copies_nan_payloads_bit_for_bit() {
    let dir = scratch("nan-bits");
    let kir = dir.join("copy.kir");
    std::fs::write(
        &kir,
        "kernel copy(x: ptr<global, f32>, y: ptr<global, f32>, s: f32) {
  let i: u32 = global_id(0);
  y[2u32 * i] = x[i];
  y[2u32 * i + 1u32] = i == 0u32 ? s : x[i];
}
",
    )
    .unwrap();
    let x_bits = [0x7f80_0001u32, 0x7fbf_ffff];
    let x: Vec<f32> = x_bits.iter().map(|&b| f32::from_bits(b)).collect();
    write_npy(&dir.join("x.npy"), &[2], &x);
    let want = [0x7f80_0001u32, 0x7fa0_0005, 0x7fbf_ffff, 0x7fbf_ffff];
    for device in ["interp", "cpu"] {
        let out = dir.join(format!("y-{device}.npy"));
        let run = |extra: &[String]| {
            let mut args = vec![
                "run".to_string(),
                kir.display().to_string(),
                "--device".into(),
                device.into(),
                "--global".into(),
                "2".into(),
                "--arg".into(),
                format!("x=@{}", dir.join("x.npy").display()),
                "--arg".into(),
                "y=zeros:4".into(),
                "--arg".into(),
                "s=nanf32(0x7fa00005)".into(),
            ];
            args.extend_from_slice(extra);
            kiln(&args)
        };
        let o = run(&["--out".into(), format!("y={}", out.display())]);
        assert_ok(&o);
        let (_, _, got) = read_npy_f32(&out);
        let got: Vec<u32> = got.iter().map(|v| v.to_bits()).collect();
        assert_eq!(got, want, "{device}: --out");
        let o = run(&[]);
        assert_ok(&o);
        let shown = stdout(&o);
        assert!(
            shown.contains(
                "y: f32[4] = [nanf32(0x7f800001), nanf32(0x7fa00005), nanf32(0x7fbfffff), \
                 nanf32(0x7fbfffff)]"
            ),
            "{device}: {shown}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A `kiln fuse` spec may name entries by kernel and parameters by name: the same fused
/// kernel as the positional spec; an unknown or ambiguous name is refused, naming it.
#[test]
fn fuse_spec_by_names_matches_the_positional_spec() {
    let dir = scratch("fuse-names");
    let fuse = |spec: &str| {
        let file = dir.join("spec.toml");
        std::fs::write(&file, spec).unwrap();
        kiln(&["fuse", "examples/fusion/chain.kir", "--spec", file.to_str().unwrap()])
    };
    let positional = std::fs::read_to_string("examples/fusion/chain.toml").unwrap();
    let named = positional
        .replace(
            "identical = [[[0, 2], [1, 0]], [[1, 2], [2, 0]], [[0, 0], [2, 1]]]",
            "identical = [[[\"add\", \"t1\"], [\"mul\", \"t1\"]], [[1, \"t2\"], [\"sub\", \"t2\"]], \
             [[\"add\", \"a\"], [2, \"a\"]]]",
        )
        .replace("{ entry = 0, param = 2,", "{ entry = \"add\", param = \"t1\",");
    assert_ne!(named, positional, "the spec was rewritten");
    let (a, b) = (fuse(&positional), fuse(&named));
    assert_ok(&a);
    assert_ok(&b);
    assert_eq!(stdout(&a), stdout(&b));
    let o = fuse(&named.replace("[\"sub\", \"t2\"]", "[\"sub\", \"t9\"]"));
    assert_fails(&o, 1, &["kernel `sub` (entry 2) has no parameter `t9`"]);
    let o = fuse(&named.replace("[\"mul\", \"t1\"]", "[\"div\", \"t1\"]"));
    assert_fails(&o, 1, &["kernel `div` is not in the list (kernels: add, mul, sub)"]);
}
