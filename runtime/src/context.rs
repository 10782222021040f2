//! The context: a device, its program and kernel caches, and the worker threads.

use std::sync::{Arc, OnceLock};

use kiln_backends::options::BuildOptions;
use kiln_ir::{Module, ToVerified, Verified};

use crate::cache::{BuildCache, CacheStats, DiskKey, KeyHashes, PersistentCache};
pub use crate::config::ContextConfig;
use crate::device::{Device, Handle};
use crate::error::DeviceError;
use crate::program::KernelKeyRef;
pub use crate::program::{KernelData, KernelHandle, KernelKey, Program, ProgramData, ProgramKey};
use crate::scheduler::Scheduler;

/// A module registered with a [`Context`] by [`Context::prepare`]: the module and its
/// program key, computed once. Submissions that name a kernel of it
/// ([`Context::kernel_of`]) then cost one lookup in the kernel cache, with no printing or
/// hashing of the module. Cheap to clone.
#[derive(Clone, Debug)]
pub struct PreparedModule {
    module: Prepared,
    key: ProgramKey,
}

/// A prepared module as it was given: verified already, or to be verified at its build.
#[derive(Clone, Debug)]
enum Prepared {
    Verified(Arc<Verified>),
    Unchecked(Arc<Module>),
}

impl ToVerified for Prepared {
    fn as_module(&self) -> &Module {
        match self {
            Prepared::Verified(m) => m.as_module(),
            Prepared::Unchecked(m) => m,
        }
    }
    fn verified(&self) -> Option<&Verified> {
        match self {
            Prepared::Verified(m) => Some(m),
            Prepared::Unchecked(_) => None,
        }
    }
}

impl PreparedModule {
    /// The program key the module builds under.
    pub fn key(&self) -> &ProgramKey {
        &self.key
    }

    /// The module.
    pub fn module(&self) -> &Module {
        self.module.as_module()
    }
}

// Fields drop in order: the caches' device objects (loaded modules) go before the device
// that made them (a CUDA context, say).
struct ContextInner {
    /// The cache a layer above keeps per context (the fusion cache), made at its first use.
    layer_cache: OnceLock<Box<dyn LayerCache>>,
    in_mem_max: u64,
    kernels: BuildCache<KernelKey, KernelHandle, DeviceError>,
    programs: BuildCache<ProgramKey, Program, DeviceError>,
    device: Arc<dyn Device>,
    identity: String,
    persistent: Option<PersistentCache>,
    env_build_options: String,
    warning_level: u32,
    scheduler: Arc<Scheduler>,
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        self.scheduler.shutdown();
        save_driver_caches(self);
    }
}

/// The persistent-cache key of a program's driver state ([`Device::driver_cache`]): the
/// program's key with a marker appended to its build options, so it lives next to the
/// program (same device, image and spec-constant directories) and is checked like it.
pub fn driver_cache_key(program: &DiskKey) -> DiskKey {
    let mut k = program.clone();
    k.build_options.push_str("\0kiln-driver-cache");
    k
}

/// Loads a binary from the persistent cache with the driver state stored next to it, if
/// any; state the device rejects is discarded (with the cache's warning).
fn load_with_driver_cache(
    dev: &dyn Device,
    p: &PersistentCache,
    program: &DiskKey,
    bin: &[u8],
) -> Result<Handle, DeviceError> {
    let key = driver_cache_key(program);
    let Some(data) = p.get(&key) else { return dev.load(bin) };
    let (handle, rejected) = dev.load_with_driver_cache(bin, &data)?;
    if let Some(why) = rejected {
        let hashes = KeyHashes::of_parts(
            key.device.as_bytes(),
            &key.image,
            &key.spec_consts,
            key.build_options.as_bytes(),
        );
        p.discard_hashed(&key, &hashes, &why);
    }
    Ok(handle)
}

/// Stores the driver state of every program in memory that changed, next to the program.
fn save_driver_caches(inner: &ContextInner) {
    let Some(p) = &inner.persistent else { return };
    for program in inner.programs.values() {
        if let Some(data) = inner.device.driver_cache(&program.handle) {
            p.put(&driver_cache_key(&program.key.disk_key()), &data);
        }
    }
}

/// A cache that a layer above the context keeps per context (the fusion front end's cache
/// of fused kernels): the context owns it, so it lives as long as the context and
/// [`Context::clear_caches`] and the statistics reach it, without the context depending on
/// that layer.
pub(crate) trait LayerCache: Send + Sync + 'static {
    /// Its statistics.
    fn stats(&self) -> CacheStats;
    /// Drops its finished entries.
    fn clear(&self);
    /// Itself, to be downcast to its type.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// A device with its caches and worker threads. Cheap to clone (clones share everything).
#[derive(Clone)]
pub struct Context(Arc<ContextInner>);

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.0.identity).finish_non_exhaustive()
    }
}

fn weigh_program(p: &Program) -> usize {
    p.binary.len() + p.key.image.len() + 64
}

fn weigh_kernel(k: &KernelHandle) -> usize {
    k.name.len() + 64
}

impl Context {
    /// A context for `device`, configured from the environment.
    pub fn new(device: Arc<dyn Device>) -> Context {
        Context::with_config(device, crate::Config::from_env_lenient().context_config())
    }

    /// A context with an explicit configuration.
    pub fn with_config(device: Arc<dyn Device>, config: ContextConfig) -> Context {
        let workers = if config.workers > 0 {
            config.workers
        } else {
            std::thread::available_parallelism().map_or(2, |n| n.get()).max(2)
        };
        Context(Arc::new(ContextInner {
            identity: device.identity(),
            device,
            programs: BuildCache::new(config.in_mem_max, weigh_program),
            kernels: BuildCache::new(config.in_mem_max, weigh_kernel),
            layer_cache: OnceLock::new(),
            in_mem_max: config.in_mem_max,
            persistent: config.persistent,
            env_build_options: config.env_build_options,
            warning_level: config.warning_level,
            scheduler: Scheduler::start(workers),
        }))
    }

    /// The device.
    pub fn device(&self) -> &Arc<dyn Device> {
        &self.0.device
    }

    /// The persistent cache, if enabled.
    pub fn persistent_cache(&self) -> Option<&PersistentCache> {
        self.0.persistent.as_ref()
    }

    /// The program cache's statistics.
    pub fn program_cache_stats(&self) -> CacheStats {
        self.0.programs.stats()
    }

    /// The kernel cache's statistics.
    pub fn kernel_cache_stats(&self) -> CacheStats {
        self.0.kernels.stats()
    }

    /// The fusion cache's statistics: fused kernels of queues' fusion lists
    /// (`QueueFusion::complete_fusion`) and of command graphs' chains
    /// (`GraphProperties::fuse_chains`), keyed by the fusion key (a hit reuses the fused
    /// kernel without running the fusion JIT).
    pub fn fusion_cache_stats(&self) -> CacheStats {
        self.0.layer_cache.get().map_or_else(CacheStats::default, |c| c.stats())
    }

    /// The cache of type `T` a layer above keeps with this context (the fusion front end),
    /// made by `make` (given the in-memory cache limit) at its first use. One type per
    /// context: the fusion front end is the only one.
    pub(crate) fn layer_cache<T: LayerCache>(&self, make: impl FnOnce(u64) -> T) -> &T {
        let c = self.0.layer_cache.get_or_init(|| Box::new(make(self.0.in_mem_max)));
        match c.as_any().downcast_ref::<T>() {
            Some(t) => t,
            None => unreachable!("one layer cache type per context"),
        }
    }

    /// The runtime's warning level ([`ContextConfig::warning_level`]).
    pub fn warning_level(&self) -> u32 {
        self.0.warning_level
    }

    /// Whether `self` and `other` are the same context (clones of one another).
    pub fn same_context(&self, other: &Context) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The build options the environment adds to every build.
    pub(crate) fn env_build_options(&self) -> &str {
        &self.0.env_build_options
    }

    pub(crate) fn scheduler(&self) -> &Arc<Scheduler> {
        &self.0.scheduler
    }

    /// The cache key of `module` built with `spec_consts` and `options` on this device.
    pub fn program_key(&self, module: &Module, spec_consts: &[u8], options: &str) -> ProgramKey {
        let opts = match (options.is_empty(), self.0.env_build_options.is_empty()) {
            (_, true) => options.to_string(),
            (true, false) => self.0.env_build_options.clone(),
            (false, false) => format!("{options} {}", self.0.env_build_options),
        };
        ProgramKey::new(&module.to_string(), spec_consts, &self.0.identity, &opts)
    }

    /// The program for `module`, from the in-memory cache, else the persistent cache, else
    /// built (and then stored in both). Concurrent requests for one key build once. A
    /// [`Verified`] module is built as it is; a plain [`Module`] is verified first.
    pub fn build_program<M: ToVerified + ?Sized>(
        &self,
        module: &M,
        spec_consts: &[u8],
        options: &str,
    ) -> Result<Program, DeviceError> {
        let key = self.program_key(module.as_module(), spec_consts, options);
        self.0.programs.get_or_build(&key, || self.build_uncached(&key, module))
    }

    /// Registers `module` (with spec constants and build options): computes its program key
    /// once, for [`program_of`](Self::program_of) and [`kernel_of`](Self::kernel_of). A
    /// [`Verified`] module is not verified again when it is built.
    pub fn prepare<M: ToVerified + ?Sized>(
        &self,
        module: &M,
        spec_consts: &[u8],
        options: &str,
    ) -> PreparedModule {
        let module = match module.verified() {
            Some(v) => Prepared::Verified(Arc::new(v.clone())),
            // Verified at its build, where an error is reported.
            None => Prepared::Unchecked(Arc::new(module.as_module().clone())),
        };
        PreparedModule { key: self.program_key(module.as_module(), spec_consts, options), module }
    }

    /// The program of a prepared module (cached like [`build_program`](Self::build_program),
    /// without recomputing the key).
    pub fn program_of(&self, m: &PreparedModule) -> Result<Program, DeviceError> {
        self.0.programs.get_or_build(&m.key, || self.build_uncached(&m.key, &m.module))
    }

    /// The kernel `name` of a prepared module: the per-submission call. A hit is one lookup
    /// in the kernel cache by (program key, name) with nothing allocated; a miss builds the
    /// program first if needed (through the program cache).
    pub fn kernel_of(&self, m: &PreparedModule, name: &str) -> Result<KernelHandle, DeviceError> {
        let q = KernelKeyRef { program: &m.key, name };
        self.0.kernels.get_or_build_by(&q, KernelKeyRef::owned, || {
            let program = self.program_of(m)?;
            self.make_kernel(&program, name)
        })
    }

    fn make_kernel(&self, program: &Program, name: &str) -> Result<KernelHandle, DeviceError> {
        let handle = self.0.device.kernel(&program.handle, name)?;
        let sanitized =
            program.sanitized.as_ref().and_then(|s| s.iter().find(|k| k.name == name).cloned());
        Ok(KernelHandle(Arc::new(KernelData {
            name: name.into(),
            program: program.clone(),
            handle,
            sanitized,
        })))
    }

    fn build_uncached<M: ToVerified + ?Sized>(
        &self,
        key: &ProgramKey,
        module: &M,
    ) -> Result<Program, DeviceError> {
        let dev = &self.0.device;
        // Every device refuses unknown options alike, the interpreter (which has none to
        // apply) included, and before the persistent cache is asked.
        let options = BuildOptions::parse(&key.options).map_err(|e| DeviceError::Build {
            device: dev.name(),
            message: if BuildOptions::parse(&self.0.env_build_options).is_err() {
                format!("KILN_PROGRAM_BUILD_OPTIONS: {e}")
            } else {
                e
            },
        })?;
        // Verified here only if it was not before, once for every step below: the
        // sanitizer and the device's build.
        let module = module
            .to_verified()
            .map_err(|errs| DeviceError::ill_formed(dev.name(), &errs))?
            .into_owned();
        let ir = Arc::new(module.as_module().clone());
        // The sanitizer's rewrite is deterministic, so a binary from disk gets the same
        // site tables it was built with.
        let prepared = crate::sanitize::prepare(&**dev, module, options);
        let sanitized = prepared.sanitized;
        let disk_key = self.0.persistent.as_ref().map(|_| key.disk_key());
        if let (Some(p), Some(dk)) = (&self.0.persistent, &disk_key) {
            if let Some(bin) = p.get_hashed(dk, key.hashes()) {
                match load_with_driver_cache(dev.as_ref(), p, dk, &bin) {
                    Ok(handle) => {
                        return Ok(Program(Arc::new(ProgramData {
                            key: key.clone(),
                            module: ir,
                            binary: bin.into(),
                            handle,
                            from_disk: true,
                            sanitized,
                        })))
                    }
                    // Valid bytes the device rejects: drop the item so that the rebuilt
                    // binary replaces it (reported once by the cache as a warning).
                    Err(e) => p.discard_hashed(dk, key.hashes(), &e.to_string()),
                }
            }
        }
        let bin = dev.build(&prepared.module, &prepared.options)?;
        let handle = dev.load(&bin)?;
        if let (Some(p), Some(dk)) = (&self.0.persistent, &disk_key) {
            p.put_hashed(dk, key.hashes(), &bin);
        }
        Ok(Program(Arc::new(ProgramData {
            key: key.clone(),
            module: ir,
            binary: bin.into(),
            handle,
            from_disk: false,
            sanitized,
        })))
    }

    /// The kernel `name` of `program`, cached per (program, name).
    pub fn kernel(&self, program: &Program, name: &str) -> Result<KernelHandle, DeviceError> {
        let q = KernelKeyRef { program: &program.key, name };
        self.0.kernels.get_or_build_by(&q, KernelKeyRef::owned, || self.make_kernel(program, name))
    }

    /// [`build_program`](Self::build_program) with no spec constants or options, then
    /// [`kernel`](Self::kernel).
    pub fn get_kernel<M: ToVerified + ?Sized>(
        &self,
        module: &M,
        name: &str,
    ) -> Result<KernelHandle, DeviceError> {
        let p = self.build_program(module, &[], "")?;
        self.kernel(&p, name)
    }

    /// Stores the driver's compiled state of the programs in memory ([`Device::driver_cache`],
    /// Vulkan pipeline caches) in the persistent cache, next to each program, so that
    /// another process loading them does not compile them again in the driver. Dropping the
    /// context does the same; call this to have it stored earlier.
    pub fn save_driver_caches(&self) {
        save_driver_caches(&self.0);
    }

    /// Drops every finished entry of the in-memory caches.
    pub fn clear_caches(&self) {
        self.0.programs.clear();
        self.0.kernels.clear();
        if let Some(c) = self.0.layer_cache.get() {
            c.clear();
        }
    }
}
