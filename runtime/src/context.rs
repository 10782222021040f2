//! The context: a device, its program and kernel caches, and the worker threads.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use kiln_backends::options::BuildOptions;
use kiln_ir::{Module, ToVerified, Verified};

use crate::cache::hash::hash64;
use crate::cache::{BuildCache, CacheStats, DiskKey, KeyHashes, PersistentCache};
use crate::device::{Device, Handle};
use crate::error::DeviceError;
use crate::fusion::front::FusionFront;
use crate::scheduler::Scheduler;

/// The key of a program in the in-memory cache: module content, specialization constants,
/// device identity and build options. Hashing uses a precomputed hash; equality compares the
/// full values, so a hash collision can never hand out another program.
#[derive(Clone, Debug)]
pub struct ProgramKey {
    hash: u64,
    /// The parts' hashes, which also name the persistent-cache directory.
    hashes: KeyHashes,
    /// The module's canonical text.
    pub image: Arc<str>,
    /// Serialized specialization-constant values.
    pub spec_consts: Arc<[u8]>,
    /// The device's [`Device::identity`].
    pub device: Arc<str>,
    /// All build options (API, then `KILN_PROGRAM_BUILD_OPTIONS`).
    pub options: Arc<str>,
}

impl ProgramKey {
    /// A key from its parts.
    pub fn new(image: &str, spec_consts: &[u8], device: &str, options: &str) -> ProgramKey {
        let hashes = KeyHashes::of_parts(
            device.as_bytes(),
            image.as_bytes(),
            spec_consts,
            options.as_bytes(),
        );
        let all = [hashes.device, hashes.image, hashes.spec_consts, hashes.build_options];
        let hash = hash64(&all.map(u64::to_le_bytes).concat());
        ProgramKey {
            hash,
            hashes,
            image: image.into(),
            spec_consts: spec_consts.into(),
            device: device.into(),
            options: options.into(),
        }
    }

    /// The hashes of its parts (the persistent cache's directory names), computed once.
    pub fn hashes(&self) -> &KeyHashes {
        &self.hashes
    }

    /// The same key for the persistent cache.
    pub fn disk_key(&self) -> DiskKey {
        DiskKey {
            device: self.device.to_string(),
            image: self.image.as_bytes().to_vec(),
            spec_consts: self.spec_consts.to_vec(),
            build_options: self.options.to_string(),
        }
    }
}

/// Equal contents, checked by pointer first: keys cloned from one another share their
/// parts, and comparing a module's whole text on every cache hit would dominate the hit.
/// (`Arc`'s own `==` takes no such shortcut for unsized contents like `str`.)
fn same<T: ?Sized + PartialEq>(a: &Arc<T>, b: &Arc<T>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

impl PartialEq for ProgramKey {
    fn eq(&self, o: &ProgramKey) -> bool {
        self.hash == o.hash
            && same(&self.image, &o.image)
            && same(&self.spec_consts, &o.spec_consts)
            && same(&self.device, &o.device)
            && same(&self.options, &o.options)
    }
}

impl Eq for ProgramKey {}

impl Hash for ProgramKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        h.write_u64(self.hash);
    }
}

/// The key of a kernel: its program and its name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelKey {
    /// The program's key.
    pub program: ProgramKey,
    /// The kernel's name.
    pub name: Arc<str>,
}

impl Hash for KernelKey {
    fn hash<H: Hasher>(&self, h: &mut H) {
        KernelKeyRef { program: &self.program, name: &self.name }.hash(h)
    }
}

/// A borrowed [`KernelKey`]: what a kernel lookup hashes and compares, so that a hit
/// allocates nothing and touches no reference count.
#[derive(Clone, Copy, Debug)]
struct KernelKeyRef<'a> {
    program: &'a ProgramKey,
    name: &'a str,
}

impl Hash for KernelKeyRef<'_> {
    fn hash<H: Hasher>(&self, h: &mut H) {
        // The program's precomputed hash, not its contents: hashing is O(name).
        h.write_u64(self.program.hash);
        self.name.hash(h);
    }
}

impl hashbrown::Equivalent<KernelKey> for KernelKeyRef<'_> {
    fn equivalent(&self, k: &KernelKey) -> bool {
        // Same-`Arc` fields compare by pointer first (see `same`).
        *self.program == k.program && self.name == &*k.name
    }
}

impl KernelKeyRef<'_> {
    fn owned(&self) -> KernelKey {
        KernelKey { program: self.program.clone(), name: self.name.into() }
    }
}

/// What a [`Program`] handle points to.
pub struct ProgramData {
    /// The program's cache key.
    pub key: ProgramKey,
    /// The module it was built from, as given (before the sanitizer's rewrite): the IR
    /// fusion reads its kernels from.
    pub module: Arc<Module>,
    /// The binary, as stored in the persistent cache.
    pub binary: Arc<[u8]>,
    /// The device-side handle.
    pub handle: Handle,
    /// Whether the binary came from the persistent cache.
    pub from_disk: bool,
    /// With `-fsanitize=bounds` (on a device other than the interpreter): the sanitized
    /// kernels, in module order, whose launches take hidden arguments.
    pub sanitized: Option<Arc<[kiln_passes::sanitize::Sanitized]>>,
}

/// A built program: the binary and the device's loaded handle. Cheap to clone (one
/// reference count); its fields are read through `Deref` ([`ProgramData`]).
#[derive(Clone)]
pub struct Program(Arc<ProgramData>);

impl std::ops::Deref for Program {
    type Target = ProgramData;
    fn deref(&self) -> &ProgramData {
        &self.0
    }
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Program")
            .field("binary_len", &self.binary.len())
            .field("from_disk", &self.from_disk)
            .finish_non_exhaustive()
    }
}

/// What a [`KernelHandle`] points to.
pub struct KernelData {
    /// The kernel's name.
    pub name: Arc<str>,
    /// The program it belongs to.
    pub program: Program,
    /// The device-side handle.
    pub handle: Handle,
    /// The kernel as sanitized, when its program was built with `-fsanitize=bounds`.
    pub sanitized: Option<kiln_passes::sanitize::Sanitized>,
}

/// A kernel of a built program, ready to launch. Cheap to clone (one reference count); its
/// fields are read through `Deref` ([`KernelData`]).
#[derive(Clone)]
pub struct KernelHandle(Arc<KernelData>);

impl std::ops::Deref for KernelHandle {
    type Target = KernelData;
    fn deref(&self) -> &KernelData {
        &self.0
    }
}

impl std::fmt::Debug for KernelHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelHandle").field("name", &self.name).finish_non_exhaustive()
    }
}

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

/// How a [`Context`] is set up; [`crate::Config::context_config`] makes one from kiln's
/// settings.
#[derive(Debug, Default)]
pub struct ContextConfig {
    /// In-memory cache limit in bytes, per map (0: unlimited).
    pub in_mem_max: u64,
    /// The persistent cache, if enabled.
    pub persistent: Option<PersistentCache>,
    /// Build options added to every build (`KILN_PROGRAM_BUILD_OPTIONS`).
    pub env_build_options: String,
    /// Worker threads running commands (0: the machine's parallelism, at least 2).
    pub workers: usize,
    /// The runtime's warning level (`KILN_RT_WARNING_LEVEL`): 1 or more prints warnings,
    /// such as a queue's fusion cancelled early, to stderr.
    pub warning_level: u32,
}

// Fields drop in order: the caches' device objects (loaded modules) go before the device
// that made them (a CUDA context, say).
struct ContextInner {
    fusion: FusionFront,
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
            fusion: FusionFront::new(config.in_mem_max),
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
    /// ([`crate::Queue::complete_fusion`]) and of command graphs' chains
    /// ([`crate::graph::GraphProperties::fuse_chains`]), keyed by the fusion key (a hit
    /// reuses the fused kernel without running the fusion JIT).
    pub fn fusion_cache_stats(&self) -> CacheStats {
        self.0.fusion.stats()
    }

    /// The fusion front end, which owns the fusion cache.
    pub(crate) fn fusion_front(&self) -> &FusionFront {
        &self.0.fusion
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
            if let Some(bin) = p.get_hashed(dk, &key.hashes) {
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
                    Err(e) => p.discard_hashed(dk, &key.hashes, &e.to_string()),
                }
            }
        }
        let bin = dev.build(&prepared.module, &prepared.options)?;
        let handle = dev.load(&bin)?;
        if let (Some(p), Some(dk)) = (&self.0.persistent, &disk_key) {
            p.put_hashed(dk, &key.hashes, &bin);
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
        self.0.fusion.clear();
    }
}
