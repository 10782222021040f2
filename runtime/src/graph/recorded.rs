//! A partition's launches, copies and fills recorded into the device's own command list
//! ([`crate::Device::record`]: a Vulkan command buffer, a CUDA graph) at finalize, and
//! replayed as one submission.
//!
//! Each maximal run of kernel launches, buffer copies and buffer fills in a partition (steps
//! that do nothing may sit among them; host tasks, and copies or fills that would fail, end
//! a run, and run on the host between them) is one recording: a partition without host
//! tasks is one command buffer / CUDA graph. A bounds-checked launch (`-fsanitize=bounds`)
//! is recorded with an error buffer of its own in device memory, zeroed before each replay
//! and read after it: the first launch of the run (in the partition's order) that recorded
//! a violation fails the replay, with the interpreter's message, naming its node. Unlike a
//! launch-by-launch run, which stops at the failing launch, the launches after it in the
//! recording have run too (the buffers' contents after a failed run are unspecified either
//! way). Its buffers get their device copies at finalize, whose addresses the recording
//! keeps; each replay first makes those copies current (uploading what the host changed
//! since) and afterwards marks the written buffers as newest on the device. A device
//! without memory of its own records nothing: the partition's prepared step list runs step
//! by step.

use std::sync::Arc;

use super::exec::StepKind;
use super::GraphError;
use crate::buffer::BufferInner;
use crate::device::memory::dependencies;
use crate::device::{
    Device, RecordCopy, RecordFill, RecordLaunch, RecordStep, Recording, ResidentBuffer,
};
use crate::error::DeviceError;
use crate::sanitize::RecordedCheck;

/// Steps `start..end` of a partition, recorded.
pub(super) struct Recorded {
    pub start: usize,
    pub end: usize,
    recording: Box<dyn Recording>,
    /// Every buffer the recorded steps touch, with whether they write it.
    touched: Vec<(Arc<BufferInner>, bool)>,
    /// The bounds-checked launches' error buffers, in step order.
    checks: Vec<RecordedCheck>,
    space: u64,
}

/// The buffers a step touches, with whether it writes each.
type Touches<'a> = Vec<(&'a Arc<BufferInner>, bool)>;

/// What a step contributes to a recording: the buffers it touches (identity, writes) and
/// how to record it; `None` for a step a recording cannot hold (it runs on the host).
enum Part<'a> {
    /// Recorded as one device step touching these buffers.
    Step(Touches<'a>),
    /// Does nothing (an empty node, a copy of a buffer onto itself).
    Nothing,
}

fn recordable(k: &StepKind) -> Option<Part<'_>> {
    match k {
        StepKind::Launch(l) => Some(Part::Step(l.bufs.iter().map(|(b, w)| (b, *w)).collect())),
        StepKind::Copy(s, d) if Arc::ptr_eq(&s.buffer, &d.buffer) => Some(Part::Nothing),
        // An invalid copy or fill stays a host step, which reports its error when it runs
        // (as an eager one would).
        StepKind::Copy(s, d) if s.buffer.elem == d.buffer.elem && s.buffer.len <= d.buffer.len => {
            Some(Part::Step(vec![(&s.buffer, false), (&d.buffer, true)]))
        }
        StepKind::Fill(d, v) if v.scalar() == d.buffer.elem => {
            Some(Part::Step(vec![(&d.buffer, true)]))
        }
        StepKind::Nothing => Some(Part::Nothing),
        _ => None,
    }
}

/// Records the runs of launches, copies and fills among `steps` (each labelled for errors)
/// on `dev`.
pub(super) fn record(
    steps: &[(&str, &StepKind)],
    dev: &dyn Device,
) -> Result<Vec<Recorded>, GraphError> {
    let Some(space) = dev.memory_space() else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let mut i = 0;
    while i < steps.len() {
        if !matches!(recordable(steps[i].1), Some(Part::Step(_))) {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < steps.len() && recordable(steps[j].1).is_some() {
            j += 1;
        }
        let run: Vec<(&str, &StepKind, Touches<'_>)> = steps[i..j]
            .iter()
            .filter_map(|&(label, k)| match recordable(k) {
                Some(Part::Step(t)) => Some((label, k, t)),
                _ => None,
            })
            .collect();
        let labels: Vec<&str> = run.iter().map(|r| r.0).collect();
        let err = |source| GraphError::Kernel { node: labels.join(", "), source };
        let resident = |b: &Arc<BufferInner>| -> Result<ResidentBuffer, DeviceError> {
            let mem = b.data().allocated(dev, space)?;
            Ok(ResidentBuffer { mem, elem: b.elem, len: b.len })
        };
        let mut list = Vec::with_capacity(run.len());
        let mut checks = Vec::new();
        for (label, k, _) in &run {
            let step = match k {
                StepKind::Launch(l) => {
                    let mut buffers: Vec<ResidentBuffer> = l
                        .bufs
                        .iter()
                        .map(|(b, _)| resident(b))
                        .collect::<Result<_, _>>()
                        .map_err(err)?;
                    let mut args = l.args.to_vec();
                    if let Some(s) = &l.kernel.sanitized {
                        let lens = l.bufs.iter().map(|(b, _)| (b.elem, b.len)).collect();
                        let named = |source| GraphError::Kernel { node: label.to_string(), source };
                        let (check, full) =
                            RecordedCheck::new(dev, label, s, &l.args, lens).map_err(named)?;
                        args = full;
                        buffers.push(ResidentBuffer {
                            mem: check.mem.clone(),
                            elem: kiln_ir::Scalar::U32,
                            len: kiln_passes::sanitize::ERROR_WORDS,
                        });
                        checks.push(check);
                    }
                    RecordStep::Launch(RecordLaunch {
                        kernel: l.kernel.handle.clone(),
                        range: l.range,
                        args,
                        buffers,
                        after: Vec::new(),
                    })
                }
                StepKind::Copy(s, d) => RecordStep::Copy(RecordCopy {
                    src: resident(&s.buffer).map_err(err)?,
                    dst: resident(&d.buffer).map_err(err)?,
                    after: Vec::new(),
                }),
                StepKind::Fill(d, v) => {
                    let value = kiln_ir::launch::Buffer::from_imms(d.buffer.elem, &[*v])
                        .map_err(|e| err(DeviceError::Launch(e.to_string())))?
                        .as_bytes()
                        .to_vec();
                    RecordStep::Fill(RecordFill {
                        dst: resident(&d.buffer).map_err(err)?,
                        value,
                        after: Vec::new(),
                    })
                }
                _ => unreachable!("only launches, copies and fills are recorded"),
            };
            list.push(step);
        }
        let after = dependencies(run.len(), |k| {
            run[k].2.iter().map(|(b, w)| (Arc::as_ptr(b) as usize, *w)).collect()
        });
        for (s, a) in list.iter_mut().zip(after) {
            match s {
                RecordStep::Launch(l) => l.after = a,
                RecordStep::Copy(c) => c.after = a,
                RecordStep::Fill(f) => f.after = a,
            }
        }
        let recorded = dev.record(&list).map_err(|e| {
            // Name the step the device refused, when it refuses it alone too.
            let alone = list.iter().zip(&labels).find_map(|(s, label)| {
                dev.record(&[s.alone()])
                    .err()
                    .map(|source| GraphError::Kernel { node: label.to_string(), source })
            });
            alone.unwrap_or_else(|| err(e))
        })?;
        if let Some(recording) = recorded {
            let touched =
                run.iter().flat_map(|r| r.2.iter().map(|(b, w)| (Arc::clone(b), *w))).collect();
            out.push(Recorded { start: i, end: j, recording, touched, checks, space });
        }
        i = j;
    }
    Ok(out)
}

impl Recorded {
    /// Replays the recording on `dev`: its buffers made current on the device first, the
    /// written ones newest there afterwards. A bounds violation is an error with the label
    /// of the node that recorded it.
    pub fn replay(&self, dev: &dyn Device) -> Result<(), (Option<&str>, DeviceError)> {
        self.replay_all(dev).map_err(|e| (None, e))?;
        for c in &self.checks {
            c.check().map_err(|e| (Some(&*c.label), e))?;
        }
        Ok(())
    }

    fn replay_all(&self, dev: &dyn Device) -> Result<(), DeviceError> {
        for c in &self.checks {
            c.reset()?;
        }
        // A buffer's device copy, once made (at finalize), lives as long as the buffer: it
        // is the memory the recording names.
        for (b, _) in &self.touched {
            b.data().on_device(dev, self.space)?;
        }
        self.recording.replay()?;
        for (b, w) in &self.touched {
            if *w {
                b.data().device_wrote(self.space);
            }
        }
        Ok(())
    }
}
