//! Building for the CUDA device: the optimized module's PTX (with the grid-dependency
//! prologue from sm_90 on), the program binary's launch blob (dynamic shared memory and
//! waits per kernel), and the driver's JIT linker turning PTX into a cubin.

use std::ffi::{c_void, CString};

use cudarc::driver::sys;
use kiln_backends::options::BuildOptions;
use kiln_backends::ptx::{Options, Ptx};
use kiln_ir::{Kernel, Verified};

use super::tmap::MapSpec;
use super::{driver, guarded, launch_err, CudaDevice};
use crate::artifact;
use crate::error::DeviceError;

/// The program binary [`CudaDevice`]'s [`Device::build`](crate::Device::build) makes for an `sm_<sm>` GPU before
/// the driver assembles it: the module built by the build driver for the PTX target, with
/// the kernels' signatures. Needs no GPU or driver (benchmarks and tools use it to build
/// what the device would).
pub fn build_ptx_program(
    module: &Verified,
    options: &BuildOptions,
    sm: u32,
) -> Result<Vec<u8>, DeviceError> {
    let (kernels, ptx, launch) = optimized_ptx(module, options, sm)?;
    Ok(artifact::encode(&kernels, &[("ptx".into(), ptx.into_bytes()), launch]))
}

/// The optimized module's kernels (signatures), its PTX, and the blob of what each kernel's
/// launch needs (see [`launch_blob`]). From sm_90 on, every kernel first waits for the grids
/// it depends on ([`with_grid_dependency`]), so that a CUDA graph may launch it early.
pub(super) fn optimized_ptx(
    module: &Verified,
    options: &BuildOptions,
    sm: u32,
) -> Result<(Vec<Kernel>, String, Blob), DeviceError> {
    let opts = Options::sm(sm);
    let built = kiln_backends::driver::build_verified(&Ptx(opts), module.clone(), options)
        .map_err(|e| DeviceError::build(format!("cuda sm_{sm}"), e))?;
    // Tensor maps are hidden parameters each launch encodes (tmap.rs); the PTX names them.
    let maps = tensor_maps(&built.output)
        .map_err(|e| DeviceError::build(format!("cuda sm_{sm}"), format!("internal error: {e}")))?;
    let waits = sm >= 90 && opts.version() >= (7, 8);
    let launch = launch_blob(&built.kernels.kernels, waits, &maps);
    let ptx = if waits { with_grid_dependency(&built.output) } else { built.output };
    Ok((built.kernels.into_module().kernels, ptx, launch))
}

/// `ptx` with every kernel starting by waiting for the grids it depends on to have finished
/// and their writes to be visible (`griddepcontrol.wait`), then letting the grids that
/// depend on it be launched (`griddepcontrol.launch_dependents`). Launched in order, as
/// eagerly, the wait returns at once; a CUDA graph's programmatic edge into such a kernel
/// lets the driver launch it while its producer still runs, and the wait keeps every read
/// after the producer's writes. Triggering only after the wait keeps at most one grid of a
/// chain waiting ahead. The instructions go first in each entry's body (PTX declares
/// registers anywhere before their use).
fn with_grid_dependency(ptx: &str) -> String {
    let mut out = String::with_capacity(ptx.len() + 128);
    let mut in_entry = false;
    for line in ptx.split_inclusive('\n') {
        out.push_str(line);
        if line.starts_with(".visible .entry ") {
            in_entry = true;
        } else if in_entry && line.trim_end() == "{" {
            out.push_str("\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n");
            in_entry = false;
        }
    }
    out
}

/// The name of the program binary's blob that says what each kernel's launch needs: one
/// line `<kernel> <bytes of dynamic shared memory> <waits: 1 or 0>` per kernel (the
/// signatures the binary keeps have no bodies to measure again at load).
pub(super) const LAUNCH_BLOB: &str = "launch";

/// A named blob of a program binary.
type Blob = (String, Vec<u8>);

/// What a kernel's launch needs, from the [`LAUNCH_BLOB`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct LaunchNeeds {
    pub(super) name: String,
    /// Bytes of dynamic shared memory (the PTX backend's window; 0: none).
    pub(super) shared: u32,
    /// Whether the kernel waits for the grids it depends on first
    /// ([`with_grid_dependency`]), so that it may be launched before they finish.
    pub(super) waits: bool,
    /// The tensor maps it takes, in hidden-parameter order.
    pub(super) maps: Vec<MapSpec>,
}

/// The tensor maps the PTX's `// kiln.tensor_map <kernel> <n> <fields>` lines name, as
/// (kernel, map) in order of `n` within each kernel.
fn tensor_maps(ptx: &str) -> Result<Vec<(String, MapSpec)>, String> {
    let mut out: Vec<(String, MapSpec)> = Vec::new();
    for l in ptx.lines() {
        let Some(rest) = l.strip_prefix("// kiln.tensor_map ") else { continue };
        let w: Vec<&str> = rest.split(' ').collect();
        let n = out.iter().filter(|(k, _)| Some(&k.as_str()) == w.first()).count();
        if w.len() < 2 || w[1] != n.to_string() {
            return Err(format!("tensor map line `{l}` out of order"));
        }
        out.push((w[0].to_string(), MapSpec::parse(&w[2..])?));
    }
    Ok(out)
}

/// The [`LAUNCH_BLOB`] of `kernels`, as the PTX backend sizes their windows: a line per
/// kernel, each followed by a line `tmap <kernel> <fields>` per tensor map it takes.
fn launch_blob(kernels: &[Kernel], waits: bool, maps: &[(String, MapSpec)]) -> Blob {
    let mut text = String::new();
    for k in kernels {
        let bytes = kiln_backends::ptx::dynamic_shared_bytes(k);
        text.push_str(&format!("{} {bytes} {}\n", k.name(), u8::from(waits)));
        for (_, m) in maps.iter().filter(|(n, _)| n == k.name()) {
            text.push_str(&format!("tmap {} {}\n", k.name(), m.fields()));
        }
    }
    (LAUNCH_BLOB.into(), text.into_bytes())
}

/// Reads a [`LAUNCH_BLOB`] back.
pub(super) fn parse_launch_blob(blob: &[u8]) -> Result<Vec<LaunchNeeds>, String> {
    let text = std::str::from_utf8(blob).map_err(|e| format!("{LAUNCH_BLOB}: {e}"))?;
    let mut out: Vec<LaunchNeeds> = Vec::new();
    for l in text.lines() {
        let bad = || format!("{LAUNCH_BLOB}: bad line `{l}`");
        let w: Vec<&str> = l.split(' ').collect();
        if let ["tmap", kernel, fields @ ..] = &w[..] {
            if fields.len() > 1 {
                let map = MapSpec::parse(fields).map_err(|e| format!("{}: {e}", bad()))?;
                match out.last_mut() {
                    Some(k) if k.name == *kernel => k.maps.push(map),
                    _ => return Err(bad()),
                }
                continue;
            }
        }
        let [name, shared, waits] = w[..] else { return Err(bad()) };
        let shared = shared.parse().map_err(|_| bad())?;
        let waits = match waits {
            "0" => false,
            "1" => true,
            _ => return Err(bad()),
        };
        out.push(LaunchNeeds { name: name.to_string(), shared, waits, maps: Vec::new() });
    }
    Ok(out)
}

/// Checks that kernel `name`, with `static_bytes` of static shared memory, may have `dynamic`
/// bytes of dynamic shared memory on a device whose work-groups may opt in to `opt_in`
/// bytes in all (`cudaDevAttrMaxSharedMemoryPerBlockOptin`).
pub(super) fn check_dynamic_shared(
    name: &str,
    dynamic: u32,
    static_bytes: u32,
    opt_in: u32,
) -> Result<(), DeviceError> {
    if u64::from(dynamic) + u64::from(static_bytes) > u64::from(opt_in) {
        return Err(launch_err(format!(
            "kernel `{name}` needs {dynamic} bytes of dynamic shared memory (and {static_bytes} \
             static), past the {opt_in} bytes a work-group of this device may use"
        )));
    }
    Ok(())
}

impl CudaDevice {
    /// Assembles `ptx` into a cubin for this device with the driver's JIT linker, so that
    /// loading the program later (from the persistent cache, in another process) loads
    /// machine code instead of assembling PTX again.
    pub(super) fn cubin(&self, ptx: &str) -> Result<Vec<u8>, DeviceError> {
        let ptx = CString::new(ptx)
            .map_err(|e| DeviceError::Driver(format!("CUDA: PTX holds a NUL byte: {e}")))?;
        guarded(|| {
            // SAFETY: the context is alive with `self`; the link state is created, used and
            // destroyed here; the PTX image is NUL-terminated and its size includes the NUL;
            // the cubin belongs to the link state, so it is copied before the state goes.
            unsafe {
                self.primary.current()?;
                let null = std::ptr::null_mut();
                let mut state: sys::CUlinkState = std::ptr::null_mut();
                sys::cuLinkCreate_v2(0, null as _, null as _, &mut state)
                    .result()
                    .map_err(driver("cuLinkCreate"))?;
                let out = (|| {
                    let bytes = ptx.as_bytes_with_nul();
                    sys::cuLinkAddData_v2(
                        state,
                        sys::CUjitInputType::CU_JIT_INPUT_PTX,
                        bytes.as_ptr() as *mut c_void,
                        bytes.len(),
                        c"kiln.ptx".as_ptr(),
                        0,
                        null as _,
                        null as _,
                    )
                    .result()
                    .map_err(driver("cuLinkAddData"))?;
                    let (mut cubin, mut size): (*mut c_void, usize) = (null, 0);
                    sys::cuLinkComplete(state, &mut cubin, &mut size)
                        .result()
                        .map_err(driver("cuLinkComplete"))?;
                    if cubin.is_null() || size == 0 {
                        return Err(DeviceError::Driver("CUDA driver: empty cubin".into()));
                    }
                    Ok(std::slice::from_raw_parts(cubin as *const u8, size).to_vec())
                })();
                let _ = sys::cuLinkDestroy(state);
                out
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 27: the dynamic shared memory a kernel needs travels in the program binary
    /// (the signatures have no bodies), and a window past the device's opt-in limit is
    /// refused naming the kernel and both sizes.
    #[test]
    fn dynamic_shared_memory_is_recorded_and_checked_against_the_opt_in_limit() {
        let m = kiln_ir::parse_module(
            "kernel big(o: ptr<global, f32>) { local t: f32[16384]; t[0] = 1.0; \
             barrier(local); o[0] = t[16383]; }\n\
             kernel small(o: ptr<global, f32>) { o[0] = 1.0; }",
        )
        .unwrap();
        let (name, blob) = launch_blob(&m.kernels, true, &[]);
        assert_eq!(name, LAUNCH_BLOB);
        let need = |name: &str, shared| LaunchNeeds {
            name: name.into(),
            shared,
            waits: true,
            maps: Vec::new(),
        };
        assert_eq!(parse_launch_blob(&blob).unwrap(), vec![need("big", 65536), need("small", 0)]);
        for bad in ["big lots 1", "big 4 2", "big 4", "big 4 1 x"] {
            assert!(parse_launch_blob(bad.as_bytes()).unwrap_err().contains("bad line"), "{bad}");
        }
        check_dynamic_shared("big", 65536, 0, 232448).unwrap();
        // An sm_80 work-group may use 163 KiB.
        let e = check_dynamic_shared("big", 160 * 1024, 4096, 163 * 1024).unwrap_err();
        let e = e.to_string();
        assert!(e.contains("`big`") && e.contains("163840") && e.contains("166912"), "{e}");
    }

    /// Issue 27: a kernel that copies with `tma_load` builds for sm_90; its tensor maps
    /// travel in the launch blob, in hidden-parameter order, and read back.
    #[test]
    fn tensor_maps_travel_in_the_launch_blob() {
        let m = Verified::new(
            kiln_ir::parse_module(
                "kernel t(a: ptr<global, bf16>, b: ptr<global, f32>, o: ptr<global, f32>) {
  local s: bf16[4096]; local f: f32[1024]; local bar: u64[1];
  if local_id(0) == 0u32 {
    mbar_init(bar, 0u32, 1u32);
    mbar_expect_tx(bar, 0u32, 12288u32);
    tma_load(s, 0u32, a, 100u32, 70u32, 104u32, 0u32, 0u32, bar, 0u32, 64, 64, sw128);
    tma_load(f, 0u32, b, 50u32, 40u32, 52u32, 0u32, 0u32, bar, 0u32, 32, 32, noswizzle);
  }
  barrier(local);
  mbar_wait(bar, 0u32, 0u32);
  o[local_id(0)] = f[local_id(0)] + s[local_id(0)] as f32;
}
kernel plain(o: ptr<global, f32>) { o[0] = 1.0; }",
            )
            .unwrap(),
        )
        .unwrap();
        let (_, _, (_, blob)) = optimized_ptx(&m, &BuildOptions::default(), 90).unwrap();
        let text = String::from_utf8(blob.clone()).unwrap();
        assert!(
            text.contains(
                "tmap t a bf16 100 70 104 64 64 sw128\ntmap t b f32 50 40 52 32 32 noswizzle\n"
            ),
            "{text}"
        );
        let needs = parse_launch_blob(&blob).unwrap();
        let t = needs.iter().find(|n| n.name == "t").unwrap();
        assert_eq!(t.maps.iter().map(|m| m.param.as_str()).collect::<Vec<_>>(), ["a", "b"]);
        assert!(needs.iter().find(|n| n.name == "plain").unwrap().maps.is_empty());
        // A map line must follow its kernel's line and hold every field.
        for bad in [
            "tmap t a bf16 1 1 8 8 8 sw128",
            "t 0 1\ntmap t a bf16 1 1 8 8 8",
            "t 0 1\ntmap u a bf16 1 1 8 8 8 sw128",
        ] {
            assert!(parse_launch_blob(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    /// Issue 25: from sm_90 on, every kernel's body starts by waiting for the grids it
    /// depends on, then releasing its dependents (what lets a CUDA graph's programmatic
    /// edges launch it early); sm_80 PTX has no such instruction. ptxas must accept it.
    #[test]
    fn sm_90_kernels_wait_for_their_prerequisite_grids_first() {
        let m = Verified::new(
            kiln_ir::parse_module(
                "kernel a(o: ptr<global, u32>) { o[global_id(0)] = 1; }\n\
                 kernel b(o: ptr<global, u32>) { let i: u32 = global_id(0); o[i] = o[i] + 1; }",
            )
            .unwrap(),
        )
        .unwrap();
        let (_, ptx, launch) = optimized_ptx(&m, &BuildOptions::default(), 90).unwrap();
        let prologue = "{\n\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n";
        assert_eq!(ptx.matches(prologue).count(), 2, "{ptx}");
        assert_eq!(ptx.matches("griddepcontrol").count(), 4, "{ptx}");
        assert!(parse_launch_blob(&launch.1).unwrap().iter().all(|l| l.waits));
        if let Some(ptxas) = kiln_ir::testing::tool("KILN_PTXAS") {
            let dir = std::env::temp_dir().join(format!("kiln_pdl_{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let (src, out) = (dir.join("k.ptx"), dir.join("k.cubin"));
            std::fs::write(&src, &ptx).unwrap();
            let run = std::process::Command::new(ptxas)
                .arg("-arch=sm_90")
                .arg(&src)
                .arg("-o")
                .arg(&out)
                .output()
                .unwrap();
            let _ = std::fs::remove_dir_all(&dir);
            let err = String::from_utf8_lossy(&run.stderr);
            assert!(run.status.success(), "ptxas: {err}\n{ptx}");
        }
        let (_, ptx, launch) = optimized_ptx(&m, &BuildOptions::default(), 80).unwrap();
        assert!(!ptx.contains("griddepcontrol"), "{ptx}");
        assert!(parse_launch_blob(&launch.1).unwrap().iter().all(|l| !l.waits));
    }
}
