//! The dependency model shared by every producer of commands: queues (live commands,
//! tracked by their [`crate::Event`]s), command graphs (recorded nodes, tracked by node
//! index) and the fusion-aware queue ([`crate::fusion`]: held kernels are live commands).
//!
//! A command declares *requirements* (one [`Accessor`] per buffer: read, write or
//! read-write) and explicit predecessors. [`AccessTrack`] turns the requirements into
//! edges, per buffer and in submission order:
//!
//! * a read depends on the buffer's last writer (read-after-write);
//! * a write depends on the last writer (write-after-write) and on every read since
//!   (write-after-read), and becomes the last writer.
//!
//! The bookkeeping is generic over the handle of a command so that the live scheduler and
//! the graph recorder derive exactly the same edges from the same accesses.

use std::sync::Arc;

use hashbrown::HashMap;

use crate::buffer::{Accessor, BufferInner};

/// Which commands last touched one buffer: the state the edges are derived from.
#[derive(Clone, Debug)]
pub(crate) struct AccessTrack<H> {
    /// The last command that wrote it.
    pub last_write: Option<H>,
    /// Commands that read it since then.
    pub reads: Vec<H>,
}

impl<H> Default for AccessTrack<H> {
    fn default() -> Self {
        AccessTrack { last_write: None, reads: Vec::new() }
    }
}

impl<H: Clone> AccessTrack<H> {
    /// Records that `cmd` accesses the buffer (`writes` or only reads) after everything
    /// recorded so far, and appends the commands it must wait for to `deps`.
    pub fn access(&mut self, cmd: H, writes: bool, deps: &mut Vec<H>) {
        deps.extend(self.last_write.clone());
        if writes {
            deps.append(&mut self.reads);
            self.last_write = Some(cmd);
        } else {
            self.reads.push(cmd);
        }
    }
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

#[cfg(test)]
mod tests {
    use super::AccessTrack;

    /// The three hazards, in one sequence: r1 r2 w3 r4 w5 on one buffer.
    #[test]
    fn raw_war_waw() {
        let mut t = AccessTrack::default();
        let mut deps = Vec::new();
        let mut step = |cmd: u32, writes: bool| {
            deps.clear();
            t.access(cmd, writes, &mut deps);
            deps.sort();
            deps.clone()
        };
        assert_eq!(step(1, false), Vec::<u32>::new());
        assert_eq!(step(2, false), Vec::<u32>::new());
        assert_eq!(step(3, true), vec![1, 2]); // write-after-read
        assert_eq!(step(4, false), vec![3]); // read-after-write
        assert_eq!(step(5, true), vec![3, 4]); // write-after-write and write-after-read
    }
}
