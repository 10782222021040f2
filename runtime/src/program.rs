//! Built programs and their kernels: the cache keys ([`ProgramKey`], [`KernelKey`]) and
//! the handles a [`crate::Context`] builds ([`Program`], [`KernelHandle`]) and every command
//! launches. Below the scheduler and the context: a command names its kernel by handle.

use std::hash::{Hash, Hasher};
use std::sync::Arc;

use kiln_ir::Module;

use crate::cache::hash::hash64;
use crate::cache::{DiskKey, KeyHashes};
use crate::device::Handle;

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
    /// The device's [`crate::Device::identity`].
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
pub(crate) struct KernelKeyRef<'a> {
    pub(crate) program: &'a ProgramKey,
    pub(crate) name: &'a str,
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
    pub(crate) fn owned(&self) -> KernelKey {
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
pub struct Program(pub(crate) Arc<ProgramData>);

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
pub struct KernelHandle(pub(crate) Arc<KernelData>);

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
