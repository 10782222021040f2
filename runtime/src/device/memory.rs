//! Device-resident buffers and device recordings: the hooks a device with memory of its own
//! (CUDA, Vulkan) implements so that buffers stay on it between launches and a command
//! graph's launches are recorded once into a device command list.
//!
//! A device that runs kernels on host memory (the interpreter, the cpu device) implements
//! none of this: [`super::Device::memory_space`] is `None`, every launch gets the host
//! contents, and a command graph replays its own prepared launch list.
//!
//! For a device with a memory space, the runtime keeps, per buffer, the host contents and
//! at most one copy per memory space, each marked valid or stale
//! ([`crate::buffer`]): a launch uploads a stale copy first and marks the buffers it writes
//! as valid only on the device; a host access ([`crate::Buffer::read`],
//! [`crate::AnyBuffer::contents`], [`crate::Buffer::write`], host tasks, copies, fills)
//! downloads first. A buffer's copy on a device, once allocated, lives as long as the
//! buffer, so a recording that baked its address in stays valid.

use std::any::Any;
use std::sync::Arc;

use kiln_ir::launch::{Arg, NdRange};
use kiln_ir::Scalar;

use super::Handle;
use crate::error::DeviceError;

/// One buffer's storage in a device's own memory, made by [`super::Device::alloc`].
pub trait DeviceMemory: Any + Send + Sync {
    /// Its size in bytes (at least the buffer's).
    fn bytes(&self) -> usize;
    /// Copies `data` to the start of the storage (the launches that use it have finished).
    fn upload(&self, data: &[u8]) -> Result<(), DeviceError>;
    /// Copies the start of the storage into `out` (the launches writing it have finished).
    fn download(&self, out: &mut [u8]) -> Result<(), DeviceError>;
    /// The value itself, for the device that made it to look inside.
    fn as_any(&self) -> &dyn Any;
}

/// A shared handle to device memory.
pub type Memory = Arc<dyn DeviceMemory>;

/// A launch's buffer in device memory, with what it holds.
#[derive(Clone)]
pub struct ResidentBuffer {
    /// The storage.
    pub mem: Memory,
    /// The element type.
    pub elem: Scalar,
    /// The number of elements.
    pub len: usize,
}

/// One launch of a list that a device records once and replays
/// ([`super::Device::record`]).
#[derive(Clone)]
pub struct RecordLaunch {
    /// The kernel, made by the recording device's [`super::Device::kernel`].
    pub kernel: Handle,
    /// Its nd-range.
    pub range: NdRange,
    /// One argument per parameter; [`Arg::Buffer`] indexes `buffers`.
    pub args: Vec<Arg>,
    /// The distinct buffers it binds.
    pub buffers: Vec<ResidentBuffer>,
    /// The earlier launches of the list it must run after (it touches a buffer one of them
    /// writes, or writes one they touch); the others may overlap with it.
    pub after: Vec<usize>,
}

/// A copy of a whole buffer into the start of another (same element type, the destination
/// at least as long), in one list that a device records ([`super::Device::record`]).
#[derive(Clone)]
pub struct RecordCopy {
    /// The buffer read.
    pub src: ResidentBuffer,
    /// The buffer written: its first `src.len` elements; the rest stays as it is.
    pub dst: ResidentBuffer,
    /// The earlier steps of the list it must run after (as [`RecordLaunch::after`]).
    pub after: Vec<usize>,
}

/// A fill of every element of a buffer with one value, in one list that a device records.
#[derive(Clone)]
pub struct RecordFill {
    /// The buffer written, every element of it.
    pub dst: ResidentBuffer,
    /// The value's bytes as the buffer stores one element (`dst.elem.size_bytes()` long,
    /// little-endian).
    pub value: Vec<u8>,
    /// The earlier steps of the list it must run after (as [`RecordLaunch::after`]).
    pub after: Vec<usize>,
}

/// One step of a list that a device records once and replays ([`super::Device::record`]):
/// a kernel launch, a buffer copy or a buffer fill. `after` indices count all steps.
#[derive(Clone)]
pub enum RecordStep {
    /// A kernel launch.
    Launch(RecordLaunch),
    /// A buffer-to-buffer copy.
    Copy(RecordCopy),
    /// A buffer fill.
    Fill(RecordFill),
}

impl RecordStep {
    /// The earlier steps it must run after.
    pub fn after(&self) -> &[usize] {
        match self {
            RecordStep::Launch(l) => &l.after,
            RecordStep::Copy(c) => &c.after,
            RecordStep::Fill(f) => &f.after,
        }
    }

    /// The same step with no `after` list (recorded alone).
    pub fn alone(&self) -> RecordStep {
        let mut s = self.clone();
        match &mut s {
            RecordStep::Launch(l) => l.after.clear(),
            RecordStep::Copy(c) => c.after.clear(),
            RecordStep::Fill(f) => f.after.clear(),
        }
        s
    }

    /// The memory it names (kept alive by a recording of it).
    pub fn memories(&self) -> Vec<Memory> {
        match self {
            RecordStep::Launch(l) => l.buffers.iter().map(|b| b.mem.clone()).collect(),
            RecordStep::Copy(c) => vec![c.src.mem.clone(), c.dst.mem.clone()],
            RecordStep::Fill(f) => vec![f.dst.mem.clone()],
        }
    }
}

/// What a device's recording of steps names and must keep alive as long as it exists: the
/// kernels (their modules stay loaded) and the buffers' memory (their addresses are baked
/// into the recording).
pub struct KeepAlive {
    _kernels: Vec<Handle>,
    _mems: Vec<Memory>,
}

impl KeepAlive {
    /// The kernels and memory `steps` name.
    pub fn of(steps: &[RecordStep]) -> KeepAlive {
        KeepAlive {
            _kernels: steps
                .iter()
                .filter_map(|s| match s {
                    RecordStep::Launch(l) => Some(l.kernel.clone()),
                    _ => None,
                })
                .collect(),
            _mems: steps.iter().flat_map(RecordStep::memories).collect(),
        }
    }
}

/// A list of steps recorded into the device's own command list (a Vulkan command
/// buffer, a CUDA graph), replayed as one submission.
pub trait Recording: Send + Sync {
    /// Runs every step of the list in an order its `after` lists allow, after everything
    /// submitted to the device before; returns when all have finished, or once they are
    /// submitted on a device that implements [`super::Device::finish`].
    fn replay(&self) -> Result<(), DeviceError>;
}

/// A launch whose misaligned ranges were staged into buffers of their own
/// ([`stage_ranges`]).
pub struct Staged {
    /// The launch's arguments, staged ranges bound to their stand-ins.
    pub args: Vec<Arg>,
    /// The launch's buffers, the stand-ins appended.
    pub buffers: Vec<ResidentBuffer>,
    /// Per stand-in: it, the buffer of its range, the range's first byte and its bytes.
    back: Vec<(Memory, ResidentBuffer, usize, usize)>,
}

impl Staged {
    /// Copies each stand-in's contents back into its range (the launch has finished).
    pub fn copy_back(&self) -> Result<(), DeviceError> {
        for (temp, b, at, bytes) in &self.back {
            let mut whole = vec![0u8; b.len * b.elem.size_bytes()];
            b.mem.download(&mut whole)?;
            temp.download(&mut whole[*at..at + bytes])?;
            b.mem.upload(&whole)?;
        }
        Ok(())
    }
}

/// For a launch on device memory with ranged arguments ([`Arg::Range`]) whose byte offset
/// is not a multiple of `align` (where the device cannot bind a range: a Vulkan descriptor
/// offset, CUDA's 16-byte vector accesses): each such range copied into memory of its own
/// (from `alloc`), which the launch binds whole and whose contents go back into the range
/// afterwards ([`Staged::copy_back`]). Exact only while no other argument of the launch
/// binds the same buffer (they would not see each other's stores), so that case is
/// refused, naming `limit`. `None` when nothing needs staging.
pub fn stage_ranges(
    args: &[Arg],
    buffers: &[ResidentBuffer],
    align: u64,
    limit: &str,
    alloc: impl Fn(usize) -> Result<Memory, DeviceError>,
) -> Result<Option<Staged>, DeviceError> {
    let misaligned = |a: &Arg| match *a {
        // A zero-length range binds no element: nothing to stage.
        Arg::Range { buffer, offset, len } if len > 0 => buffers.get(buffer).is_some_and(|b| {
            !(offset as u64 * b.elem.size_bytes() as u64).is_multiple_of(align.max(1))
        }),
        _ => false,
    };
    if !args.iter().any(misaligned) {
        return Ok(None);
    }
    let mut staged = Staged { args: args.to_vec(), buffers: buffers.to_vec(), back: vec![] };
    for (n, a) in args.iter().enumerate() {
        let Arg::Range { buffer, offset, len } = *a else { continue };
        if !misaligned(a) {
            continue;
        }
        let b = &buffers[buffer];
        if offset.checked_add(len).is_none_or(|end| end > b.len) {
            continue; // the launch's own checks refuse it, naming it
        }
        let size = b.elem.size_bytes();
        let others = args.iter().enumerate().find(|(m, o)| *m != n && o.buffer() == Some(&buffer));
        if let Some((m, _)) = others {
            return Err(DeviceError::Launch(format!(
                "argument {n} binds elements from offset {offset} of buffer {buffer}, byte {}, \
                 which is not a multiple of {limit}, and argument {m} binds the same buffer: \
                 kiln cannot stage the range and keep the two views coherent; use an offset \
                 that is a multiple of {align} bytes",
                offset * size
            )));
        }
        let mut whole = vec![0u8; b.len * size];
        b.mem.download(&mut whole)?;
        let temp = alloc(len * size)?;
        temp.upload(&whole[offset * size..(offset + len) * size])?;
        staged.args[n] = Arg::Buffer(staged.buffers.len());
        staged.buffers.push(ResidentBuffer { mem: temp.clone(), elem: b.elem, len });
        staged.back.push((temp, b.clone(), offset * size, len * size));
    }
    Ok(Some(staged))
}

/// A memory space number no other device of this process has (for
/// [`super::Device::memory_space`]).
pub fn new_space() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// For each launch of a list, the earlier ones it must run after: the last one writing a
/// buffer it touches, and when it writes one, those reading that buffer since (ordering is
/// transitive, so older ones are covered). `touches(i)` gives launch `i`'s buffers as
/// (identity, writes) pairs, each buffer once.
pub(crate) fn dependencies(
    n: usize,
    touches: impl Fn(usize) -> Vec<(usize, bool)>,
) -> Vec<Vec<usize>> {
    // Per buffer: the last writer and the readers since.
    let mut seen: std::collections::HashMap<usize, (Option<usize>, Vec<usize>)> =
        Default::default();
    (0..n)
        .map(|j| {
            let mut after = Vec::new();
            for (b, writes) in touches(j) {
                let (last, readers) = seen.entry(b).or_default();
                after.extend(*last);
                if writes {
                    after.append(readers);
                    *last = Some(j);
                } else {
                    readers.push(j);
                }
            }
            after.sort_unstable();
            after.dedup();
            after
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_follow_raw_war_waw_only() {
        // 0 writes A; 1 reads A (RAW); 2 reads A (no edge to 1: both read); 3 writes B;
        // 4 writes A (WAR on 1, 2 and WAW on 0).
        let t =
            [vec![(0, true)], vec![(0, false)], vec![(0, false)], vec![(1, true)], vec![(0, true)]];
        let d = dependencies(5, |i| t[i].clone());
        assert_eq!(d, vec![vec![], vec![0], vec![0], vec![], vec![0, 1, 2]]);
    }
}
