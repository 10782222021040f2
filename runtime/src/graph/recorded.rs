//! A partition's launches recorded into the device's own command list
//! ([`crate::Device::record`]: a Vulkan command buffer, a CUDA graph) at finalize, and
//! replayed as one submission.
//!
//! Each maximal run of kernel launches in a partition (steps that do nothing may sit among
//! them; copies, fills and host tasks end a run, and run on the host between them) is one
//! recording. Its buffers get their device copies at finalize, whose addresses the
//! recording keeps; each replay first makes those copies current (uploading what the host
//! changed since) and afterwards marks the written buffers as newest on the device. A
//! device without memory of its own records nothing: the partition's prepared launch list
//! runs launch by launch.

use std::sync::Arc;

use super::exec::StepKind;
use super::GraphError;
use crate::device::memory::dependencies;
use crate::device::{Device, RecordLaunch, Recording, ResidentBuffer};
use crate::error::DeviceError;
use crate::scheduler::PreparedLaunch;

/// Steps `start..end` of a partition, recorded.
pub(super) struct Recorded {
    pub start: usize,
    pub end: usize,
    recording: Box<dyn Recording>,
    launches: Vec<PreparedLaunch>,
    space: u64,
}

fn recordable(k: &StepKind) -> Option<&PreparedLaunch> {
    match k {
        StepKind::Launch(l) if l.kernel.sanitized.is_none() => Some(l),
        _ => None,
    }
}

/// Records the runs of launches among `steps` (each labelled for errors) on `dev`.
pub(super) fn record(
    steps: &[(&str, &StepKind)],
    dev: &dyn Device,
) -> Result<Vec<Recorded>, GraphError> {
    let Some(space) = dev.memory_space() else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        if recordable(steps[i].1).is_none() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < steps.len()
            && (recordable(steps[j].1).is_some() || matches!(steps[j].1, StepKind::Nothing))
        {
            j += 1;
        }
        let (labels, launches): (Vec<&str>, Vec<PreparedLaunch>) =
            steps[i..j].iter().filter_map(|s| recordable(s.1).map(|l| (s.0, l.clone()))).unzip();
        let err = |source| GraphError::Kernel { node: labels.join(", "), source };
        let mut list = Vec::with_capacity(launches.len());
        for l in &launches {
            let buffers = l
                .bufs
                .iter()
                .map(|(b, _)| {
                    let mem = b.data().allocated(dev, space)?;
                    Ok(ResidentBuffer { mem, elem: b.elem, len: b.len })
                })
                .collect::<Result<Vec<_>, DeviceError>>()
                .map_err(err)?;
            list.push(RecordLaunch {
                kernel: l.kernel.handle.clone(),
                range: l.range.clone(),
                args: l.args.clone(),
                buffers,
                after: Vec::new(),
            });
        }
        let after = dependencies(launches.len(), |k| {
            launches[k].bufs.iter().map(|(b, w)| (Arc::as_ptr(b) as usize, *w)).collect()
        });
        for (l, a) in list.iter_mut().zip(after) {
            l.after = a;
        }
        let recorded = dev.record(&list).map_err(|e| {
            // Name the launch the device refused, when it refuses it alone too.
            let alone = list.iter().zip(&labels).find_map(|(l, label)| {
                let l = RecordLaunch { after: Vec::new(), ..l.clone() };
                dev.record(&[l])
                    .err()
                    .map(|source| GraphError::Kernel { node: label.to_string(), source })
            });
            alone.unwrap_or_else(|| err(e))
        })?;
        if let Some(recording) = recorded {
            out.push(Recorded { start: i, end: j, recording, launches, space });
        }
        i = j;
    }
    Ok(out)
}

impl Recorded {
    /// Replays the recording on `dev`: its buffers made current on the device first, the
    /// written ones newest there afterwards.
    pub fn replay(&self, dev: &dyn Device) -> Result<(), DeviceError> {
        // A buffer's device copy, once made (at finalize), lives as long as the buffer: it
        // is the memory the recording names.
        for l in &self.launches {
            for (b, _) in &l.bufs {
                b.data().on_device(dev, self.space)?;
            }
        }
        self.recording.replay()?;
        for l in &self.launches {
            l.wrote(self.space);
        }
        Ok(())
    }
}
