//! Reference interpreter error tests: every launch check and every run-time fault, with the
//! exact message each gives.

use kiln_ir::interp::run;
use kiln_ir::launch::LaunchError;
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{
    AddrSpace, AtomicOp, Attrs, Expr, Func, Imm, Kernel, MemFence, Scalar, Stmt, Type, UnOp, Var,
};

fn global(name: &str, elem: Scalar) -> Var {
    Var::new(name, Type::ptr(AddrSpace::Global, elem))
}

fn u32v(name: &str) -> Var {
    Var::new(name, Type::U32)
}

fn run_err(k: &Kernel, r: &NdRange, args: &[Arg], bufs: &mut [Buffer]) -> LaunchError {
    match run(k, r, args, bufs) {
        Ok(()) => panic!("kernel `{}` ran without error", k.name()),
        Err(e) => e,
    }
}

fn atomic(result: Option<&Var>, op: AtomicOp, args: Vec<Expr>) -> Stmt {
    match result {
        Some(r) => Stmt::call_into(r, Func::atomic(op), args),
        None => Stmt::call(Func::atomic(op), args),
    }
}

/// `kernel saxpy(x, y, a: f32, n: u32) { let i = global_id(0); if i < n { y[i] = a*x[i]+y[i] } }`
fn saxpy(guarded: bool) -> Kernel {
    let (x, y) = (global("x", Scalar::F32), global("y", Scalar::F32));
    let a = Var::new("a", Type::F32);
    let n = u32v("n");
    let i = u32v("i");
    let store = Stmt::store(&y, &i, &a * x.load(&i) + y.load(&i));
    let body = if guarded { Stmt::if_(i.expr().cmp_lt(&n), store) } else { store };
    Kernel::new("saxpy", vec![x, y, a, n], Stmt::block([Stmt::let_(&i, Expr::global_id(0)), body]))
}

// ---- errors ------------------------------------------------------------------------------

fn saxpy_bufs(n: usize) -> Vec<Buffer> {
    vec![Buffer::zeroed(Scalar::F32, n), Buffer::zeroed(Scalar::F32, n)]
}

fn saxpy_args() -> Vec<Arg> {
    vec![Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(1.0f32), Arg::scalar(16u32)]
}

#[test]
fn out_of_bounds_load() {
    let mut bufs = saxpy_bufs(16);
    let e = run_err(&saxpy(false), &NdRange::new(&[32]).with_local(&[8]), &saxpy_args(), &mut bufs);
    assert_eq!(e.work_item, Some([16, 0, 0]));
    assert_eq!(
        e.to_string(),
        "kernel `saxpy`, work-item (16, 0, 0): load `x[16]` out of bounds (buffer has 16 elements)"
    );
}

#[test]
fn out_of_bounds_store_and_negative_index() {
    let out = global("out", Scalar::I32);
    let k = Kernel::new(
        "st",
        vec![out.clone()],
        Stmt::store(&out, Expr::global_id(0).cast(Scalar::I32) - 1, 0),
    );
    let mut bufs = vec![Buffer::zeroed(Scalar::I32, 4)];
    let e = run_err(&k, &NdRange::new(&[4]).with_offset(&[10]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(
        e.to_string(),
        "kernel `st`, work-item (10, 0, 0): store `out[9]` out of bounds (buffer has 4 elements)"
    );
    let e = run_err(&k, &NdRange::new(&[4]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "store `out[-1]` out of bounds (buffer has 4 elements)");
}

#[test]
fn out_of_bounds_atomic_local_and_private() {
    let c = global("c", Scalar::U32);
    let k = Kernel::new(
        "at",
        vec![c.clone()],
        atomic(None, AtomicOp::Xor, vec![c.expr(), Expr::global_id(0), Expr::u32(1)]),
    );
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 2)];
    let e = run_err(&k, &NdRange::new(&[3]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(
        e.to_string(),
        "kernel `at`, work-item (2, 0, 0): atomic_xor `c[2]` out of bounds (buffer has 2 elements)"
    );

    let tile = Var::new("tile", Type::ptr(AddrSpace::Local, Scalar::F32));
    let out = global("out", Scalar::F32);
    let body = Stmt::block([
        Stmt::alloc(&tile, 4),
        Stmt::store(&out, 0u32, tile.load(Expr::global_id(0) + 2u32)),
    ]);
    let k = Kernel::new("loc", vec![out.clone()], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::F32, 1)];
    let e = run_err(&k, &NdRange::new(&[4]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.to_string(), "kernel `loc`, work-item (2, 0, 0): load `tile[4]` out of bounds (local array has 4 elements)");

    let p = Var::new("p", Type::ptr(AddrSpace::Private, Scalar::F32));
    let body = Stmt::block([Stmt::alloc(&p, 1), Stmt::store(&p, Expr::global_id(0), 1.0f32)]);
    let k = Kernel::new("prv", vec![out], body);
    let e = run_err(&k, &NdRange::new(&[4]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.to_string(), "kernel `prv`, work-item (1, 0, 0): store `p[1]` out of bounds (private array has 1 element)");
}

#[test]
fn division_and_remainder_by_zero() {
    for (op, word) in [(kiln_ir::BinOp::Div, "division"), (kiln_ir::BinOp::Rem, "remainder")] {
        let out = global("out", Scalar::I32);
        let d = Var::new("d", Type::I32);
        let body = Stmt::store(
            &out,
            Expr::global_id(0),
            Expr::binary(op, Expr::i32(7), Expr::global_id(0).cast(Scalar::I32) - &d),
        );
        let k = Kernel::new("div", vec![out, d], body);
        let mut bufs = vec![Buffer::zeroed(Scalar::I32, 8)];
        let e = run_err(&k, &NdRange::new(&[8]), &[Arg::Buffer(0), Arg::scalar(5i32)], &mut bufs);
        assert_eq!(e.work_item, Some([5, 0, 0]));
        assert!(e.message.starts_with(&format!("integer {word} by zero in `")), "{e}");
        // Items before the failing one have run.
        assert_eq!(
            bufs[0].get(4),
            Some(Imm::int(Scalar::I32, if word == "division" { -7 } else { 0 }))
        );
    }
}

#[test]
fn bad_for_steps() {
    let out = global("out", Scalar::I32);
    let (i, s) = (Var::new("i", Type::I32), Var::new("s", Type::I32));
    let body = Stmt::for_(&i, 0, 0, &s, Stmt::store(&out, 0u32, &i));
    let k = Kernel::new("steps", vec![out, s], body);
    for step in [0, -3] {
        let mut bufs = vec![Buffer::zeroed(Scalar::I32, 1)];
        let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::scalar(step)], &mut bufs);
        assert_eq!(e.to_string(), format!("kernel `steps`, work-item (0, 0, 0): for loop over `i`: step {step} is not positive"));
    }
    let (u, us) = (Var::new("u", Type::U64), Var::new("us", Type::U64));
    let out = global("out", Scalar::U64);
    let k = Kernel::new(
        "usteps",
        vec![out.clone(), us.clone()],
        Stmt::for_(&u, Expr::u64(0), Expr::u64(9), &us, Stmt::store(&out, 0u32, &u)),
    );
    let mut bufs = vec![Buffer::zeroed(Scalar::U64, 1)];
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::scalar(0u64)], &mut bufs);
    assert_eq!(e.message, "for loop over `u`: step 0 is not positive");
    run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::scalar(4u64)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<u64>().unwrap(), vec![8]);
}

#[test]
fn barrier_divergence() {
    let out = global("out", Scalar::U32);
    // Work-items with local id < 2 wait at the barrier, the others finish.
    let body = Stmt::block([
        Stmt::if_(Expr::local_id(0).cmp_lt(2u32), Stmt::barrier(MemFence::LOCAL)),
        Stmt::store(&out, Expr::global_id(0), 1u32),
    ]);
    let k = Kernel::new("div1", vec![out.clone()], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 8)];
    let e = run_err(&k, &NdRange::new(&[8]).with_local(&[4]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(
        e.to_string(),
        "kernel `div1`, work-item (2, 0, 0): barrier divergence in work-group (0, 0, 0): \
         work-item (0, 0, 0) waits at barrier #1 (of 1) while work-item (2, 0, 0) finished"
    );
    // Different barriers in the two branches, in the second group.
    let body = Stmt::if_else(
        Expr::global_id(0).cmp_lt(6u32),
        Stmt::barrier(MemFence::LOCAL),
        Stmt::barrier(MemFence::GLOBAL),
    );
    let k = Kernel::new("div2", vec![out.clone()], body);
    let e = run_err(&k, &NdRange::new(&[8]).with_local(&[4]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.work_item, Some([6, 0, 0]));
    assert_eq!(
        e.message,
        "barrier divergence in work-group (1, 0, 0): work-item (4, 0, 0) waits at barrier #1 \
         (of 2) while work-item (6, 0, 0) waits at barrier #2 (of 2)"
    );
    // A uniform condition is fine: every item of a group takes the same way.
    let body = Stmt::if_else(
        Expr::group_id(0).cmp_eq(0u32),
        Stmt::barrier(MemFence::LOCAL),
        Stmt::barrier(MemFence::GLOBAL),
    );
    let k = Kernel::new("uniform", vec![out], body);
    run(&k, &NdRange::new(&[8]).with_local(&[4]), &[Arg::Buffer(0)], &mut bufs).unwrap();
}

fn launch_err(k: &Kernel, r: &NdRange, args: &[Arg], bufs: &mut [Buffer]) -> String {
    let e = run_err(k, r, args, bufs);
    assert_eq!(e.work_item, None, "{e}");
    assert_eq!(e.kernel, k.name());
    // Nothing ran.
    e.message
}

#[test]
fn bad_launches() {
    let k = saxpy(true);
    let r = NdRange::new(&[16]);
    let mut b = saxpy_bufs(16);
    let args = saxpy_args();
    assert_eq!(launch_err(&k, &r, &args[..3], &mut b), "the kernel takes 4 arguments (x: ptr<global, f32>, y: ptr<global, f32>, a: f32, n: u32), 3 given");
    let mut a = args.clone();
    a[0] = Arg::scalar(1.0f32);
    assert_eq!(
        launch_err(&k, &r, &a, &mut b),
        "argument 0 (`x`) is a ptr<global, f32> but a scalar was given"
    );
    let mut a = args.clone();
    a[2] = Arg::Buffer(0);
    assert_eq!(launch_err(&k, &r, &a, &mut b), "argument 2 (`a`) is a f32 but a buffer was given");
    let mut a = args.clone();
    a[3] = Arg::scalar(16i32);
    assert_eq!(
        launch_err(&k, &r, &a, &mut b),
        "argument 3 (`n`) is a u32 but the value given is a i32"
    );
    let mut a = args.clone();
    a[1] = Arg::Buffer(2);
    assert_eq!(
        launch_err(&k, &r, &a, &mut b),
        "argument 1 (`y`) binds buffer 2, but only 2 buffers are given"
    );
    let mut ib = vec![Buffer::zeroed(Scalar::F32, 16), Buffer::zeroed(Scalar::I32, 16)];
    assert_eq!(
        launch_err(&k, &r, &args, &mut ib),
        "argument 1 (`y`) is a ptr<global, f32> but buffer 1 holds i32 elements"
    );
    assert_eq!(
        launch_err(&k, &NdRange::new(&[]), &args, &mut b),
        "an nd-range has 1 to 3 dimensions, not 0"
    );
    assert_eq!(
        launch_err(&k, &NdRange::new(&[1, 1, 1, 1]), &args, &mut b),
        "an nd-range has 1 to 3 dimensions, not 4"
    );
    assert_eq!(
        launch_err(&k, &NdRange::new(&[4, 0]), &args, &mut b),
        "the global size is zero in dimension 1"
    );
    assert_eq!(
        launch_err(&k, &NdRange::new(&[16, 6]).with_local(&[4, 4]), &args, &mut b),
        "the global size 6 is not a multiple of the local size 4 in dimension 1"
    );
    assert_eq!(
        launch_err(&k, &NdRange::new(&[16]).with_local(&[0]), &args, &mut b),
        "the local size is zero in dimension 0"
    );
    assert_eq!(
        launch_err(&k, &NdRange::new(&[16]).with_offset(&[u32::MAX]), &args, &mut b),
        "global offset 4294967295 + global size 16 in dimension 0 overflows the u32 ids"
    );
    let attrs = Attrs { reqd_work_group_size: Some([8, 1, 1]), ..Attrs::default() };
    let kr = Kernel::with_attrs("saxpy", k.params().to_vec(), attrs, k.body().clone());
    assert_eq!(
        launch_err(&kr, &NdRange::new(&[16]).with_local(&[4]), &args, &mut b),
        "local size (4, 1, 1) does not match the kernel's #reqd_work_group_size(8, 1, 1)"
    );
    assert_eq!(
        launch_err(&kr, &NdRange::new(&[12]), &args, &mut b),
        "the global size 12 is not a multiple of the local size 8 in dimension 0"
    );
    run(&kr, &NdRange::new(&[16]).with_local(&[8]), &args, &mut b).unwrap();
    // The Display of a launch error has no work-item.
    let e = run_err(&k, &NdRange::new(&[]), &args, &mut b);
    assert_eq!(e.to_string(), "kernel `saxpy`: an nd-range has 1 to 3 dimensions, not 0");
}

#[test]
fn ill_formed_kernels_are_errors_not_panics() {
    let out = global("out", Scalar::I32);
    let ghost = Var::new("ghost", Type::I32);
    let k = Kernel::new("ghost", vec![out.clone()], Stmt::store(&out, 0u32, &ghost));
    let mut bufs = vec![Buffer::zeroed(Scalar::I32, 1)];
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "ill-formed kernel: `ghost` is not in scope");
    let t = Var::new("t", Type::I32);
    let k = Kernel::new(
        "let",
        vec![out.clone()],
        Stmt::block([Stmt::let_(&t, 1), Stmt::assign(&t, 2)]),
    );
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "ill-formed kernel: assignment to `t`, which is not a `var`");
    // A let is scoped to its block: using it after the block is an error.
    let k = Kernel::new(
        "scope",
        vec![out.clone()],
        Stmt::block([Stmt::block([Stmt::let_(&t, 1)]), Stmt::store(&out, 0u32, &t)]),
    );
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "ill-formed kernel: `t` is not in scope");
    // Mismatched operand types fail at run time with a message.
    let k =
        Kernel::new("mix", vec![out.clone()], Stmt::store(&out, 0u32, Expr::i32(1) + Expr::u32(1)));
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "`+` on mismatched operand types i32 and u32");
    let k = Kernel::new("ty", vec![out.clone()], Stmt::store(&out, 0u32, Expr::f32(1.0)));
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "store of a f32 value into `out`, whose elements are i32");
    let k = Kernel::new(
        "neg",
        vec![out.clone()],
        Stmt::store(&out, 0u32, Expr::unary(UnOp::Not, Expr::i32(1))),
    );
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "`!` is not defined on i32");
    let k = Kernel::new("dim", vec![out.clone()], Stmt::store(&out, Expr::global_id(3), 0));
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "ill-formed kernel: `global_id(3)`: dimension must be 0, 1 or 2");
    let k = Kernel::new(
        "at",
        vec![out.clone()],
        atomic(None, AtomicOp::Add, vec![out.expr(), Expr::u32(0)]),
    );
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "ill-formed kernel: `atomic_add` takes 3 operands, not 2");
    let k = Kernel::new("ptr", vec![out.clone()], Stmt::store(&out, 0u32, out.expr()));
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.message, "ill-formed kernel: pointer `out` used as a value");
}

#[test]
fn huge_arrays_are_an_error_not_an_abort() {
    let tile = Var::new("tile", Type::ptr(AddrSpace::Local, Scalar::F64));
    let out = global("out", Scalar::F64);
    let body =
        Stmt::block([Stmt::alloc(&tile, u32::MAX), Stmt::store(&out, 0u32, tile.load(0u32))]);
    let k = Kernel::new("big", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::F64, 1)];
    let e = run_err(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
    assert_eq!(e.work_item, None);
    assert_eq!(
        e.message,
        "the arrays and work-item states of a work-group need 34359738360 bytes, more than the \
         interpreter's limit of 1073741824"
    );
}

#[test]
fn deep_nesting_is_an_error_or_runs_never_a_crash() {
    // 200 nested ifs run; 600 exceed the compiler's nesting limit.
    let out = global("out", Scalar::I32);
    for (depth, ok) in [(200, true), (600, false)] {
        let mut s = Stmt::store(&out, 0u32, 7);
        for _ in 0..depth {
            s = Stmt::if_(Expr::bool(true), s);
        }
        let k = Kernel::new("deep", vec![out.clone()], s);
        let mut bufs = vec![Buffer::zeroed(Scalar::I32, 1)];
        let r = run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs);
        if ok {
            r.unwrap();
            assert_eq!(bufs[0].to_vec::<i32>().unwrap(), vec![7]);
        } else {
            assert_eq!(r.unwrap_err().message, "statements nested more than 512 deep");
        }
    }
    // A 100,000-deep expression chain compiles and evaluates without recursion.
    let mut e = Expr::i32(0);
    for _ in 0..100_000 {
        e = e + 1;
    }
    let k = Kernel::new("long", vec![out.clone()], Stmt::store(&out, 0u32, e));
    let mut bufs = vec![Buffer::zeroed(Scalar::I32, 1)];
    run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<i32>().unwrap(), vec![100_000]);
}
