//! `kiln run`: bind command-line values to a kernel's parameters and run it.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use kiln::ir::launch::{self, Arg, NdRange};
use kiln::ir::{check_source, Imm, Kernel, Module, Scalar, Type, Verified};
use kiln::passes::sanitize::SANITIZE_BOUNDS;
use kiln::runtime::device::registry::{DeviceInfo, OpenOptions};
use kiln::runtime::{AccessMode, Accessor, AnyBuffer};
use kiln::Jit;

use super::buffers::{contents, new_buffer};
use super::device::{abandon_wait, DeviceArgs};
use super::value::{self, BufferInit};
use super::{file_name, npy, read_source, Error};

pub const AFTER_HELP: &str = "\
Kernel arguments:
  Every kernel parameter gets exactly one --arg NAME=VALUE. VALUE is
    a scalar literal, for scalar parameters, parsed as the parameter's type:
        integers: 42, -7, 0xff, 0b101, 1_000, optionally suffixed (5u32); decimal values must
                  fit the type, hex/octal/binary ones may also be a bit pattern (0xffffffff
                  is -1 as i32)
        floats:   1.5, -2, 1e-3, inf, NaN, optionally suffixed (1.5f32), rounded to nearest;
                  a finite value too large for the type (1e40 as f32) is an error, as in .kir
        bool:     true, false
    for pointer parameters, a buffer of the pointer's element type:
        @PATH.npy a NumPy array whose dtype is exactly the element type (float32 for f32,
                  int32 for i32, bool, float16 for f16, ...; either byte order). Arrays of
                  any shape are flattened in C (row-major) order; 0-d arrays and
                  Fortran-ordered arrays are refused.
        zeros:N   N zero elements
        iota:N    the elements 0, 1, ..., N-1 (it is an error if N-1 does not fit an
                  integer element type)
  Each --arg makes its own buffer, even when two name the same file.

Nd-range:
  --global is the number of work-items per dimension (1 to 3 dimensions, dimension 0 varies
  fastest). --local (the work-group size) and --offset must have as many dimensions as
  --global; the global size must be a multiple of the local size. Without --local, a kernel's
  #reqd_work_group_size is used, else the interpreter chooses.

Output:
  Without --out, the final contents of every pointer parameter's buffer are printed to
  stdout, one line each: `NAME: TYPE[LEN] = [v0, v1, ...]`; buffers of more than 16
  elements show the first 8 and the last 4 (--full prints all). With one or more
  --out NAME=PATH.npy, those buffers are written as 1-D .npy arrays of the element's dtype
  and nothing is printed.

Program cache:
  The kernel is built through the runtime's program cache. With KILN_CACHE_PERSISTENT=1 the
  built program is also stored on disk (KILN_CACHE_DIR, default $XDG_CACHE_HOME/kiln, else
  ~/.cache/kiln; see `kiln cache`), and later runs load it. KILN_PROGRAM_BUILD_OPTIONS is part
  of the cache key; on every device but the interpreter, `-O0` builds without the -O pipeline.
  `kiln --help` lists every variable.

Devices:
  Without --device, kernels run on `cpu` (this host's CPU through the x86-64 JIT) on x86-64
  hosts, else on `interp`; --device interp runs the reference interpreter, the oracle every
  other device is tested against. --max-steps without --device runs on `interp`.

Limits:
  --timeout SECS (every device) stops a kernel that runs too long: the cpu device and the
  interpreter stop it and name the work-item. --max-steps N counts interpreter statements,
  which only the interpreter can do (it selects `interp` when no --device is given, and is
  refused with any other device). Without either, a kernel that never finishes makes
  `kiln run` wait forever.

Bounds checks:
  --check-bounds (the build option -fsanitize=bounds, also accepted in
  KILN_PROGRAM_BUILD_OPTIONS) makes vulkan and cuda check every access and loop and fail
  with the interpreter's message for the first out-of-bounds access, e.g. `kernel `reduce`,
  work-item (128, 0, 0): store `partial[2]` out of bounds (buffer has 2 elements)`, or for
  a loop the driver stopped early. The interpreter and the cpu device always check. See
  docs/sanitize.md.

Exit status: 0 on success; 1 for an error in the file, the values or the run (messages on
stderr, `kiln: error: ...`); 2 for a malformed command line.

Example:
  kiln run examples/saxpy.kir --global 8 --arg x=iota:8 --arg y=zeros:8 --arg a=2.0 --arg n=8";

/// A size list `X[,Y[,Z]]`.
#[derive(Clone, Debug)]
pub struct Sizes(Vec<u32>);

fn sizes(text: &str) -> Result<Sizes, String> {
    value::parse_sizes(text).map(Sizes)
}

#[derive(Args, Debug)]
pub struct RunArgs {
    /// The .kir file.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The kernel to run; needed only when the file has several.
    #[arg(short, long, value_name = "NAME")]
    kernel: Option<String>,
    /// Global size: work-items per dimension, 1 to 3 dimensions. Defaults to the kernel's
    /// `#nd_range` attribute (with its local size and offset), as recorded by `kiln fuse`.
    #[arg(long, value_name = "X[,Y[,Z]]", value_parser = sizes)]
    global: Option<Sizes>,
    /// Work-group size, as many dimensions as --global.
    #[arg(long, value_name = "X[,Y[,Z]]", value_parser = sizes)]
    local: Option<Sizes>,
    /// Global offset, as many dimensions as --global.
    #[arg(long, value_name = "X[,Y[,Z]]", value_parser = sizes)]
    offset: Option<Sizes>,
    #[command(flatten)]
    device: DeviceArgs,
    /// A kernel argument; one for every parameter (VALUE forms are listed below).
    #[arg(long = "arg", value_name = "NAME=VALUE", value_parser = arg_binding)]
    args: Vec<(String, String)>,
    /// Write the final contents of pointer parameter NAME to a .npy file.
    #[arg(long = "out", value_name = "NAME=PATH.npy", value_parser = value::parse_binding)]
    outs: Vec<(String, String)>,
    /// Print every element of each buffer, not a summary.
    #[arg(long)]
    full: bool,
    /// Check every load, store and atomic against its buffer's or array's length, and
    /// loops against being cut short by the driver (build option `-fsanitize=bounds`); the
    /// first violation fails the run with the interpreter's message for it.
    #[arg(long)]
    check_bounds: bool,
    /// Print to stderr how long the build took and the median and minimum time of the
    /// launches (with --repeat N, N launches; each sees the previous one's writes, and the
    /// buffers printed or written are those after the last).
    #[arg(long)]
    time: bool,
    /// Launch the kernel N times (N >= 1; default 1).
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    repeat: u32,
}

/// An `--arg`: NAME=VALUE, where a buffer form (`zeros:N`, `iota:N`, `@PATH`) must be well
/// formed; a malformed one is a usage error (exit code 2). Whether VALUE fits the parameter
/// is checked once the kernel is known (exit code 1).
fn arg_binding(text: &str) -> Result<(String, String), String> {
    let (name, v) = value::parse_binding(text)?;
    match value::parse_buffer_init(&v) {
        Some(Err(e)) => Err(e),
        _ => Ok((name, v)),
    }
}

pub fn main(a: &RunArgs) -> Result<(), Error> {
    let (info, limits) = a.device.resolve();
    let src = read_source(&a.file)?;
    let module = check_source(&file_name(&a.file), &src).map_err(Error::Diagnostics)?;
    let kernel = select_kernel(&module, a.kernel.as_deref(), &a.file)?;
    let range = match (&a.global, &kernel.attrs().nd_range) {
        (Some(g), _) => nd_range(kernel, g, a.local.as_ref(), a.offset.as_ref())?,
        (None, Some(r)) => {
            let local = a.local.clone().or_else(|| r.local.clone().map(Sizes));
            let offset = a.offset.clone().unwrap_or_else(|| Sizes(r.offset.clone()));
            nd_range(kernel, &Sizes(r.global.clone()), local.as_ref(), Some(&offset))?
        }
        // Still a usage error (exit code 2), as when --global was mandatory.
        (None, None) => clap::Error::raw(
            clap::error::ErrorKind::MissingRequiredArgument,
            format!(
                "the following required argument was not provided: --global <X[,Y[,Z]]> \
                 (kernel `{}` has no #nd_range attribute)\n",
                kernel.name()
            ),
        )
        .exit(),
    };
    let values = bind_args(kernel, &a.args)?;
    let outs = bind_outs(kernel, &a.outs)?;

    let mut args = Vec::new();
    let mut buffers = Vec::new();
    let mut buffer_of = vec![None; values.len()];
    for (i, v) in values.into_iter().enumerate() {
        match v {
            Value::Scalar(imm) => args.push(Arg::Scalar(imm)),
            Value::Buffer(elem, bytes) => {
                buffer_of[i] = Some(buffers.len());
                args.push(Arg::Buffer(buffers.len()));
                buffers.push(new_buffer(elem, bytes)?);
            }
        }
    }
    let options = if a.check_bounds { SANITIZE_BOUNDS } else { "" };
    let runs = Runs { limits, options, repeat: a.repeat, time: a.time };
    let buffers = run_on_device(info, &module, kernel, range, &args, buffers, runs)?;

    let params = kernel.params();
    if outs.is_empty() {
        for (i, p) in params.iter().enumerate() {
            if let (Some(b), Type::Ptr(_, elem)) = (buffer_of[i], p.ty()) {
                outln!("{}", show_buffer(p.name(), elem, contents(&buffers[b]), a.full));
            }
        }
    }
    for (i, path) in outs {
        let (Some(b), Type::Ptr(_, elem)) = (buffer_of[i], params[i].ty()) else {
            unreachable!("--out names are checked to be pointer parameters")
        };
        npy::write(&path, elem, contents(&buffers[b]))?;
    }
    Ok(())
}

/// How to run: the device's limits, the build options, how often to launch, and whether to
/// time the build and the launches.
#[derive(Clone, Copy, Debug)]
struct Runs<'a> {
    limits: OpenOptions,
    options: &'a str,
    repeat: u32,
    time: bool,
}

/// Runs `kernel` the way an application would, through the embedding API: a [`Jit`] on
/// the device builds the program through its caches (in memory; on disk too with
/// `KILN_CACHE_PERSISTENT=1`, keyed with `KILN_PROGRAM_BUILD_OPTIONS`) and launches it.
/// Returns the buffers' final contents. Messages are the compiler's and the device's own.
fn run_on_device(
    device: &DeviceInfo,
    module: &Verified,
    kernel: &Kernel,
    range: NdRange,
    args: &[Arg],
    buffers: Vec<launch::Buffer>,
    runs: Runs,
) -> Result<Vec<launch::Buffer>, Error> {
    let Runs { limits, options, .. } = runs;
    let dev = kiln::Device::open_with(device.name, &limits).map_err(message)?;
    let jit = Jit::with_config(dev, super::config()).map_err(message)?.with_options(options);
    // A device that cannot stop a launch itself is watched from the host.
    let watchdog = if device.stops_at_timeout { None } else { limits.timeout };
    let bufs: Vec<AnyBuffer> = buffers.into_iter().map(AnyBuffer::new).collect();
    // The same arguments, their buffers named by the runtime's accessors.
    let jit_args: Vec<kiln::Arg> = args
        .iter()
        .map(|a| a.clone().map_buffer(|i| Accessor::new(&bufs[i], AccessMode::ReadWrite)))
        .collect();
    // Only the chosen kernel is built (another kernel of the file that a backend cannot
    // express must not fail this run), and the module is not verified again.
    let start = Instant::now();
    let built = jit.prepare(module, kernel.name());
    let build_time = start.elapsed();
    let mut times = Vec::with_capacity(runs.repeat as usize);
    let launch_once = || -> Result<(), kiln::Error> {
        let launch = jit.launch(module, kernel.name(), range, jit_args.clone())?;
        if let Some(t) = watchdog {
            if launch.wait_timeout(t).is_none() {
                abandon_wait(&format!("kernel `{}`", kernel.name()), t, &jit.device().name());
            }
        }
        launch.wait()
    };
    let outcome = built.and_then(|()| {
        for _ in 0..runs.repeat {
            let start = Instant::now();
            launch_once()?;
            times.push(start.elapsed());
        }
        Ok(())
    });
    if runs.time && outcome.is_ok() {
        eprintln!("{}", timing_line(build_time, &mut times));
    }
    // Before the warnings are printed: storing them may warn.
    jit.context().save_driver_caches();
    if let Some(disk) = jit.context().persistent_cache() {
        for w in disk.warnings() {
            eprintln!("kiln: warning: {w}");
        }
    }
    outcome.map_err(message)?;
    bufs.iter().map(|b| b.contents().map_err(|e| Error::Message(e.to_string()))).collect()
}

/// `kiln: build B ms; N launches: median M ms, min m ms` (the launch time is from submission
/// to completion, as the host sees it).
fn timing_line(build: Duration, times: &mut [Duration]) -> String {
    times.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let median = match times.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => times[n / 2],
        n => (times[n / 2 - 1] + times[n / 2]) / 2,
    };
    let min = times.first().copied().unwrap_or_default();
    format!(
        "kiln: build {:.3} ms; {} launch{}: median {:.3} ms, min {:.3} ms",
        ms(build),
        times.len(),
        if times.len() == 1 { "" } else { "es" },
        ms(median),
        ms(min)
    )
}

/// The message of a facade error: a build or launch failure is the compiler's or the
/// device's own text (which names the backend or interpreter and the kernel).
fn message(e: kiln::Error) -> Error {
    Error::Message(match e {
        kiln::Error::Build { message, .. } | kiln::Error::Launch { message, .. } => message,
        other => other.to_string(),
    })
}

fn select_kernel<'m>(
    module: &'m Module,
    name: Option<&str>,
    file: &std::path::Path,
) -> Result<&'m Kernel, String> {
    let names = || module.kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ");
    match (name, module.kernels.len()) {
        (Some(n), _) => module.kernel(n).ok_or_else(|| {
            format!("`{}` has no kernel named `{n}` (kernels: {})", file.display(), names())
        }),
        (None, 0) => Err(format!("`{}` has no kernels", file.display())),
        (None, 1) => Ok(&module.kernels[0]),
        (None, _) => Err(format!(
            "`{}` has several kernels ({}); choose one with --kernel",
            file.display(),
            names()
        )),
    }
}

fn nd_range(
    k: &Kernel,
    global: &Sizes,
    local: Option<&Sizes>,
    offset: Option<&Sizes>,
) -> Result<NdRange, String> {
    let dims = global.0.len();
    let pad = |s: &Sizes, fill: u32| {
        let mut v = [fill; 3];
        v[..s.0.len()].copy_from_slice(&s.0);
        v
    };
    for (flag, s) in [("--local", local), ("--offset", offset)] {
        if let Some(s) = s {
            if s.0.len() != dims {
                return Err(format!(
                    "{flag} has {} dimension{} but --global has {dims}",
                    s.0.len(),
                    if s.0.len() == 1 { "" } else { "s" }
                ));
            }
        }
    }
    let g = pad(global, 1);
    if let Some(d) = global.0.iter().position(|&x| x == 0) {
        return Err(format!("--global must be positive in every dimension (dimension {d} is 0)"));
    }
    let reqd = k.attrs().reqd_work_group_size;
    let l = match (local, reqd) {
        (Some(l), reqd) => {
            let l = pad(l, 1);
            if let Some(d) = (0..dims).find(|&d| l[d] == 0) {
                return Err(format!("--local must be positive in every dimension ({d} is 0)"));
            }
            if let Some(r) = reqd.filter(|&r| r != l) {
                return Err(format!(
                    "kernel `{}` requires work-group size {} (#reqd_work_group_size) but \
                     --local gives {}",
                    k.name(),
                    join(&r),
                    join(&l)
                ));
            }
            Some(l)
        }
        (None, Some(r)) => {
            if r[dims..].iter().any(|&x| x != 1) {
                return Err(format!(
                    "kernel `{}` requires work-group size {} (#reqd_work_group_size), which has \
                     more dimensions than --global",
                    k.name(),
                    join(&r)
                ));
            }
            Some(r)
        }
        (None, None) => None,
    };
    if let Some(l) = l {
        if let Some(d) = (0..dims).find(|&d| g[d] % l[d] != 0) {
            return Err(format!(
                "global size {} is not a multiple of the work-group size {} in dimension {d}",
                g[d], l[d]
            ));
        }
    }
    let o = offset.map_or([0; 3], |o| pad(o, 0));
    Ok(NdRange { dims, global: g, local: l, offset: o })
}

fn join(v: &[u32; 3]) -> String {
    format!("{},{},{}", v[0], v[1], v[2])
}

/// A parameter's value: a scalar, or a buffer's element type and contents.
enum Value {
    Scalar(Imm),
    Buffer(Scalar, Vec<u8>),
}

/// Matches `--arg`s to parameters and parses each value; reports every problem at once.
fn bind_args(k: &Kernel, given: &[(String, String)]) -> Result<Vec<Value>, Error> {
    let params = k.params();
    let mut errors = Vec::new();
    let mut texts: Vec<Option<&str>> = vec![None; params.len()];
    for (name, text) in given {
        match params.iter().position(|p| p.name() == name) {
            None => errors.push(format!(
                "kernel `{}` has no parameter `{name}` (parameters: {})",
                k.name(),
                describe_params(k)
            )),
            Some(i) if texts[i].is_some() => errors.push(format!("--arg `{name}` is given twice")),
            Some(i) => texts[i] = Some(text),
        }
    }
    let missing: Vec<String> = params
        .iter()
        .zip(&texts)
        .filter(|(_, t)| t.is_none())
        .map(|(p, _)| format!("{}: {}", p.name(), p.ty()))
        .collect();
    if !missing.is_empty() {
        errors.push(format!(
            "missing --arg for {} of kernel `{}`: {}",
            if missing.len() == 1 { "parameter" } else { "parameters" },
            k.name(),
            missing.join(", ")
        ));
    }
    let mut values = Vec::new();
    for (p, text) in params.iter().zip(&texts) {
        let Some(text) = *text else { continue };
        match parse_value(p.name(), p.ty(), text) {
            Ok(v) => values.push(v),
            Err(e) => errors.push(format!("--arg {}={text}: {e}", p.name())),
        }
    }
    if errors.is_empty() {
        Ok(values)
    } else {
        Err(Error::Message(errors.join("\nkiln: error: ")))
    }
}

fn describe_params(k: &Kernel) -> String {
    let names: Vec<&str> = k.params().iter().map(|p| p.name()).collect();
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn parse_value(name: &str, ty: Type, text: &str) -> Result<Value, String> {
    match (ty, value::parse_buffer_init(text)) {
        (Type::Ptr(_, elem), Some(init)) => {
            let bytes = match init? {
                BufferInit::Npy(path) => npy::read(&path, elem)?,
                other => value::generated_bytes(&other, elem)?,
            };
            Ok(Value::Buffer(elem, bytes))
        }
        (Type::Ptr(..), None) => Err(format!(
            "parameter `{name}` is a pointer ({ty}): give @FILE.npy, zeros:N or iota:N"
        )),
        (Type::Scalar(s), None) => value::parse_scalar(text, s).map(Value::Scalar),
        (Type::Scalar(_), Some(_)) => {
            Err(format!("parameter `{name}` is a scalar ({ty}), not a buffer: give a {ty} literal"))
        }
        (Type::Vector(..), _) => {
            Err(format!("parameter `{name}` is a vector ({ty}); kernels take vectors in buffers"))
        }
        (Type::Frag(_), _) => Err(format!("parameter `{name}` is a fragment ({ty})")),
    }
}

/// Matches `--out`s to pointer parameters: (parameter index, path) pairs.
fn bind_outs(k: &Kernel, given: &[(String, String)]) -> Result<Vec<(usize, PathBuf)>, String> {
    let mut outs: Vec<(usize, PathBuf)> = Vec::new();
    for (name, path) in given {
        let Some(i) = k.params().iter().position(|p| p.name() == name) else {
            return Err(format!(
                "--out {name}={path}: kernel `{}` has no parameter `{name}` (parameters: {})",
                k.name(),
                describe_params(k)
            ));
        };
        let ty = k.params()[i].ty();
        if !ty.is_ptr() {
            return Err(format!(
                "--out {name}={path}: parameter `{name}` is a scalar ({ty}); only pointer \
                 parameters have contents to write"
            ));
        }
        if path.is_empty() {
            return Err(format!("--out {name}=: missing the output path"));
        }
        if outs.iter().any(|(j, _)| *j == i) {
            return Err(format!("--out `{name}` is given twice"));
        }
        outs.push((i, PathBuf::from(path)));
    }
    Ok(outs)
}

/// `name: f32[8] = [0.0, 1.0, ...]`, eliding the middle of long buffers unless `full`.
pub(super) fn show_buffer(name: &str, elem: Scalar, bytes: &[u8], full: bool) -> String {
    let n = bytes.len() / elem.size_bytes();
    let item = |i| value::format_imm(value::element(bytes, elem, i));
    let items: Vec<String> = if full || n <= 16 {
        (0..n).map(item).collect()
    } else {
        (0..8).map(item).chain(["...".to_string()]).chain((n - 4..n).map(item)).collect()
    };
    format!("{name}: {elem}[{n}] = [{}]", items.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::ir::{AddrSpace, Attrs, Stmt, Var};

    fn kernel(reqd: Option<[u32; 3]>) -> Kernel {
        let params = vec![
            Var::new("x", Type::ptr(AddrSpace::Global, Scalar::F32)),
            Var::new("a", Type::F32),
            Var::new("n", Type::U32),
        ];
        let attrs = Attrs { reqd_work_group_size: reqd, ..Attrs::default() };
        Kernel::with_attrs("k", params, attrs, Stmt::block([]))
    }

    fn s(v: &[u32]) -> Sizes {
        Sizes(v.to_vec())
    }

    #[test]
    fn ranges() {
        let k = kernel(None);
        let r = nd_range(&k, &s(&[8, 4]), Some(&s(&[4, 2])), Some(&s(&[1, 2]))).unwrap();
        assert_eq!(
            r,
            NdRange { dims: 2, global: [8, 4, 1], local: Some([4, 2, 1]), offset: [1, 2, 0] }
        );
        let r = nd_range(&k, &s(&[8]), None, None).unwrap();
        assert_eq!(r, NdRange { dims: 1, global: [8, 1, 1], local: None, offset: [0; 3] });
        for (g, l, o, msg) in [
            (vec![8], Some(vec![4, 1]), None, "--local has 2 dimensions but --global has 1"),
            (vec![8, 8], None, Some(vec![1]), "--offset has 1 dimension but --global has 2"),
            (vec![8], Some(vec![3]), None, "not a multiple"),
            (vec![0], None, None, "positive"),
            (vec![8], Some(vec![0]), None, "positive"),
        ] {
            let e = nd_range(&k, &s(&g), l.map(Sizes).as_ref(), o.map(Sizes).as_ref()).unwrap_err();
            assert!(e.contains(msg), "{e}");
        }
        let k = kernel(Some([64, 1, 1]));
        let r = nd_range(&k, &s(&[128]), None, None).unwrap();
        assert_eq!(r.local, Some([64, 1, 1]));
        let e = nd_range(&k, &s(&[128]), Some(&s(&[32])), None).unwrap_err();
        assert!(e.contains("#reqd_work_group_size"), "{e}");
        let e = nd_range(&k, &s(&[96]), None, None).unwrap_err();
        assert!(e.contains("not a multiple"), "{e}");
    }

    #[test]
    fn binding() {
        let k = kernel(None);
        let b = |args: &[(&str, &str)]| {
            let args: Vec<(String, String)> =
                args.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
            bind_args(&k, &args)
        };
        let vals = b(&[("n", "8"), ("x", "iota:4"), ("a", "2.5")]).unwrap();
        assert!(matches!(&vals[0], Value::Buffer(Scalar::F32, bytes) if bytes.len() == 16));
        assert!(matches!(vals[1], Value::Scalar(Imm::Float(Scalar::F32, v)) if v == 2.5));
        assert!(matches!(vals[2], Value::Scalar(i) if i == Imm::int(Scalar::U32, 8)));
        let err = |args: &[(&str, &str)]| match b(args) {
            Err(Error::Message(m)) => m,
            _ => panic!("{args:?} bound"),
        };
        let m = err(&[("x", "zeros:1"), ("a", "1")]);
        assert!(m.contains("missing --arg for parameter of kernel `k`: n: u32"), "{m}");
        let m = err(&[("x", "zeros:1"), ("a", "1"), ("n", "1"), ("a", "2")]);
        assert!(m.contains("`a` is given twice"), "{m}");
        let m = err(&[("x", "zeros:1"), ("a", "1"), ("n", "1"), ("q", "2")]);
        assert!(m.contains("no parameter `q`"), "{m}");
        let m = err(&[("x", "1.0"), ("a", "zeros:3"), ("n", "-1")]);
        assert!(m.contains("`x` is a pointer"), "{m}");
        assert!(m.contains("`a` is a scalar"), "{m}");
        assert!(m.contains("not a valid u32"), "{m}");
    }

    #[test]
    fn outputs() {
        let k = kernel(None);
        let o = |v: &[(&str, &str)]| {
            let v: Vec<(String, String)> =
                v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
            bind_outs(&k, &v)
        };
        assert_eq!(o(&[("x", "x.npy")]).unwrap(), [(0, PathBuf::from("x.npy"))]);
        assert!(o(&[("a", "a.npy")]).unwrap_err().contains("is a scalar"));
        assert!(o(&[("z", "a.npy")]).unwrap_err().contains("no parameter `z`"));
        assert!(o(&[("x", "1.npy"), ("x", "2.npy")]).unwrap_err().contains("twice"));
    }

    #[test]
    fn buffer_summaries() {
        let bytes: Vec<u8> = (0..20u32).flat_map(|i| (i as f32).to_le_bytes()).collect();
        let short = show_buffer("y", Scalar::F32, &bytes[..12], false);
        assert_eq!(short, "y: f32[3] = [0.0, 1.0, 2.0]");
        let long = show_buffer("y", Scalar::F32, &bytes, false);
        assert_eq!(
            long,
            "y: f32[20] = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, ..., 16.0, 17.0, 18.0, 19.0]"
        );
        assert_eq!(show_buffer("y", Scalar::F32, &bytes, true).matches(", ").count(), 19);
    }
}
