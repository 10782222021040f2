//! Measures what the persisted Vulkan pipeline cache saves a warm process: the time from a
//! fresh context over a warm persistent cache to the end of the first launch, with the
//! stored pipeline cache (the Vulkan device as it is) and without it (the same device
//! through a wrapper that ignores stored driver state), and a cold build for reference.
//! Each fresh context loads the program into a fresh `VkPipelineCache`, as a new process
//! would; the two warm variants alternate so that drift hits both alike.
//!
//! ```text
//! MESA_SHADER_CACHE_DISABLE=true cargo run --release --example vk_pipeline_cache [rounds] [statements]
//! ```
//!
//! (Mesa's own on-disk shader cache would hide the difference on Mesa drivers; NVIDIA's
//! driver cache is turned off with `__GL_SHADER_DISK_CACHE=0`.) Prints the median of each
//! variant in milliseconds and the ratio.

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kiln::ir::launch::{Arg, Buffer, NdRange};
use kiln::ir::{parse_module, Kernel, Module, Verified};
use kiln::runtime::cache::PersistentCache;
use kiln::runtime::context::driver_cache_key;
use kiln::runtime::device::vulkan::VulkanDevice;
use kiln::runtime::device::Handle;
use kiln::runtime::{BuildOptions, Context, ContextConfig, Device, DeviceError, DeviceKind};

/// The Vulkan device with stored driver state ignored (the trait's defaults).
struct WithoutPipelineCache(Arc<VulkanDevice>);

impl Device for WithoutPipelineCache {
    fn name(&self) -> String {
        self.0.name()
    }
    fn kind(&self) -> DeviceKind {
        self.0.kind()
    }
    fn version(&self) -> String {
        self.0.version()
    }
    fn build(&self, module: &Verified, options: &BuildOptions) -> Result<Vec<u8>, DeviceError> {
        self.0.build(module, options)
    }
    fn load(&self, binary: &[u8]) -> Result<Handle, DeviceError> {
        self.0.load(binary)
    }
    fn kernel(&self, program: &Handle, name: &str) -> Result<Handle, DeviceError> {
        self.0.kernel(program, name)
    }
    fn run(
        &self,
        kernel: &Handle,
        range: &NdRange,
        args: &[Arg],
        buffers: &mut [Buffer],
    ) -> Result<(), DeviceError> {
        self.0.run(kernel, range, args, buffers)
    }
}

/// A kernel whose pipeline takes the driver a while to compile: `statements` dependent
/// float operations.
fn kernel(statements: usize) -> Kernel {
    let mut src = String::from(
        "kernel heavy(x: ptr<global, f32>) {\n  let i: u32 = global_id(0);\n  var v: f32 = x[i];\n",
    );
    for s in 0..statements {
        src += &format!("  v = v * 1.0001 + {}.5 / (v * v + 1.0);\n", s % 7);
    }
    src += "  x[i] = v;\n}\n";
    parse_module(&src).expect("generated kernel parses").kernels.remove(0)
}

/// A fresh context over `dir`: build (or load) the program and run it once.
fn first_launch(dev: Arc<dyn Device>, dir: &std::path::Path, k: &Kernel) -> Duration {
    let start = Instant::now();
    let cfg = ContextConfig {
        persistent: Some(PersistentCache::new(dir)),
        workers: 1,
        ..Default::default()
    };
    let ctx = Context::with_config(dev, cfg);
    let p = ctx.build_program(&Module::new(vec![k.clone()]), &[], "").expect("build");
    let h = ctx.device().kernel(&p.handle, k.name()).expect("kernel");
    let mut bufs = vec![Buffer::from_slice(&[1.0f32; 64])];
    ctx.device().run(&h, &NdRange::new(&[64]), &[Arg::Buffer(0)], &mut bufs).expect("run");
    let t = start.elapsed();
    drop(ctx); // stores the pipeline cache (outside the timed part)
    t
}

fn median(mut v: Vec<Duration>) -> f64 {
    v.sort();
    v[v.len() / 2].as_secs_f64() * 1e3
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map_or(Ok(9), |s| s.parse())?;
    let statements: usize = args.next().map_or(Ok(400), |s| s.parse())?;
    let vk = Arc::new(VulkanDevice::open()?);
    println!("device: {} ({})", vk.name(), vk.version());
    let k = kernel(statements);
    let dir = std::env::temp_dir().join(format!("kiln-vk-pipeline-cache-{}", std::process::id()));
    let (with, without): (Arc<dyn Device>, Arc<dyn Device>) =
        (vk.clone(), Arc::new(WithoutPipelineCache(vk.clone())));
    let (mut cold, mut warm_with, mut warm_without) = (Vec::new(), Vec::new(), Vec::new());
    for r in 0..rounds {
        let _ = std::fs::remove_dir_all(&dir);
        cold.push(first_launch(with.clone(), &dir, &k)); // builds, stores program + cache
        if r % 2 == 0 {
            warm_with.push(first_launch(with.clone(), &dir, &k));
            warm_without.push(first_launch(without.clone(), &dir, &k));
        } else {
            warm_without.push(first_launch(without.clone(), &dir, &k));
            warm_with.push(first_launch(with.clone(), &dir, &k));
        }
    }
    let key = Context::with_config(with.clone(), ContextConfig::default())
        .program_key(&Module::new(vec![k.clone()]), &[], "")
        .disk_key();
    let stored = PersistentCache::new(&dir).get(&driver_cache_key(&key)).map_or(0, |d| d.len());
    let _ = std::fs::remove_dir_all(&dir);
    let (c, w, wo) = (median(cold), median(warm_with), median(warm_without));
    println!("kernel of {statements} statements, median of {rounds} rounds:");
    println!("  cold (build + pipeline):                 {c:9.2} ms");
    println!("  warm, without the stored pipeline cache: {wo:9.2} ms");
    println!("  warm, with the stored pipeline cache:    {w:9.2} ms");
    println!("  ratio without / with:                    {:9.2}", wo / w);
    println!("  stored pipeline cache data:              {stored:9} bytes");
    Ok(())
}
