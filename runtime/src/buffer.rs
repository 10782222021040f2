//! Buffers and accessors.
//!
//! A [`Buffer<T>`] is device-visible storage shared by host and commands. Commands declare
//! how they use a buffer through an [`Accessor`] (read, write or read-write); the
//! scheduler orders commands by these requirements. Host access ([`Buffer::read`],
//! [`Buffer::write`]) waits for the commands it conflicts with.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use hashbrown::HashMap;
use kiln_ir::launch::{self, Element};
use kiln_ir::Scalar;
pub use kiln_passes::fusion::PromoteTo;

use crate::device::{Device, Memory};
use crate::error::{DeviceError, RuntimeError};
use crate::event::Event;
use crate::sync::{ranks, RankedGuard, RankedMutex};

/// How a command uses a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AccessMode {
    /// Reads only.
    Read,
    /// Overwrites (ordered like a write; the contents are still there to read).
    Write,
    /// Reads and writes.
    ReadWrite,
}

impl AccessMode {
    /// Whether the mode writes.
    pub fn writes(self) -> bool {
        !matches!(self, AccessMode::Read)
    }

    /// The weakest mode covering both.
    pub fn join(self, o: AccessMode) -> AccessMode {
        if self == o {
            self
        } else {
            AccessMode::ReadWrite
        }
    }
}

/// Which live commands last touched a buffer (the scheduler's bookkeeping).
pub(crate) type Track = crate::deps::AccessTrack<Event>;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

pub(crate) struct BufferInner {
    pub id: u64,
    pub elem: Scalar,
    pub len: usize,
    pub data: RankedMutex<Storage>,
    pub track: RankedMutex<Track>,
    /// The buffer's promotion property for queue fusion (see [`Buffer::set_promote`]):
    /// 0 unset, else [`promote_code`].
    promote: AtomicU8,
}

fn promote_code(p: Option<PromoteTo>) -> u8 {
    match p {
        None => 0,
        Some(PromoteTo::None) => 1,
        Some(PromoteTo::Private) => 2,
        Some(PromoteTo::Local) => 3,
    }
}

/// A buffer's copy in one device memory space.
struct DeviceCopy {
    space: u64,
    mem: Memory,
    /// Whether it holds the newest contents.
    valid: bool,
}

/// A buffer's contents: on the host, and on the devices with memory of their own that
/// launched kernels with it (see [`crate::device::memory`]). At least one place is valid;
/// a device write leaves only that device's copy valid, a host write only the host's.
pub(crate) struct Storage {
    /// The size of the contents (the host buffer is empty while a host-memory device runs
    /// a kernel writing it).
    bytes: usize,
    host: launch::Buffer,
    host_valid: bool,
    /// At most one per memory space; never removed while the buffer lives (recordings
    /// keep their addresses).
    copies: Vec<DeviceCopy>,
}

impl Storage {
    fn new(host: launch::Buffer) -> Storage {
        Storage { bytes: host.as_bytes().len(), host, host_valid: true, copies: Vec::new() }
    }

    /// The host contents, downloaded first when only a device holds the newest.
    pub fn host(&mut self) -> Result<&launch::Buffer, DeviceError> {
        if !self.host_valid {
            let c = self.copies.iter().find(|c| c.valid).ok_or_else(|| {
                DeviceError::Driver("buffer contents lost: no valid copy (a bug in kiln)".into())
            })?;
            c.mem.download(self.host.as_bytes_mut())?;
            self.host_valid = true;
        }
        Ok(&self.host)
    }

    /// The host contents for writing: as [`Storage::host`], and every device copy becomes
    /// stale.
    pub fn host_mut(&mut self) -> Result<&mut launch::Buffer, DeviceError> {
        self.host()?;
        for c in &mut self.copies {
            c.valid = false;
        }
        Ok(&mut self.host)
    }

    /// The host contents, moved out for a launch that only reads them (downloaded first
    /// when a device holds the newest; device copies stay valid). The caller holds the
    /// lock until [`Storage::return_host`] puts them back, so no one sees the gap.
    pub fn lend_host(&mut self) -> Result<launch::Buffer, DeviceError> {
        self.host()?;
        let elem = self.host.elem();
        Ok(std::mem::replace(&mut self.host, launch::Buffer::zeroed(elem, 0)))
    }

    /// Puts back what [`Storage::lend_host`] lent.
    pub fn return_host(&mut self, b: launch::Buffer) {
        self.host = b;
    }

    /// The host contents for a write of every element: as [`Storage::host_mut`], without
    /// downloading contents that are about to be overwritten.
    pub fn host_overwrite(&mut self) -> &mut launch::Buffer {
        self.host_valid = true;
        for c in &mut self.copies {
            c.valid = false;
        }
        &mut self.host
    }

    /// The buffer's copy in `dev`'s memory space `space`, allocated when it has none (its
    /// contents then unspecified).
    pub fn allocated(&mut self, dev: &dyn Device, space: u64) -> Result<Memory, DeviceError> {
        if let Some(c) = self.copies.iter().find(|c| c.space == space) {
            return Ok(c.mem.clone());
        }
        let mem = dev.alloc(self.bytes.max(1))?;
        self.copies.push(DeviceCopy { space, mem: mem.clone(), valid: false });
        Ok(mem)
    }

    /// The buffer's copy on `dev` holding the newest contents (uploaded when stale).
    pub fn on_device(&mut self, dev: &dyn Device, space: u64) -> Result<Memory, DeviceError> {
        let mem = self.allocated(dev, space)?;
        let i = self.copies.iter().position(|c| c.space == space).unwrap_or_default();
        if !self.copies[i].valid {
            self.host()?;
            if !self.host.is_empty() {
                mem.upload(self.host.as_bytes())?;
            }
            self.copies[i].valid = true;
        }
        Ok(mem)
    }

    /// A launch in memory space `space` wrote the buffer: only that copy is newest.
    pub fn device_wrote(&mut self, space: u64) {
        self.host_valid = false;
        for c in &mut self.copies {
            c.valid = c.space == space;
        }
    }
}

impl BufferInner {
    fn new(b: launch::Buffer) -> Arc<BufferInner> {
        Arc::new(BufferInner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            elem: b.elem(),
            len: b.len(),
            data: RankedMutex::new(ranks::BUFFER_DATA, Storage::new(b)),
            track: RankedMutex::new(ranks::BUFFER_TRACK, Track::default()),
            promote: AtomicU8::new(0),
        })
    }
    /// The buffer's promotion property, if one was set.
    pub fn promote(&self) -> Option<PromoteTo> {
        match self.promote.load(Ordering::Relaxed) {
            1 => Some(PromoteTo::None),
            2 => Some(PromoteTo::Private),
            3 => Some(PromoteTo::Local),
            _ => None,
        }
    }
    /// Waits for the last command writing the buffer (its error, if it failed).
    fn wait_for_writer(&self) -> Result<(), RuntimeError> {
        let w = self.track().last_write.clone();
        match w {
            Some(w) => w.wait_because(|| format!("a host read of buffer #{}", self.id)),
            None => Ok(()),
        }
    }
    /// The contents (lock them; [`Storage::host`] for the host's view).
    pub fn data(&self) -> RankedGuard<'_, Storage> {
        self.data.lock()
    }
    /// A copy of the host contents, downloaded first when a device holds the newest; a
    /// failed download is an error naming the buffer.
    fn host_copy(&self) -> Result<launch::Buffer, RuntimeError> {
        self.data().host().cloned().map_err(|source| self.transfer_error(source))
    }
    pub fn transfer_error(&self, source: DeviceError) -> RuntimeError {
        RuntimeError::Kernel { command: format!("host access to buffer #{}", self.id), source }
    }
    pub fn track(&self) -> RankedGuard<'_, Track> {
        self.track.lock()
    }
}

/// A typed buffer of `len` elements of `T`. Cheap to clone (clones are the same buffer).
pub struct Buffer<T: Element> {
    pub(crate) inner: Arc<BufferInner>,
    _t: PhantomData<fn() -> T>,
}

impl<T: Element> Clone for Buffer<T> {
    fn clone(&self) -> Self {
        Buffer { inner: self.inner.clone(), _t: PhantomData }
    }
}

impl<T: Element> std::fmt::Debug for Buffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer<{}>#{}[{}]", self.inner.elem, self.inner.id, self.inner.len)
    }
}

impl<T: Element> Buffer<T> {
    /// An accessor to this buffer with `mode` (see [`Accessor::new`]).
    pub fn access(&self, mode: AccessMode) -> Accessor {
        Accessor { buffer: self.inner.clone(), mode, props: AccessProps::default(), range: None }
    }

    /// Sets the buffer's promotion property (SYCL's `promote_private` / `promote_local`
    /// buffer properties): kernels fused by [`crate::QueueFusion::complete_fusion`] that use the
    /// buffer keep it in private or local memory instead of global memory, as if each of
    /// their accessors asked for it ([`AccessProps::promote`]; an accessor asking otherwise
    /// is a conflict, and the buffer is then not promoted). `None` removes it. A promoted
    /// buffer is neither read nor written by the fused kernel: its contents after the
    /// fusion are the ones it had before.
    pub fn set_promote(&self, promote: Option<PromoteTo>) {
        self.inner.promote.store(promote_code(promote), Ordering::Relaxed);
    }

    fn wrap(b: launch::Buffer) -> Buffer<T> {
        Buffer { inner: BufferInner::new(b), _t: PhantomData }
    }

    /// A buffer holding a copy of `values`.
    pub fn from_slice(values: &[T]) -> Buffer<T> {
        Buffer::wrap(launch::Buffer::from_slice(values))
    }

    /// A zeroed buffer of `len` elements.
    pub fn zeroed(len: usize) -> Buffer<T> {
        Buffer::wrap(launch::Buffer::zeroed(T::SCALAR, len))
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Host read access: waits for the last command writing the buffer, then copies the
    /// contents out. The error of that command (if it failed) is returned instead.
    pub fn read(&self) -> Result<Vec<T>, RuntimeError> {
        self.inner.wait_for_writer()?;
        Ok(self.inner.host_copy()?.to_vec::<T>().unwrap_or_default())
    }

    /// Host write access: waits for every command using the buffer, then copies `values`
    /// in (at most `len` elements; the rest are unchanged). Errors of those commands are
    /// ignored here: they surface at their own events. When a device holds the newest
    /// contents they are downloaded first (the elements past `values` stay); a failed
    /// download is the error, and nothing is written.
    pub fn write(&self, values: &[T]) -> Result<(), RuntimeError> {
        let (w, rs) = {
            let t = self.inner.track();
            (t.last_write.clone(), t.reads.clone())
        };
        for e in w.iter().chain(&rs) {
            let _ = e.wait_because(|| format!("a host write of buffer #{}", self.inner.id));
        }
        let mut st = self.inner.data();
        let d = if values.len() >= self.inner.len {
            st.host_overwrite()
        } else {
            st.host_mut().map_err(|source| self.inner.transfer_error(source))?
        };
        for (i, v) in values.iter().enumerate().take(self.inner.len) {
            let _ = d.set(i, v.to_imm());
        }
        Ok(())
    }
}

/// A buffer whose element type is known only at run time (a command line, a binding to
/// another language): the same storage, scheduling and host access as [`Buffer<T>`], with
/// contents as an interpreter [`launch::Buffer`]. Cheap to clone (clones are the same buffer).
#[derive(Clone)]
pub struct AnyBuffer {
    pub(crate) inner: Arc<BufferInner>,
}

impl std::fmt::Debug for AnyBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AnyBuffer<{}>#{}[{}]", self.inner.elem, self.inner.id, self.inner.len)
    }
}

impl AnyBuffer {
    /// A buffer holding `contents` (its element type and length are the buffer's).
    pub fn new(contents: launch::Buffer) -> AnyBuffer {
        AnyBuffer { inner: BufferInner::new(contents) }
    }

    /// The element type.
    pub fn elem(&self) -> Scalar {
        self.inner.elem
    }

    /// The number of elements.
    pub fn len(&self) -> usize {
        self.inner.len
    }

    /// Whether the buffer has no elements.
    pub fn is_empty(&self) -> bool {
        self.inner.len == 0
    }

    /// Whether `self` and `other` are the same buffer (clones of one another), not merely
    /// buffers of equal contents.
    ///
    /// ```
    /// use kiln_runtime::{AnyBuffer, Buffer};
    ///
    /// let b = Buffer::from_slice(&[1.0f32, 2.0]);
    /// let (x, y) = (AnyBuffer::from(&b), AnyBuffer::from(&b.clone()));
    /// assert!(x.same_buffer(&y));
    /// assert!(!x.same_buffer(&AnyBuffer::from(&Buffer::from_slice(&[1.0f32, 2.0]))));
    /// // One storage: a write through the typed handle shows through the other.
    /// b.write(&[5.0]).unwrap();
    /// assert_eq!(x.contents().unwrap().to_vec::<f32>(), Some(vec![5.0, 2.0]));
    /// ```
    pub fn same_buffer(&self, other: &AnyBuffer) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Host read access: waits for the last command writing the buffer, then copies the
    /// contents out. The error of that command (if it failed) is returned instead.
    pub fn contents(&self) -> Result<launch::Buffer, RuntimeError> {
        self.inner.wait_for_writer()?;
        self.inner.host_copy()
    }
}

/// The same buffer, its element type known only at run time: commands through either
/// handle are ordered as for one buffer.
impl<T: Element> From<&Buffer<T>> for AnyBuffer {
    fn from(b: &Buffer<T>) -> AnyBuffer {
        AnyBuffer { inner: b.inner.clone() }
    }
}

/// A command's declared use of a buffer; also what a kernel argument binds.
#[derive(Clone)]
pub struct Accessor {
    pub(crate) buffer: Arc<BufferInner>,
    pub(crate) mode: AccessMode,
    pub(crate) props: AccessProps,
    /// A ranged accessor's `(offset, len)` in elements ([`Accessor::with_range`]); `None`
    /// for the whole buffer.
    pub(crate) range: Option<(usize, usize)>,
}

/// An accessor's properties for queue fusion (SYCL's accessor property list):
/// what [`crate::QueueFusion::complete_fusion`] does with the buffer. Outside fusion they change
/// nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct AccessProps {
    /// `promote_private` / `promote_local`: keep the buffer in private or local memory in
    /// the fused kernel (`PromoteTo::None`: explicitly not). Overrides nothing: when both
    /// the buffer ([`Buffer::set_promote`]) and the accessor say, they must agree.
    pub promote: Option<PromoteTo>,
    /// `no_init`: the command does not need the buffer's previous contents. A promoted
    /// buffer starts with no contents, so promotion needs the first fused kernel using it to
    /// write it only ([`AccessMode::Write`]) or to declare `no_init`.
    pub no_init: bool,
}

impl Accessor {
    /// An accessor to `b` with `mode`, outside a [`crate::Handler`]: for the nodes of a
    /// command graph added with [`crate::graph::Graph::add`].
    pub fn new(b: &AnyBuffer, mode: AccessMode) -> Accessor {
        Accessor { buffer: b.inner.clone(), mode, props: AccessProps::default(), range: None }
    }

    /// The same accessor over elements `offset..offset + len` of its buffer only (a SYCL
    /// ranged accessor): a kernel argument bound to it sees a buffer of `len` elements whose
    /// index 0 is element `offset` ([`kiln_ir::launch::Arg::Range`]), and an index outside
    /// `0..len` is out of bounds. A range that does not lie within the buffer is refused,
    /// naming the buffer, the offset, the length and the buffer's size.
    ///
    /// Dependencies are tracked per buffer: commands through two ranges of one buffer are
    /// ordered as if each used the whole buffer, whether the ranges overlap or not.
    pub fn with_range(mut self, offset: usize, len: usize) -> Result<Accessor, RuntimeError> {
        let size = self.buffer.len;
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(RuntimeError::Invalid {
                command: format!("ranged accessor of buffer #{}", self.buffer.id),
                message: format!(
                    "offset {offset} + length {len} is past the end of buffer #{} ({size} \
                     element{})",
                    self.buffer.id,
                    if size == 1 { "" } else { "s" }
                ),
            });
        }
        self.range = Some((offset, len));
        Ok(self)
    }

    /// A ranged accessor's `(offset, len)` in elements; `None` for the whole buffer.
    pub fn range(&self) -> Option<(usize, usize)> {
        self.range
    }

    /// The same accessor with the fusion properties `props`.
    pub fn with_props(mut self, props: AccessProps) -> Accessor {
        self.props = props;
        self
    }

    /// Its fusion properties.
    pub fn props(&self) -> AccessProps {
        self.props
    }

    /// The buffer it accesses.
    pub fn buffer(&self) -> AnyBuffer {
        AnyBuffer { inner: self.buffer.clone() }
    }

    /// The access mode.
    pub fn mode(&self) -> AccessMode {
        self.mode
    }
}

impl AccessProps {
    /// The properties of one command's two accessors to one buffer: `no_init` only if both
    /// say it; promotion as both ask (the fusion's rules: an explicit `None` against a
    /// request wins, local beats private).
    pub(crate) fn join(self, o: AccessProps) -> AccessProps {
        let promote = match (self.promote, o.promote) {
            (a, b) if a == b => a,
            (Some(PromoteTo::None), _) | (_, Some(PromoteTo::None)) => Some(PromoteTo::None),
            (None, p) | (p, None) => p,
            _ => Some(PromoteTo::Local),
        };
        AccessProps { promote, no_init: self.no_init && o.no_init }
    }
}

impl std::fmt::Debug for Accessor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Accessor(#{}, {:?})", self.buffer.id, self.mode)?;
        if let Some((o, n)) = self.range {
            write!(f, "[{o}..{}]", o + n)?;
        }
        if self.props != AccessProps::default() {
            write!(f, "{:?}", self.props)?;
        }
        Ok(())
    }
}

/// A kernel argument as queues, command graphs and the facade take it: the one argument
/// type of every layer ([`kiln_ir::launch::Arg`]), its buffers named by accessors. A
/// launch declares each buffer argument's accessor as one of its requirements, so
/// `Arg::from(&buffer)` (an accessor that reads and writes) is all a launch needs; an
/// accessor from [`crate::Handler::read`] and the like says more precisely how the buffer
/// is used. An [`Arg::Range`] binds a range of the accessor's elements (of its range, for a
/// ranged accessor).
///
/// ```
/// use kiln_runtime::{AccessMode, Arg, Buffer};
/// let b = Buffer::from_slice(&[1u32, 2]);
/// let args: Vec<Arg> = vec![(&b).into(), b.access(AccessMode::Read).into(), 7u32.into()];
/// assert_eq!(args[0].buffer().map(|a| a.mode()), Some(AccessMode::ReadWrite));
/// assert!(args[0].same(&args[1]) && !args[0].same(&args[2]));
/// ```
pub type Arg<B = Accessor> = launch::Arg<B>;

/// Arguments through one accessor or another are the same when they bind the same elements
/// of one buffer (the access modes do not matter).
impl launch::BufferRef for Accessor {
    fn same_buffer(&self, other: &Accessor) -> bool {
        Arc::ptr_eq(&self.buffer, &other.buffer) && self.range == other.range
    }
}

impl From<Accessor> for Arg {
    fn from(a: Accessor) -> Arg {
        Arg::Buffer(a)
    }
}

impl From<&Accessor> for Arg {
    fn from(a: &Accessor) -> Arg {
        Arg::Buffer(a.clone())
    }
}

/// The buffer itself (not a copy), read and written: the kernel's writes are seen through it.
impl<T: Element> From<&Buffer<T>> for Arg {
    fn from(b: &Buffer<T>) -> Arg {
        Arg::Buffer(b.access(AccessMode::ReadWrite))
    }
}

/// As for `&Buffer<T>`.
impl<T: Element> From<Buffer<T>> for Arg {
    fn from(b: Buffer<T>) -> Arg {
        Arg::Buffer(b.access(AccessMode::ReadWrite))
    }
}

/// As for `&Buffer<T>`.
impl From<&AnyBuffer> for Arg {
    fn from(b: &AnyBuffer) -> Arg {
        Arg::Buffer(Accessor::new(b, AccessMode::ReadWrite))
    }
}

/// Elements `(offset, len)` of a buffer; `None`: the whole buffer.
pub(crate) type Window = Option<(usize, usize)>;

/// The buffer a kernel argument binds and the elements of it: an accessor's range and the
/// argument's own composed. `None` for a scalar.
pub(crate) fn arg_view(a: &Arg) -> Option<(&Arc<BufferInner>, Window)> {
    match a {
        launch::Arg::Scalar(_) => None,
        launch::Arg::Buffer(acc) => Some((&acc.buffer, acc.range)),
        launch::Arg::Range { buffer: acc, offset, len } => {
            let base = acc.range.map_or(0, |(o, _)| o);
            Some((&acc.buffer, Some((base.saturating_add(*offset), *len))))
        }
    }
}

/// Checks `args` against `kernel`'s parameters ([`launch::check_args`], the one check of
/// every layer): one per parameter, scalars of the parameter's type exactly, buffers of the
/// pointer's element type, ranges within what their accessors show. Every launch through
/// the runtime passes it before anything runs.
pub fn check_kernel_args(kernel: &kiln_ir::Kernel, args: &[Arg]) -> Result<(), launch::ArgError> {
    launch::check_args(kernel, args, args.len(), |a| {
        Some((a.buffer.elem, a.range.map_or(a.buffer.len, |(_, n)| n)))
    })
}

/// Up to this many buffers, [`merge_accessors`] finds a buffer by a linear search.
const SMALL: usize = 8;

/// One accessor per buffer, with the strongest mode asked for (in first-use order): a
/// command that reads and writes a buffer through two accessors read-writes it. The merged
/// accessor keeps a range only when every accessor of its buffer has that same range;
/// otherwise it covers the whole buffer (requirements are tracked per buffer anyway).
pub(crate) fn merge_accessors(accessors: impl IntoIterator<Item = Accessor>) -> Vec<Accessor> {
    let mut out: Vec<Accessor> = Vec::new();
    // Each buffer's place in `out`, by address: a fused chain of n kernels merges n
    // accessors per buffer over as many buffers. A launch's few buffers are looked up in
    // `out` itself (no map to allocate per submission).
    let mut at: HashMap<*const BufferInner, usize> = HashMap::new();
    for a in accessors {
        let found = if out.len() < SMALL {
            out.iter().position(|x| Arc::ptr_eq(&x.buffer, &a.buffer))
        } else {
            if at.is_empty() {
                at.extend(out.iter().enumerate().map(|(i, x)| (Arc::as_ptr(&x.buffer), i)));
            }
            at.get(&Arc::as_ptr(&a.buffer)).copied()
        };
        match found.map(|i| &mut out[i]) {
            Some(x) => {
                x.mode = x.mode.join(a.mode);
                x.props = x.props.join(a.props);
                if x.range != a.range {
                    x.range = None;
                }
            }
            None => {
                if !at.is_empty() || out.len() >= SMALL {
                    at.insert(Arc::as_ptr(&a.buffer), out.len());
                }
                out.push(a);
            }
        }
    }
    out
}
