//! # kiln-runtime: devices, contexts, queues, buffers, events and the kernel/program cache
//!
//! SYCL-like and Rust-shaped:
//!
//! * A [`Device`] builds *programs* (artifacts for one device: SPIR-V words, PTX text,
//!   machine code, or the verified IR for the interpreter) from a [`kiln_ir::Module`] and
//!   runs their kernels. [`InterpDevice`] runs kernels on the reference interpreter.
//! * [`device::cuda::CudaDevice`] (PTX) and [`device::vulkan::VulkanDevice`] (SPIR-V)
//!   implement the same trait: their programs are built through the build driver
//!   ([`kiln_backends::driver`]: the default `-O` pipeline and the backend's emitter), and
//!   their drivers are loaded at run time (missing: [`DeviceError::Unavailable`]). Every
//!   device is registered by name in [`device::registry`].
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
//!   An accessor may cover a range of its buffer only ([`Handler::access_range`],
//!   [`Accessor::with_range`]: SYCL's ranged accessor): the kernel sees the range as a
//!   buffer of its own, index 0 at the range's offset ([`kiln_ir::launch::Arg::Range`]).
//! * The [`scheduler`] holds the one dependency model (requirements and explicit events to
//!   read-after-write / write-after-read / write-after-write edges) that queues and command
//!   graphs share, and the worker threads.
//! * A queue in fusion mode ([`Queue::start_fusion`], see [`fusion`]) holds its kernels
//!   back and fuses them into one at [`Queue::complete_fusion`], through the fusion JIT and
//!   a fusion cache, cancelling early when other work needs them.
//! * A [`graph::Graph`] records commands once (explicitly or from a recording queue) and
//!   replays them: finalized into a [`graph::ExecGraph`] of prepared launch lists
//!   (recorded into Vulkan command buffers or CUDA graphs on those devices), partitioned at
//!   host tasks, optionally with chains of kernels fused.
//! * On devices with memory of their own (Vulkan, CUDA), buffers stay there between
//!   launches and are copied back only when the host reads them ([`device::memory`]).
//! * Every command returns an [`Event`]; errors surface at [`Event::wait`] /
//!   [`Queue::wait`] naming the failing command.
//!
//! ## Environment
//!
//! [`env::VARIABLES`] lists every `KILN_*` variable with what it accepts; [`Config`] reads
//! kiln's own once (or takes them from code), so a value that is not understood is an error
//! naming the variable on every device. Build options (`KILN_PROGRAM_BUILD_OPTIONS` and the
//! API's) are recognized in one place, [`kiln_backends::options`].
#![warn(missing_docs)]
mod artifact;
pub mod buffer;
pub mod cache;
pub mod config;
pub mod context;
pub mod device;
pub mod env;
pub mod error;
pub mod event;
pub mod fusion;
pub mod graph;
pub mod queue;
mod sanitize;
pub mod scheduler;
pub use buffer::{AccessMode, AccessProps, Accessor, AnyBuffer, Buffer, PromoteTo};
pub use config::Config;
pub use context::{
    Context, ContextConfig, KernelData, KernelHandle, PreparedModule, Program, ProgramData,
    ProgramKey,
};
pub use device::{
    interp_device, Device, DeviceKind, Handle, Interp, InterpDevice, IrDevice, IrExecutor,
};
pub use error::{DeviceError, RuntimeError};
pub use event::{Event, EventStatus};
pub use fusion::{FusionProps, FusionStatus};
pub use kiln_backends::options::BuildOptions;
/// Re-exported from the IR crate: launch geometry and buffer elements.
pub use kiln_ir::launch::{Element, NdRange};
pub use queue::{Handler, Queue, QueueOrder};
pub use scheduler::{HostTaskContext, KernelArg};
