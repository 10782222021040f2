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
//! * A queue in fusion mode ([`QueueFusion::start_fusion`], see [`fusion`]) holds its
//!   kernels back and fuses them into one at [`QueueFusion::complete_fusion`], through the
//!   fusion JIT and a fusion cache, cancelling early when other work needs them.
//! * A [`graph::Graph`] records commands once (explicitly or from a recording queue) and
//!   replays them: finalized into a [`graph::ExecGraph`] of prepared launch lists
//!   (recorded into Vulkan command buffers or CUDA graphs on those devices), partitioned at
//!   host tasks, optionally with chains of kernels fused.
//! * On devices with memory of their own (Vulkan, CUDA), buffers stay there between
//!   launches and are copied back only when the host reads them ([`device::memory`]).
//! * Every command returns an [`Event`]; errors surface at [`Event::wait`] /
//!   [`Queue::wait`] naming the failing command.
//!
//! ## Layers
//!
//! The modules form a DAG; each uses only those below it (`grep -rn "use crate::"
//! runtime/src` shows no edge upward):
//!
//! 1. devices and device memory ([`device`], with its executors under `device/NAME/`),
//!    errors, the caches ([`cache`]), settings ([`config`], [`mod@env`]);
//! 2. the scheduler: [`event`]s, the dependency model (`deps`), [`buffer`]s (which track
//!    their accesses with it), built programs and kernel handles (`program`), and the
//!    [`scheduler`] with its commands and worker threads; then the [`context`] (a device,
//!    its caches and its scheduler);
//! 3. the [`queue`] (eager submission);
//! 4. [`fusion`] and command graphs ([`graph`]) above the queue, through its interface
//!    only: the queue knows them as a recorder and a holder of its submissions (traits of
//!    its own), and their operations on a queue are the traits [`QueueFusion`] and
//!    [`QueueGraph`]. Graphs use the fusion front end; fusion does not know graphs. The
//!    fusion front end's cache lives in the context as a cache of a layer above.
//!
//! ## Lock order
//!
//! Every mutex of the runtime has a rank; a thread takes a lock only while every lock it
//! holds ranks lower (locks of one rank held together, buffers' contents, go in address
//! order). Debug builds check it on every lock and panic naming both locks; release builds
//! compile the check out. Outermost first:
//!
//! | rank | lock | taken around |
//! |---|---|---|
//! | 20, 22, 24 | executable graph state, plan, last run | `update`, `submit_graph` (which submits under the last run's lock) |
//! | 28 | queue recording slot | `begin_recording`, a submission (released before recording) |
//! | 30 | recording order | recording one submission (waits for outside events under it) |
//! | 31 | graph nodes | recording a node, `begin_recording` (under the slot), `finalize` |
//! | 32 | queue fusion slot | `start_fusion` / `complete_fusion` / a held submission |
//! | 34 | fusion list | holding, completing, cancelling a fusion (submits under it) |
//! | 40 | queue last command | a submission (in-order chain; the scheduler wires the command under it) |
//! | 42 | queue events | remembering a submission for `Queue::wait` (reads the others' status) |
//! | 50 | buffer track | deriving a command's dependencies |
//! | 60, 62 | command action, failed dependency | running or replacing a command |
//! | 70 | event state | finishing or waiting for an event |
//! | 72 | command pending count | releasing a command |
//! | 80, 82 | scheduler ready list, worker handles | enqueueing, shutdown |
//! | 90, 92 | cache map, cache entry | program, kernel and fusion cache lookups |
//! | 100 | buffer contents | host access, a launch (several, in address order) |
//! | 110, 112, 114 | disk cache key, warnings, warned set | the persistent cache |
//! | 120 | vulkan kernel pipelines | making a kernel's pipeline for a work-group size |
//! | 122, 124 | vulkan launch slots, vulkan queue | recording and submitting a launch or replay (the queue only around `vkQueueSubmit`), host waits for the device |
//! | 130 | cuda tensor maps | finding or making a kernel's device copy of an encoded tensor map (takes no other lock) |
//!
//! The table is `sync::ranks`; `tests/concurrent.rs` runs every public operation at once
//! from several threads in a debug build (on the interpreter, the cpu device and Vulkan), so
//! an order the table does not allow fails there. The CUDA device takes no lock of its own
//! (the driver serializes its calls).
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
mod deps;
pub mod device;
pub mod env;
pub mod error;
pub mod event;
pub mod fusion;
pub mod graph;
mod program;
pub mod queue;
mod sanitize;
pub mod scheduler;
mod sync;
pub use buffer::{
    check_kernel_args, AccessMode, AccessProps, Accessor, AnyBuffer, Arg, Buffer, PromoteTo,
};
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
pub use fusion::{FusionProps, FusionStatus, QueueFusion};
pub use graph::QueueGraph;
pub use kiln_backends::options::BuildOptions;
pub use kiln_ir::launch::{ArgError, ArgKind};
/// Re-exported from the IR crate: launch geometry and buffer elements.
pub use kiln_ir::launch::{Element, NdRange};
pub use queue::{Handler, Queue, QueueOrder};
pub use scheduler::HostTaskContext;
