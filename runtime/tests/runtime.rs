//! Runtime core: contexts and caches, buffers, queues, the scheduler, events and errors.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use kiln_ir::{parse_module, Module};
use kiln_runtime::cache::PersistentCache;
use kiln_runtime::{
    interp_device, Arg, Buffer, Context, ContextConfig, EventStatus, NdRange, Queue, QueueOrder,
    RuntimeError,
};

const SAXPY: &str = "kernel saxpy(x: ptr<global, f32>, y: ptr<global, f32>, a: f32, n: u32) {
  let i: u32 = global_id(0);
  if i < n {
    y[i] = a * x[i] + y[i];
  }
}

kernel scale(x: ptr<global, f32>, a: f32) {
  let i: u32 = global_id(0);
  x[i] = a * x[i];
}
";

fn module() -> Module {
    parse_module(SAXPY).unwrap()
}

fn ctx() -> Context {
    Context::with_config(interp_device(), ContextConfig { workers: 4, ..Default::default() })
}

#[test]
fn programs_and_kernels_are_cached() {
    let c = ctx();
    let m = module();
    let p1 = c.build_program(&m, &[], "").unwrap();
    let p2 = c.build_program(&m, &[], "").unwrap();
    assert!(std::sync::Arc::ptr_eq(&p1.handle, &p2.handle));
    // Other options or spec constants are other programs.
    let p3 = c.build_program(&m, &[], "-O0").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&p1.handle, &p3.handle));
    c.build_program(&m, &[1, 2], "").unwrap();
    let st = c.program_cache_stats();
    assert_eq!((st.builds, st.hits, st.entries), (3, 1, 3));
    let k1 = c.kernel(&p1, "saxpy").unwrap();
    let k2 = c.kernel(&p2, "saxpy").unwrap();
    assert!(std::sync::Arc::ptr_eq(&k1.handle, &k2.handle));
    assert_eq!(c.kernel_cache_stats().builds, 1);
    let e = c.kernel(&p1, "nope").unwrap_err();
    assert!(e.to_string().contains("no kernel `nope` (kernels: saxpy, scale)"), "{e}");
    // A module that does not verify fails to build, with the verifier's message.
    let bad = parse_module("kernel k(n: u32) { let i: u32 = 1.5f32; }").unwrap();
    let e = c.build_program(&bad, &[], "").unwrap_err();
    assert!(e.to_string().contains("program build failed"), "{e}");
}

#[test]
fn env_build_options_are_part_of_the_key() {
    let d = interp_device();
    let a = Context::with_config(d.clone(), ContextConfig::default());
    let b = Context::with_config(
        d,
        ContextConfig { env_build_options: "-cl-fast".into(), ..Default::default() },
    );
    let ka = a.program_key(&module(), &[], "-g");
    let kb = b.program_key(&module(), &[], "-g");
    assert_eq!(&*ka.options, "-g");
    assert_eq!(&*kb.options, "-g -cl-fast");
    assert_ne!(ka, kb);
}

#[test]
fn persistent_cache_serves_a_second_context() {
    let dir = std::env::temp_dir().join(format!("kiln-rt-persist-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mk = || {
        Context::with_config(
            interp_device(),
            ContextConfig { persistent: Some(PersistentCache::new(&dir)), ..Default::default() },
        )
    };
    let p = mk().build_program(&module(), &[], "").unwrap();
    assert!(!p.from_disk);
    let c2 = mk();
    let p = c2.build_program(&module(), &[], "").unwrap();
    assert!(p.from_disk);
    // The loaded program runs.
    let k = c2.kernel(&p, "scale").unwrap();
    let x = Buffer::from_slice(&[1.0f32, 2.0]);
    let q = Queue::new(&c2, QueueOrder::InOrder);
    q.submit(|h| {
        let a = h.read_write(&x);
        h.parallel_for(&k, NdRange::new(&[2]), vec![a.into(), Arg::scalar(3.0f32)]);
    });
    assert_eq!(x.read().unwrap(), vec![3.0, 6.0]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn saxpy_through_a_queue() {
    let c = ctx();
    let k = c.get_kernel(&module(), "saxpy").unwrap();
    let x = Buffer::from_slice(&[1.0f32, 2.0, 3.0, 4.0]);
    let y = Buffer::from_slice(&[10.0f32; 4]);
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let e = q.submit(|h| {
        let xa = h.read(&x);
        let ya = h.read_write(&y);
        h.parallel_for(
            &k,
            NdRange::new(&[4]),
            vec![xa.into(), ya.into(), Arg::scalar(2.0f32), Arg::scalar(4u32)],
        );
    });
    e.wait().unwrap();
    assert_eq!(e.status(), EventStatus::Complete);
    assert_eq!(y.read().unwrap(), vec![12.0, 14.0, 16.0, 18.0]);
    assert_eq!(x.read().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
}

/// Arguments are checked against the kernel's parameters before anything runs, by the one
/// check of every layer: a mismatch is `RuntimeError::Argument` naming the command and the
/// argument (it was the device's launch error), and a buffer argument given with
/// `Arg::from(&buffer)` needs no accessor of its own (the launch declares it).
#[test]
fn queue_launch_arguments_are_checked_naming_the_argument() {
    let c = ctx();
    let k = c.get_kernel(&module(), "scale").unwrap();
    let x = Buffer::from_slice(&[1.0f32, 2.0]);
    let q = Queue::new(&c, QueueOrder::InOrder);
    let e = q.submit(|h| {
        h.parallel_for(&k, NdRange::new(&[2]), vec![Arg::from(&x), Arg::scalar(2.0f64)]);
    });
    let err = e.wait().unwrap_err();
    assert!(matches!(err, RuntimeError::Argument { .. }), "{err:?}");
    assert!(
        err.to_string().ends_with("argument 1 (`a`) is a f32 but the value given is a f64"),
        "{err}"
    );
    // Commands after a failed one fail with it (`DependencyFailed`): a fresh queue and
    // buffer run, with the buffer argument declaring its own access.
    let y = Buffer::from_slice(&[1.0f32, 2.0]);
    let q = Queue::new(&c, QueueOrder::InOrder);
    q.submit(|h| {
        h.parallel_for(&k, NdRange::new(&[2]), vec![Arg::from(&y), Arg::scalar(3.0f32)]);
    })
    .wait()
    .unwrap();
    assert_eq!(y.read().unwrap(), vec![3.0, 6.0]);
}

/// A gate that host tasks open; a bounded wait so a wrong schedule fails instead of hanging.
#[derive(Default)]
struct Gate(Mutex<Vec<&'static str>>, Condvar);

impl Gate {
    fn log(&self, s: &'static str) {
        self.0.lock().unwrap().push(s);
        self.1.notify_all();
    }
    fn wait_for(&self, s: &'static str) -> bool {
        let g = self.0.lock().unwrap();
        let (g, _) =
            self.1.wait_timeout_while(g, Duration::from_secs(20), |v| !v.contains(&s)).unwrap();
        g.contains(&s)
    }
    fn entries(&self) -> Vec<&'static str> {
        self.0.lock().unwrap().clone()
    }
}

#[test]
fn dependencies_from_requirements() {
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let b = Buffer::<i32>::zeroed(1);
    let log = Arc::new(Gate::default());
    // W1 writes; R1, R2 read (RAW on W1); W2 writes (WAR on R1, R2; WAW on W1); R3 reads W2.
    let task = |h: &mut kiln_runtime::Handler,
                acc: kiln_runtime::Accessor,
                tag: &'static str,
                val: Option<i32>| {
        let log = log.clone();
        h.host_task(move |ctx| {
            std::thread::sleep(Duration::from_millis(5));
            if let Some(v) = val {
                ctx.write(&acc, &[v])?;
            }
            log.log(tag);
            Ok(())
        });
    };
    q.submit(|h| {
        let a = h.write(&b);
        task(h, a, "W1", Some(1));
    });
    let seen = Arc::new(Mutex::new(Vec::new()));
    for tag in ["R1", "R2"] {
        let seen = seen.clone();
        let log = log.clone();
        q.submit(|h| {
            let a = h.read(&b);
            h.host_task(move |ctx| {
                seen.lock().unwrap().push(ctx.read::<i32>(&a).unwrap()[0]);
                log.log(tag);
                Ok(())
            });
        });
    }
    q.submit(|h| {
        let a = h.write(&b);
        task(h, a, "W2", Some(2));
    });
    q.submit(|h| {
        let a = h.read(&b);
        let seen = seen.clone();
        let log = log.clone();
        h.host_task(move |ctx| {
            seen.lock().unwrap().push(ctx.read::<i32>(&a).unwrap()[0]);
            log.log("R3");
            Ok(())
        });
    });
    q.wait().unwrap();
    let order = log.entries();
    let pos = |s| order.iter().position(|x| *x == s).unwrap();
    assert!(pos("W1") < pos("R1") && pos("W1") < pos("R2"), "RAW: {order:?}");
    assert!(pos("R1") < pos("W2") && pos("R2") < pos("W2"), "WAR: {order:?}");
    assert!(pos("W2") < pos("R3"), "RAW: {order:?}");
    // R1 and R2 saw W1's value, R3 saw W2's.
    assert_eq!(*seen.lock().unwrap(), vec![1, 1, 2]);
    assert_eq!(b.read().unwrap(), vec![2]);
}

#[test]
fn write_after_write_keeps_submission_order() {
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let b = Buffer::<u32>::zeroed(1);
    for v in 1..=20u32 {
        q.submit(|h| {
            let a = h.read_write(&b);
            h.host_task(move |ctx| {
                let old = ctx.read::<u32>(&a).unwrap()[0];
                // Each write sees the previous one: a chain 0,1,2,... with no reordering.
                if old != v - 1 {
                    return Err(format!("write {v} saw {old}"));
                }
                ctx.write(&a, &[v])
            });
        });
    }
    q.wait().unwrap();
    assert_eq!(b.read().unwrap(), vec![20]);
}

#[test]
fn out_of_order_queue_runs_independent_commands_concurrently() {
    // Two host tasks that each wait for the other to start: they finish only if they run
    // at the same time (a serial schedule fails after the bounded wait).
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let gate = Arc::new(Gate::default());
    for (me, other) in [("a", "b"), ("b", "a")] {
        let g = gate.clone();
        q.submit(|h| {
            h.host_task(move |_| {
                g.log(me);
                if g.wait_for(other) {
                    Ok(())
                } else {
                    Err(format!("{me} never saw {other} running"))
                }
            });
        });
    }
    q.wait().unwrap();
}

#[test]
fn in_order_queue_serializes() {
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::InOrder);
    let log = Arc::new(Mutex::new(Vec::new()));
    for i in 0..10 {
        let log = log.clone();
        q.submit(|h| {
            h.host_task(move |_| {
                std::thread::sleep(Duration::from_millis((10 - i) as u64));
                log.lock().unwrap().push(i);
                Ok(())
            });
        });
    }
    q.wait().unwrap();
    assert_eq!(*log.lock().unwrap(), (0..10).collect::<Vec<_>>());
}

#[test]
fn events_across_queues() {
    let c = ctx();
    let q1 = Queue::new(&c, QueueOrder::OutOfOrder);
    let q2 = Queue::new(&c, QueueOrder::OutOfOrder);
    let log = Arc::new(Mutex::new(Vec::new()));
    let l = log.clone();
    let e1 = q1.submit(|h| {
        h.host_task(move |_| {
            std::thread::sleep(Duration::from_millis(20));
            l.lock().unwrap().push("first");
            Ok(())
        });
    });
    let l = log.clone();
    let e2 = q2.submit(|h| {
        h.depends_on(&e1);
        h.host_task(move |_| {
            l.lock().unwrap().push("second");
            Ok(())
        });
    });
    e2.wait().unwrap();
    assert_eq!(*log.lock().unwrap(), vec!["first", "second"]);
    // Buffer requirements order commands of different queues too.
    let k = c.get_kernel(&module(), "scale").unwrap();
    let x = Buffer::from_slice(&[1.0f32; 8]);
    for q in [&q1, &q2, &q1] {
        q.submit(|h| {
            let a = h.read_write(&x);
            h.parallel_for(&k, NdRange::new(&[8]), vec![a.into(), Arg::scalar(2.0f32)]);
        });
    }
    assert_eq!(x.read().unwrap(), vec![8.0f32; 8]);
}

#[test]
fn errors_surface_at_wait_naming_the_command() {
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::InOrder);
    let k = c.get_kernel(&module(), "scale").unwrap();
    let x = Buffer::from_slice(&[1.0f32; 4]);
    // Out of bounds: 8 work-items over 4 elements.
    let e1 = q.submit(|h| {
        let a = h.read_write(&x);
        h.parallel_for(&k, NdRange::new(&[8]), vec![a.into(), Arg::scalar(2.0f32)]);
    });
    let e2 = q.submit(|h| {
        h.name("after");
        h.host_task(|_| Ok(()));
    });
    let err = e1.wait().unwrap_err();
    assert!(matches!(err, RuntimeError::Kernel { .. }), "{err}");
    assert!(err.command().starts_with("kernel `scale` #"), "{err}");
    assert!(err.to_string().contains("out of bounds"), "{err}");
    let err2 = e2.wait().unwrap_err();
    assert!(
        matches!(&err2, RuntimeError::DependencyFailed { dependency, .. } if dependency == err.command()),
        "{err2}"
    );
    assert!(err2.command().starts_with("`after` #"));
    assert_eq!(q.wait().unwrap_err(), err);
    // Host task errors and panics.
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let e = q.submit(|h| {
        h.name("checker");
        h.host_task(|_| Err("value out of range".into()));
    });
    let err = e.wait().unwrap_err();
    assert_eq!(err.to_string(), format!("command {} failed: value out of range", err.command()));
    let e = q.submit(|h| h.host_task(|_| panic!("boom")));
    assert!(
        matches!(e.wait().unwrap_err(), RuntimeError::Panicked { message, .. } if message == "boom")
    );
    // Wrong arguments are launch errors, at wait.
    let e = q.submit(|h| {
        let a = h.read_write(&x);
        h.parallel_for(&k, NdRange::new(&[4]), vec![a.into()]);
    });
    assert!(e.wait().is_err());
}

#[test]
fn host_write_waits_for_readers() {
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::OutOfOrder);
    let b = Buffer::from_slice(&[5i32]);
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    q.submit(|h| {
        let a = h.read(&b);
        h.host_task(move |ctx| {
            std::thread::sleep(Duration::from_millis(20));
            *s.lock().unwrap() = Some(ctx.read::<i32>(&a).unwrap()[0]);
            Ok(())
        });
    });
    b.write(&[6]).unwrap();
    assert_eq!(*seen.lock().unwrap(), Some(5));
    assert_eq!(b.read().unwrap(), vec![6]);
}

#[test]
fn prepared_modules_look_kernels_up_by_key() {
    let c = ctx();
    let m = module();
    let prep = c.prepare(&m, &[], "");
    assert_eq!(prep.key(), &c.program_key(&m, &[], ""));
    let k1 = c.kernel_of(&prep, "saxpy").unwrap();
    let k2 = c.kernel_of(&prep, "saxpy").unwrap();
    assert!(std::sync::Arc::ptr_eq(&k1.handle, &k2.handle));
    // The program built once; the second lookup was a kernel-cache hit.
    assert_eq!(c.program_cache_stats().builds, 1);
    let ks = c.kernel_cache_stats();
    assert_eq!((ks.builds, ks.hits), (1, 1));
    // The same kernel as through build_program + kernel (one cache entry for both).
    let p = c.build_program(&m, &[], "").unwrap();
    let k3 = c.kernel(&p, "saxpy").unwrap();
    assert!(std::sync::Arc::ptr_eq(&k1.handle, &k3.handle));
    assert_eq!(c.kernel_cache_stats().builds, 1);
    // Other options are another program; a missing kernel is a typed error, every time.
    let other = c.prepare(&m, &[], "-O0");
    assert_ne!(other.key(), prep.key());
    let k4 = c.kernel_of(&other, "saxpy").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&k1.handle, &k4.handle));
    for _ in 0..2 {
        let e = c.kernel_of(&prep, "nope").unwrap_err();
        assert!(e.to_string().contains("no kernel `nope`"), "{e}");
    }
    // It runs.
    let s = c.kernel_of(&prep, "scale").unwrap();
    let x = Buffer::from_slice(&[1.0f32, -2.0]);
    let q = Queue::new(&c, QueueOrder::InOrder);
    q.submit(|h| {
        let a = h.read_write(&x);
        h.parallel_for(&s, NdRange::new(&[2]), vec![a.into(), Arg::scalar(2.0f32)]);
    });
    assert_eq!(x.read().unwrap(), vec![2.0, -4.0]);
}

#[test]
fn wait_timeout_gives_up_on_running_command() {
    let c = ctx();
    let q = Queue::new(&c, QueueOrder::InOrder);
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let ev = q.submit(move |h| {
        h.host_task(move |_| rx.recv().map_err(|e| e.to_string()));
    });
    assert!(ev.wait_timeout(Duration::from_millis(20)).is_none(), "{:?}", ev.status());
    // Still waiting for a worker, or blocked in `recv`: either way, not finished.
    assert!(matches!(ev.status(), EventStatus::Submitted | EventStatus::Running));
    tx.send(()).unwrap();
    assert!(matches!(ev.wait_timeout(Duration::from_secs(600)), Some(Ok(()))));
    // A failed command reports its error, as `wait` does.
    let ev = q.submit(|h| h.host_task(|_| Err("no".into())));
    let e = ev.wait_timeout(Duration::from_secs(600)).unwrap().unwrap_err();
    assert!(e.to_string().contains("no"), "{e}");
}

#[test]
fn limited_interp_stops_endless_kernel() {
    use kiln_runtime::{Device, Interp, IrDevice};
    let m = parse_module("kernel spin(x: ptr<global, u32>) { while true { x[0] = x[0] + 1; } }")
        .unwrap();
    for (limits, want) in [
        (Interp { max_steps: Some(100), timeout: None }, "step limit exceeded"),
        (
            Interp { max_steps: None, timeout: Some(Duration::from_millis(20)) },
            "time limit exceeded",
        ),
    ] {
        let dev = Arc::new(IrDevice(limits));
        // Same identity as the plain interpreter: limits do not change what is built.
        assert_eq!(dev.identity(), interp_device().identity());
        let c = Context::with_config(dev, ContextConfig { workers: 1, ..Default::default() });
        let p = c.build_program(&m, &[], "").unwrap();
        let k = c.kernel(&p, "spin").unwrap();
        let x = Buffer::<u32>::from_slice(&[0]);
        let q = Queue::new(&c, QueueOrder::InOrder);
        q.submit(|h| {
            let a = h.read_write(&x);
            h.parallel_for(&k, NdRange::new(&[1]), vec![Arg::Buffer(a)]);
        });
        let e = q.wait().unwrap_err().to_string();
        assert!(e.contains("work-item (0, 0, 0)") && e.contains(want), "{e}");
    }
}

/// The interpreter used to ignore build options, so `-O7` built there and failed only on
/// the GPU devices: now every device refuses an unknown option, naming it, and naming
/// `KILN_PROGRAM_BUILD_OPTIONS` when it came from there.
#[test]
fn interp_refuses_unknown_build_options() {
    let m = module();
    let e = ctx().build_program(&m, &[], "-O7").unwrap_err().to_string();
    assert!(e.contains("unknown build option `-O7`") && e.contains("-O0"), "{e}");
    ctx().build_program(&m, &[], "-O0 -O2").unwrap();
    let config = ContextConfig { env_build_options: "-O7".into(), ..Default::default() };
    let e = Context::with_config(interp_device(), config).build_program(&m, &[], "").unwrap_err();
    assert!(e.to_string().contains("KILN_PROGRAM_BUILD_OPTIONS: unknown build option"), "{e}");
}
