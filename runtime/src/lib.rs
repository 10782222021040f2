//! # kiln-runtime: devices, contexts, queues, buffers, events and the kernel/program cache
//!
//! SYCL-like and Rust-shaped (see `ARCHITECTURE.md`):
//!
//! * A [`Device`] builds *programs* (artifacts for one device: SPIR-V words, PTX text,
//!   machine code, or the verified IR for the interpreter) from a [`kiln_ir::Module`] and
//!   runs their kernels. [`InterpDevice`] runs kernels on the reference interpreter.
//! * [`cuda::CudaDevice`] (PTX) and [`vulkan::VulkanDevice`] (SPIR-V) implement the same
//!   trait: their programs are built with the default `-O` pipeline and the backend's
//!   emitter, and their drivers are loaded at run time (missing: [`DeviceError::Unavailable`]).
//! * A [`Context`] owns a device and the caches: an in-memory [`cache::BuildCache`] for
//!   programs (keyed by module content, specialization constants, device and build
//!   options) and one for kernels (keyed by program and kernel name), and optionally a
//!   [`cache::PersistentCache`] on disk.
//!   Per submission, [`Context::kernel_of`] on a module registered once with
//!   [`Context::prepare`] is the fast path: one lookup, nothing allocated or hashed anew.
//! * A [`Queue`] (in-order or out-of-order) takes commands (kernel launches and host tasks)
//!   whose buffer [`Accessor`]s declare read / write / read-write requirements; the
//!   scheduler derives read-after-write, write-after-read and write-after-write
//!   dependencies from them (across queues) and from explicit event lists, and runs
//!   independent commands concurrently on the context's worker threads.
//! * Every command returns an [`Event`]; errors surface at [`Event::wait`] /
//!   [`Queue::wait`] naming the failing command.
//!
//! ## Environment
//!
//! | variable | meaning |
//! |---|---|
//! | `KILN_PROGRAM_BUILD_OPTIONS` | appended to every program's build options (part of the cache key; the GPU devices accept `-O0`, `-O`, `-O1`..`-O3`; every device accepts `-fsanitize=bounds`, see `docs/sanitize.md`) |
//! | `KILN_IN_MEM_CACHE_MAX` | in-memory cache limit, a size such as `65536` or `64M` (0 or unset: unlimited) |
//! | `KILN_CACHE_PERSISTENT` | `1` enables the on-disk cache |
//! | `KILN_CACHE_DIR` | its root (default `$XDG_CACHE_HOME/kiln`, else `~/.cache/kiln`) |
//! | `KILN_CACHE_MAX_SIZE` | on-disk limit, a size such as `65536`, `10K`, `64M` or `1G` (powers of 1024, see [`cache::parse_size`]; anything else is an error); LRU items are evicted past it (0: none) |
//! | `KILN_CACHE_MAX_ITEM_SIZE` | items larger than this size (same syntax) are not stored (0: no limit) |
#![warn(missing_docs)]
mod artifact;
pub mod buffer;
pub mod cache;
pub mod context;
/// The CUDA device: kiln kernels on NVIDIA GPUs through the driver API, loaded at run time.
pub mod cuda;
pub mod device;
pub mod error;
pub mod event;
pub mod queue;
mod sanitize;
/// A Vulkan compute device running the SPIR-V backend's Vulkan flavour.
pub mod vulkan;
pub use buffer::{AccessMode, Accessor, AnyBuffer, Buffer};
pub use context::{
    Context, ContextConfig, KernelData, KernelHandle, PreparedModule, Program, ProgramData,
    ProgramKey,
};
pub use device::{
    interp_device, Device, DeviceKind, Handle, Interp, InterpDevice, IrDevice, IrExecutor,
};
pub use error::{DeviceError, RuntimeError};
pub use event::{Event, EventStatus};
/// Re-exported from the IR crate: launch geometry and buffer elements.
pub use kiln_ir::interp::{Element, NdRange};
pub use queue::{Handler, HostTaskContext, KernelArg, Queue, QueueOrder};
