//! A stand-in device with memory of its own (as CUDA and Vulkan have) that runs one kernel,
//! `inc(x: ptr<global, u32>)` (`x[i] += i + 1`), natively on host memory and records which
//! thread made each launch: the runtime's launch path measured (runtime/benches/launch_host.rs)
//! and tested (runtime/tests/launch_path.rs) without a driver.

#![allow(dead_code)]

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Verified;
use kiln_runtime::device::{DeviceMemory, Handle, Memory, RecordStep, Recording, ResidentBuffer};
use kiln_runtime::{BuildOptions, Device, DeviceError, DeviceKind};

/// The one kernel the stand-in runs.
pub const INC: &str = "kernel inc(x: ptr<global, u32>) {
    let i: u32 = global_id(0); x[i] = x[i] + i + 1u32; }";

/// Device memory on the host.
struct HostMem(Mutex<Vec<u8>>);

impl DeviceMemory for HostMem {
    fn bytes(&self) -> usize {
        self.0.lock().unwrap().len()
    }
    fn upload(&self, data: &[u8]) -> Result<(), DeviceError> {
        let mut m = self.0.lock().unwrap();
        let n = data.len().min(m.len());
        m[..n].copy_from_slice(&data[..n]);
        Ok(())
    }
    fn download(&self, out: &mut [u8]) -> Result<(), DeviceError> {
        let m = self.0.lock().unwrap();
        let n = out.len().min(m.len());
        out[..n].copy_from_slice(&m[..n]);
        Ok(())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// `inc` over the first `n` elements of `mem`.
fn inc(mem: &Memory, n: u32) -> Result<(), DeviceError> {
    let m = mem.as_any().downcast_ref::<HostMem>().ok_or_else(|| launch_err("foreign memory"))?;
    let mut m = m.0.lock().unwrap();
    for (i, w) in m.chunks_exact_mut(4).take(n as usize).enumerate() {
        let v = u32::from_le_bytes(w.try_into().unwrap()).wrapping_add(i as u32 + 1);
        w.copy_from_slice(&v.to_le_bytes());
    }
    Ok(())
}

fn launch_err(m: &str) -> DeviceError {
    DeviceError::Launch(format!("host stand-in: {m}"))
}

/// The stand-in device's counters: its launches (a replay counts each of its launches) and
/// the threads that made them.
#[derive(Default)]
pub struct HostNative {
    pub launches: AtomicU64,
    pub threads: Mutex<Vec<ThreadId>>,
}

impl HostNative {
    fn check(
        &self,
        kernel: &Handle,
        args: &[Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        match (kernel.downcast_ref::<String>().map(String::as_str), args, buffers) {
            (Some("inc"), [Arg::Buffer(0)], [_]) => Ok(()),
            _ => Err(launch_err("only `inc(x)` runs here")),
        }
    }
}

struct HostRecording {
    dev: Arc<HostNative>,
    launches: Vec<(Memory, u32)>,
}

impl Recording for HostRecording {
    fn replay(&self) -> Result<(), DeviceError> {
        for (m, n) in &self.launches {
            inc(m, *n)?;
        }
        self.dev.launches.fetch_add(self.launches.len() as u64, Ordering::Relaxed);
        self.dev.threads.lock().unwrap().push(std::thread::current().id());
        Ok(())
    }
}

/// The `Device` a context holds: the stand-in, with its counters shared.
pub struct Dev(pub Arc<HostNative>);

impl Device for Dev {
    fn name(&self) -> String {
        "host stand-in".into()
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Other
    }
    fn version(&self) -> String {
        "1".into()
    }
    fn build(&self, module: &Verified, _: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        Ok(module.kernels.iter().map(|k| k.name()).collect::<Vec<_>>().join(",").into_bytes())
    }
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        Ok(Arc::new(String::from_utf8_lossy(binary).into_owned()))
    }
    fn kernel(&self, _: &Handle, name: &str) -> Result<Handle, DeviceError> {
        Ok(Arc::new(name.to_string()))
    }
    fn run(
        &self,
        _: &Handle,
        _: &NdRange,
        _: &[Arg],
        _: &mut [kiln_ir::launch::Buffer],
    ) -> Result<(), DeviceError> {
        Err(launch_err("launches run on resident buffers only"))
    }
    fn memory_space(&self) -> Option<u64> {
        Some(0x5eed)
    }
    fn alloc(&self, bytes: usize) -> Result<Memory, DeviceError> {
        Ok(Arc::new(HostMem(Mutex::new(vec![0; bytes]))))
    }
    fn run_resident(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &[ResidentBuffer],
    ) -> Result<(), DeviceError> {
        self.0.check(kernel, args, buffers)?;
        inc(&buffers[0].mem, range.global[0])?;
        self.0.launches.fetch_add(1, Ordering::Relaxed);
        self.0.threads.lock().unwrap().push(std::thread::current().id());
        Ok(())
    }
    fn record(&self, steps: &[RecordStep]) -> Result<Option<Box<dyn Recording>>, DeviceError> {
        let mut launches = Vec::new();
        for s in steps {
            let RecordStep::Launch(l) = s else { return Err(launch_err("launches only")) };
            self.0.check(&l.kernel, &l.args, &l.buffers)?;
            launches.push((l.buffers[0].mem.clone(), l.range.global[0]));
        }
        Ok(Some(Box::new(HostRecording { dev: self.0.clone(), launches })))
    }
}
