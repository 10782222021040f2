//! What a command does: kernel launches (with their arguments resolved to buffers once,
//! [`PreparedLaunch`]), host tasks, buffer copies and fills, and prepared lists (a command
//! graph's partition).

use std::sync::Arc;

use kiln_ir::launch::{self, ArgError, Element, NdRange};
use kiln_ir::Imm;
use smallvec::SmallVec;

use crate::buffer::{arg_view, Accessor, Arg, BufferInner};
use crate::device::{Device, ResidentBuffer};
use crate::error::{DeviceError, RuntimeError};
use crate::program::KernelHandle;

/// A host task's closure, run once.
pub(crate) type HostFn = Box<dyn FnOnce(&mut HostTaskContext) -> Result<(), String> + Send>;
/// A host task's closure that can run many times (a command graph replays it).
pub(crate) type SharedHostFn =
    Arc<dyn Fn(&mut HostTaskContext) -> Result<(), String> + Send + Sync>;

/// Work run on a worker with the context's device: a command graph's prepared partition.
pub(crate) type ExecFn = Box<dyn FnOnce(&dyn Device) -> Result<(), RuntimeError> + Send>;

/// What a command does once its dependencies have finished.
pub(crate) enum Action {
    /// A kernel launch.
    Kernel { kernel: KernelHandle, range: NdRange, args: Vec<Arg> },
    /// A host task (run once).
    Host(HostFn),
    /// A host task that may run again.
    SharedHost(SharedHostFn),
    /// Copies `src` into the start of `dst`.
    Copy { src: Accessor, dst: Accessor },
    /// Sets every element of `dst` to `value`.
    Fill { dst: Accessor, value: Imm },
    /// A prepared list of work.
    Exec(ExecFn),
    /// Nothing (a barrier: it only orders).
    Nothing,
}

impl Action {
    /// The part of a command's default name that says what it does.
    pub fn describe(&self) -> String {
        match self {
            Action::Kernel { kernel, .. } => format!("kernel `{}`", kernel.name),
            Action::Host(_) | Action::SharedHost(_) => "host task".into(),
            Action::Copy { .. } => "copy".into(),
            Action::Fill { .. } => "fill".into(),
            Action::Exec(_) => "graph partition".into(),
            Action::Nothing => "barrier".into(),
        }
    }
}

/// What a host task can touch: the buffers of its accessors.
pub struct HostTaskContext {
    pub(crate) _private: (),
}

impl HostTaskContext {
    /// The contents of the accessor's buffer (`None` if `T` is not its element type, or
    /// the newest contents are on a device and could not be downloaded).
    pub fn read<T: Element>(&self, a: &Accessor) -> Option<Vec<T>> {
        a.buffer.data().host().ok()?.to_vec::<T>()
    }

    /// Overwrites the start of the accessor's buffer with `values`; an error if the
    /// accessor does not write, or `T` is not the element type.
    pub fn write<T: Element>(&mut self, a: &Accessor, values: &[T]) -> Result<(), String> {
        if !a.mode.writes() {
            return Err("host task writes through a read-only accessor".into());
        }
        let mut st = a.buffer.data();
        let d = st.host_mut().map_err(|e| e.to_string())?;
        for (i, v) in values.iter().enumerate().take(a.buffer.len) {
            d.set(i, v.to_imm()).map_err(|e| e.to_string())?;
        }
        Ok(())
    }
}

/// Arguments and buffers a launch keeps inline: launches with more spill to the heap.
const INLINE: usize = 4;

/// A kernel launch whose arguments are resolved once: the distinct buffers it binds (and
/// whether it writes each) and the device arguments indexing them. The eager path prepares
/// a launch per submission (on the stack, for up to [`INLINE`] arguments and buffers); a
/// command graph prepares it at finalize and replays it.
#[derive(Clone)]
pub(crate) struct PreparedLaunch {
    pub kernel: KernelHandle,
    pub range: NdRange,
    pub args: SmallVec<[launch::Arg; INLINE]>,
    pub bufs: SmallVec<[(Arc<BufferInner>, bool); INLINE]>,
}

impl PreparedLaunch {
    /// `kernel` over `range` with `args`, checked against the kernel's parameters (the one
    /// check every launch through the runtime passes, [`launch::check_args`]); a buffer is
    /// written when any of `accessors` on it (the command's requirements) writes.
    pub fn new(
        kernel: KernelHandle,
        range: NdRange,
        args: &[Arg],
        accessors: &[Accessor],
    ) -> Result<PreparedLaunch, ArgError> {
        if let Some(ir) = kernel.program.module.kernel(&kernel.name) {
            crate::buffer::check_kernel_args(ir, args)?;
        }
        let mut bufs = SmallVec::<[(Arc<BufferInner>, bool); INLINE]>::new();
        let mut iargs = SmallVec::<[launch::Arg; INLINE]>::with_capacity(args.len());
        for a in args {
            let (buffer, window) = match arg_view(a) {
                Some(view) => view,
                None => {
                    iargs.extend(a.imm().map(launch::Arg::Scalar));
                    continue;
                }
            };
            let writes = accessors
                .iter()
                .filter(|x| Arc::ptr_eq(&x.buffer, buffer))
                .any(|x| x.mode.writes());
            let i = match bufs.iter().position(|(b, _)| Arc::ptr_eq(b, buffer)) {
                Some(i) => i,
                None => {
                    bufs.push((buffer.clone(), writes));
                    bufs.len() - 1
                }
            };
            iargs.push(match window {
                Some((offset, len)) => launch::Arg::Range { buffer: i, offset, len },
                None => launch::Arg::Buffer(i),
            });
        }
        Ok(PreparedLaunch { kernel, range, args: iargs, bufs })
    }

    /// Runs the launch on `device`. On a device with memory of its own, the buffers are
    /// made current there (uploaded when stale) and the kernel updates them in place;
    /// otherwise the buffers are moved out of their host storage for the launch: written
    /// ones freely (the scheduler guarantees no one else uses them meanwhile), read-only
    /// ones under their locks until they are back.
    /// Sanitized launches always take the host path (they add buffers of their own).
    pub fn run(&self, device: &dyn Device) -> Result<(), DeviceError> {
        let k = &self.kernel;
        if let (Some(space), None) = (device.memory_space(), &k.sanitized) {
            let bufs = self.resident(device, space)?;
            device.run_resident(&k.handle, &self.range, &self.args, &bufs)?;
            self.wrote(space);
            return Ok(());
        }
        // Written buffers are moved out of their host storage for the launch (the scheduler
        // guarantees no one else uses them meanwhile). Read-only ones are lent under their
        // locks, held until they are back, so concurrent readers wait rather than this
        // launch copying whole buffers; the locks are taken in address order, so two
        // launches cannot each hold one the other waits for.
        let mut order: SmallVec<[usize; INLINE]> = (0..self.bufs.len()).collect();
        order.sort_by_key(|&i| Arc::as_ptr(&self.bufs[i].0) as usize);
        let mut slots: SmallVec<[Option<launch::Buffer>; INLINE]> =
            (0..self.bufs.len()).map(|_| None).collect();
        let mut lent = SmallVec::<[_; INLINE]>::new();
        let mut failed = None;
        for &i in &order {
            let (b, w) = &self.bufs[i];
            let mut st = b.data();
            let r = if *w {
                st.host_mut().map(|d| std::mem::replace(d, launch::Buffer::zeroed(b.elem, 0)))
            } else {
                st.lend_host()
            };
            match r {
                Ok(d) => slots[i] = Some(d),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
            if !*w {
                lent.push((i, st));
            }
        }
        let mut data: Vec<launch::Buffer> = Vec::with_capacity(self.bufs.len());
        if failed.is_none() {
            data.extend(slots.iter_mut().map(|d| d.take().expect("every buffer taken")));
        }
        let r = match failed {
            Some(e) => Err(e),
            None => match &k.sanitized {
                None => device.run(&k.handle, &self.range, &self.args, &mut data),
                Some(s) => crate::sanitize::run_checked(
                    device,
                    s,
                    &k.handle,
                    &self.range,
                    &self.args,
                    &mut data,
                ),
            },
        };
        // Everything goes back (also what was taken before a failed download).
        if !data.is_empty() {
            for (slot, d) in slots.iter_mut().zip(data) {
                *slot = Some(d);
            }
        }
        for (i, mut st) in lent {
            if let Some(d) = slots[i].take() {
                st.return_host(d);
            }
        }
        for ((b, w), d) in self.bufs.iter().zip(slots) {
            if let (true, Some(d)) = (*w, d) {
                if let Ok(h) = b.data().host_mut() {
                    *h = d;
                }
            }
        }
        r
    }

    /// The launch's buffers on `device` (memory space `space`), each holding its newest
    /// contents.
    pub fn resident(
        &self,
        device: &dyn Device,
        space: u64,
    ) -> Result<SmallVec<[ResidentBuffer; INLINE]>, DeviceError> {
        self.bufs
            .iter()
            .map(|(b, _)| {
                let mem = b.data().on_device(device, space)?;
                Ok(ResidentBuffer { mem, elem: b.elem, len: b.len })
            })
            .collect()
    }

    /// The launch ran in memory space `space`: the buffers it writes are newest there.
    pub fn wrote(&self, space: u64) {
        for (b, w) in &self.bufs {
            if *w {
                b.data().device_wrote(space);
            }
        }
    }
}

/// Copies `src` into the start of `dst` (same element type, `dst` at least as long).
pub(crate) fn copy(src: &Accessor, dst: &Accessor) -> Result<(), String> {
    if Arc::ptr_eq(&src.buffer, &dst.buffer) {
        return Ok(());
    }
    let (s, d) = (&src.buffer, &dst.buffer);
    if s.elem != d.elem || s.len > d.len {
        return Err(format!(
            "cannot copy buffer #{} ({} x {}) into buffer #{} ({} x {}): the element types \
             must match and the destination must be at least as long",
            s.id, s.len, s.elem, d.id, d.len, d.elem
        ));
    }
    let from = s.data().host().map_err(|e| e.to_string())?.clone();
    let mut st = d.data();
    let to = if s.len == d.len {
        st.host_overwrite()
    } else {
        st.host_mut().map_err(|e| e.to_string())?
    };
    for i in 0..from.len() {
        let v = from.get(i).ok_or("copy source shorter than its length")?;
        to.set(i, v).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Sets every element of `dst` to `value` (of the buffer's element type).
pub(crate) fn fill(dst: &Accessor, value: Imm) -> Result<(), String> {
    let b = &dst.buffer;
    if value.scalar() != b.elem {
        return Err(format!(
            "cannot fill buffer #{} of {} with a value of type {}",
            b.id,
            b.elem,
            value.scalar()
        ));
    }
    let mut st = b.data();
    let d = st.host_overwrite();
    for i in 0..b.len {
        d.set(i, value).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs one command's action; errors name the command.
pub(crate) fn run_action(
    name: &str,
    device: &dyn Device,
    accessors: &[Accessor],
    action: Action,
) -> Result<(), RuntimeError> {
    let host_err = |message| RuntimeError::HostTask { command: name.into(), message };
    let invalid = |message| RuntimeError::Invalid { command: name.into(), message };
    match action {
        Action::Nothing => Ok(()),
        Action::Exec(f) => f(device),
        Action::Host(f) => f(&mut HostTaskContext { _private: () }).map_err(host_err),
        Action::SharedHost(f) => f(&mut HostTaskContext { _private: () }).map_err(host_err),
        Action::Copy { src, dst } => copy(&src, &dst).map_err(invalid),
        Action::Fill { dst, value } => fill(&dst, value).map_err(invalid),
        Action::Kernel { kernel, range, args } => {
            PreparedLaunch::new(kernel, range, &args, accessors)
                .map_err(|source| RuntimeError::Argument { command: name.into(), source })?
                .run(device)
                .map_err(|source| RuntimeError::Kernel { command: name.into(), source })
        }
    }
}
