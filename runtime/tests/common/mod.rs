//! Shared by the device differential tests: a device driven through the runtime.

use std::sync::Arc;

use kiln_ir::interp::run;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::parse_module;
use kiln_runtime::cache::PersistentCache;
use kiln_runtime::context::driver_cache_key;
use kiln_runtime::{Context, ContextConfig, Device, DeviceError, Queue, QueueOrder};

/// The device through the runtime: a [`Context`] builds the program once (then hits),
/// a [`Queue`] runs it, and a second context over the same persistent cache directory
/// loads the stored binary instead of building, with the same results.
pub fn context_round_trip(dev: Arc<dyn Device>, tag: &str) {
    let dir = std::env::temp_dir().join(format!("kiln-{tag}-ctx-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let module = parse_module(&kiln_ir::testing::example_source("saxpy")).unwrap();
    let x: Vec<f32> = (0..64).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..64).map(|i| 100.0 - i as f32).collect();
    let mut want = vec![Buffer::from_slice(&x), Buffer::from_slice(&y)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1.5f32), Arg::scalar(60u32)];
    run(&module.kernels[0], &NdRange::new(&[64]), &args, &mut want).unwrap();
    let want_y = want[1].to_vec::<f32>().unwrap();
    let mut from_disk = Vec::new();
    for round in 0..2 {
        let cfg = ContextConfig {
            persistent: Some(PersistentCache::new(&dir)),
            workers: 2,
            ..Default::default()
        };
        let ctx = Context::with_config(dev.clone(), cfg);
        let q = Queue::new(&ctx, QueueOrder::InOrder);
        let (bx, by) = (kiln_runtime::Buffer::from_slice(&x), kiln_runtime::Buffer::from_slice(&y));
        for _ in 0..3 {
            let p = ctx.build_program(&module, &[], "").unwrap();
            from_disk.push(p.from_disk);
            let k = ctx.kernel(&p, "saxpy").unwrap();
            q.submit(|h| {
                let ax = h.read(&bx);
                let ay = h.read_write(&by);
                h.parallel_for(
                    &k,
                    NdRange::new(&[64]),
                    vec![ax.into(), ay.into(), Arg::scalar(1.5f32), Arg::scalar(60u32)],
                );
            });
            q.wait().unwrap();
            by.write(&y).unwrap();
        }
        // One more run, read back.
        let p = ctx.build_program(&module, &[], "").unwrap();
        let k = ctx.kernel(&p, "saxpy").unwrap();
        q.submit(|h| {
            let ax = h.read(&bx);
            let ay = h.read_write(&by);
            h.parallel_for(
                &k,
                NdRange::new(&[64]),
                vec![ax.into(), ay.into(), Arg::scalar(1.5f32), Arg::scalar(60u32)],
            );
        });
        assert_eq!(by.read().unwrap(), want_y, "round {round}");
        let st = ctx.program_cache_stats();
        assert_eq!((st.builds, st.hits), (1, 3), "round {round}");
        let disk = ctx.persistent_cache().unwrap();
        // The program, and from the second round the driver's state stored next to it
        // when the first context was dropped (Vulkan's pipeline cache); nothing else.
        let key = p.key.disk_key();
        let driver = driver_cache_key(&key);
        let items = disk.items();
        assert_eq!(items.iter().filter(|i| i.dir == disk.item_dir(&key)).count(), 1);
        let others: Vec<_> = items.iter().filter(|i| i.dir != disk.item_dir(&key)).collect();
        assert!(others.iter().all(|i| i.dir == disk.item_dir(&driver)), "round {round}: {items:?}");
        assert!(round > 0 || others.is_empty(), "stored before the context was dropped");
        assert!(disk.warnings().is_empty(), "{:?}", disk.warnings());
    }
    // The first context built and stored it; the second loaded it from disk.
    assert_eq!(from_disk, [false, false, false, true, true, true]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A damaged program binary is a load error, never a panic or a launch of garbage: the
/// binary `dev` builds loads, and every truncation of it fails with [`DeviceError::Load`].
pub fn damaged_binaries_do_not_load(dev: &dyn Device) {
    let m = parse_module("kernel k(x: ptr<global, u32>, n: u32) { x[global_id(0)] = n; }")
        .expect("parses");
    let m = kiln_ir::Verified::new(m).expect("verifies");
    let bin = dev.build(&m, &kiln_runtime::BuildOptions::default()).expect("builds");
    assert!(dev.load(&bin).is_ok());
    for cut in [0, 7, 12, bin.len() / 2, bin.len() - 1] {
        let Err(e) = dev.load(&bin[..cut]) else { panic!("a binary cut at {cut} loads") };
        assert!(matches!(e, DeviceError::Load { .. }), "{e}");
    }
}
