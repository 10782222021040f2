//! Reference interpreter tests: kernels built with the builders, run, and checked against
//! independent Rust computations, exact values, and exact error messages.

use kiln_ir::interp::{run, run_with, RunOptions};
use kiln_ir::launch::{Arg, Buffer, NdRange};
use kiln_ir::{
    AddrSpace, AtomicOp, Attrs, Builtin, Expr, Func, Imm, Intrinsic, Kernel, MemFence, Scalar,
    Stmt, Type, Var,
};

fn global(name: &str, elem: Scalar) -> Var {
    Var::new(name, Type::ptr(AddrSpace::Global, elem))
}

fn u32v(name: &str) -> Var {
    Var::new(name, Type::U32)
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

#[test]
fn saxpy_matches_rust() {
    let n = 100usize;
    let x: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 100.0).collect();
    let y: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 0.3)).collect();
    let a = 2.7f32;
    let mut bufs = vec![Buffer::from_slice(&x), Buffer::from_slice(&y)];
    let args = [Arg::Buffer(0), Arg::Buffer(1), Arg::scalar(a), Arg::scalar(n as u32)];
    run(&saxpy(true), &NdRange::new(&[128]).with_local(&[32]), &args, &mut bufs).unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(x, y)| a * x + y).collect();
    assert_eq!(bufs[1].to_vec::<f32>().unwrap(), want);
    assert_eq!(bufs[0].to_vec::<f32>().unwrap(), x);
}

fn reduction_kernel() -> Kernel {
    // Each group of 64 sums its 64 inputs through a local tile: tile[l] += tile[l + s] for
    // s = 32, 16, ..., 1, with a barrier after every step.
    let x = global("x", Scalar::I32);
    let out = global("out", Scalar::I32);
    let tile = Var::new("tile", Type::ptr(AddrSpace::Local, Scalar::I32));
    let (lid, k, s) = (u32v("lid"), u32v("k"), u32v("s"));
    let step = Stmt::block([
        Stmt::let_(&s, Expr::u32(32) >> &k),
        Stmt::if_(
            lid.expr().cmp_lt(&s),
            Stmt::store(&tile, &lid, tile.load(&lid) + tile.load(&lid + &s)),
        ),
        Stmt::barrier(MemFence::LOCAL),
    ]);
    let body = Stmt::block([
        Stmt::alloc(&tile, 64),
        Stmt::let_(&lid, Expr::local_id(0)),
        Stmt::store(&tile, &lid, x.load(Expr::global_id(0))),
        Stmt::barrier(MemFence::LOCAL),
        Stmt::for_(&k, 0u32, 6u32, 1u32, step),
        Stmt::if_(lid.expr().cmp_eq(0u32), Stmt::store(&out, Expr::group_id(0), tile.load(0u32))),
    ]);
    let attrs = Attrs { reqd_work_group_size: Some([64, 1, 1]), ..Attrs::default() };
    Kernel::with_attrs("reduce", vec![x, out], attrs, body)
}

#[test]
fn workgroup_tree_reduction_with_local_memory_and_barriers() {
    let k = reduction_kernel();
    let input: Vec<i32> = (0..256).map(|i| (i * 7919 % 1000) - 500).collect();
    let mut bufs = vec![Buffer::from_slice(&input), Buffer::zeroed(Scalar::I32, 4)];
    // No local size given: #reqd_work_group_size supplies it.
    run(&k, &NdRange::new(&[256]), &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs).unwrap();
    let want: Vec<i32> = input.chunks(64).map(|c| c.iter().sum()).collect();
    assert_eq!(bufs[1].to_vec::<i32>().unwrap(), want);
}

#[test]
fn local_memory_is_per_group_and_zeroed() {
    // Item 0 of each group adds 1 to a local counter, every item reads it after a barrier.
    let out = global("out", Scalar::U32);
    let cnt = Var::new("cnt", Type::ptr(AddrSpace::Local, Scalar::U32));
    let body = Stmt::block([
        Stmt::alloc(&cnt, 1),
        Stmt::if_(Expr::local_id(0).cmp_eq(0u32), Stmt::store(&cnt, 0u32, cnt.load(0u32) + 1u32)),
        Stmt::barrier(MemFence::LOCAL),
        Stmt::store(&out, Expr::global_id(0), cnt.load(0u32) * 10u32 + Expr::group_id(0)),
    ]);
    let k = Kernel::new("count", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 8)];
    run(&k, &NdRange::new(&[8]).with_local(&[4]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![10, 10, 10, 10, 11, 11, 11, 11]);
}

#[test]
fn builtins_in_3d_with_offsets() {
    let global_size = [4u32, 6, 2];
    let local = [2u32, 3, 1];
    let offset = [5u32, 7, 9];
    let out = global("out", Scalar::U32);
    let lin = u32v("lin");
    let mut body = vec![Stmt::let_(
        &lin,
        (Expr::global_id(0) - Expr::builtin(Builtin::GlobalOffset, 0))
            + Expr::builtin(Builtin::GlobalSize, 0)
                * ((Expr::global_id(1) - Expr::builtin(Builtin::GlobalOffset, 1))
                    + Expr::builtin(Builtin::GlobalSize, 1)
                        * (Expr::global_id(2) - Expr::builtin(Builtin::GlobalOffset, 2))),
    )];
    for (b, kind) in Builtin::ALL.into_iter().enumerate() {
        for d in 0..3u8 {
            let slot = &lin * 21u32 + (b as u32 * 3 + d as u32);
            body.push(Stmt::store(&out, slot, Expr::builtin(kind, d)));
        }
    }
    let k = Kernel::new("ids", vec![out], Stmt::block(body));
    let n = 4 * 6 * 2;
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, n * 21)];
    let range = NdRange::new(&global_size).with_local(&local).with_offset(&offset);
    run(&k, &range, &[Arg::Buffer(0)], &mut bufs).unwrap();
    let got = bufs[0].to_vec::<u32>().unwrap();
    let mut seen = 0;
    for z in 0..global_size[2] {
        for y in 0..global_size[1] {
            for x in 0..global_size[0] {
                let rel = [x, y, z];
                let lin = (x + global_size[0] * (y + global_size[1] * z)) as usize;
                let row = &got[lin * 21..lin * 21 + 21];
                for d in 0..3 {
                    let lid = rel[d] % local[d];
                    let grp = rel[d] / local[d];
                    let gid = offset[d] + grp * local[d] + lid;
                    let want = [
                        gid,
                        lid,
                        grp,
                        global_size[d],
                        local[d],
                        global_size[d] / local[d],
                        offset[d],
                    ];
                    for (b, w) in want.iter().enumerate() {
                        assert_eq!(row[b * 3 + d], *w, "item {rel:?} builtin {b} dim {d}");
                    }
                    assert_eq!(gid, offset[d] + rel[d]);
                }
                seen += 1;
            }
        }
    }
    assert_eq!(seen, n);
}

#[test]
fn unused_dimensions_have_size_one() {
    let out = global("out", Scalar::U32);
    let mut body = Vec::new();
    for (i, kind) in
        [Builtin::GlobalSize, Builtin::LocalSize, Builtin::GlobalOffset, Builtin::GlobalId]
            .into_iter()
            .enumerate()
    {
        body.push(Stmt::store(&out, i as u32 * 2, Expr::builtin(kind, 1)));
        body.push(Stmt::store(&out, i as u32 * 2 + 1, Expr::builtin(kind, 2)));
    }
    let k = Kernel::new("dims", vec![out], Stmt::block(body));
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 8)];
    run(&k, &NdRange::new(&[1]).with_offset(&[3]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![1, 1, 1, 1, 0, 0, 0, 0]);
}

#[test]
fn default_local_size_rule() {
    let out = global("out", Scalar::U32);
    let body = Stmt::store(&out, Expr::global_id(0), Expr::builtin(Builtin::LocalSize, 0));
    let k = Kernel::new("ls", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 1000)];
    run(&k, &NdRange::new(&[1000]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert!(bufs[0].to_vec::<u32>().unwrap().iter().all(|&l| l == 50));
}

#[test]
fn atomics_counter_cmpxchg_and_f32_add() {
    let c = global("c", Scalar::U32);
    let olds = global("olds", Scalar::U32);
    let flag = global("flag", Scalar::I32);
    let got = global("got", Scalar::I32);
    let fsum = global("fsum", Scalar::F32);
    let (old, prev) = (u32v("old"), Var::new("prev", Type::I32));
    let gid = u32v("gid");
    let body = Stmt::block([
        Stmt::let_(&gid, Expr::global_id(0)),
        atomic(Some(&old), AtomicOp::Add, vec![c.expr(), Expr::u32(0), Expr::u32(1)]),
        Stmt::store(&olds, &gid, &old),
        atomic(None, AtomicOp::Add, vec![c.expr(), Expr::u32(1), Expr::u32(3)]),
        atomic(
            Some(&prev),
            AtomicOp::CmpXchg,
            vec![flag.expr(), Expr::u32(0), Expr::i32(0), gid.expr().cast(Scalar::I32) + 1],
        ),
        Stmt::store(&got, &gid, &prev),
        atomic(None, AtomicOp::Add, vec![fsum.expr(), Expr::u32(0), Expr::f32(0.1)]),
    ]);
    let k = Kernel::new("atomics", vec![c, olds, flag, got, fsum], body);
    let n = 40;
    let mut bufs = vec![
        Buffer::zeroed(Scalar::U32, 2),
        Buffer::zeroed(Scalar::U32, n),
        Buffer::zeroed(Scalar::I32, 1),
        Buffer::zeroed(Scalar::I32, n),
        Buffer::zeroed(Scalar::F32, 1),
    ];
    let args: Vec<Arg> = (0..5).map(Arg::Buffer).collect();
    run(&k, &NdRange::new(&[n as u32]).with_local(&[8]), &args, &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![n as u32, 3 * n as u32]);
    let mut olds = bufs[1].to_vec::<u32>().unwrap();
    // The interpreter's schedule is linear order; any schedule gives a permutation.
    assert_eq!(olds, (0..n as u32).collect::<Vec<_>>());
    olds.sort();
    assert_eq!(olds, (0..n as u32).collect::<Vec<_>>());
    assert_eq!(bufs[2].to_vec::<i32>().unwrap(), vec![1]);
    let got = bufs[3].to_vec::<i32>().unwrap();
    assert_eq!(got[0], 0);
    assert!(got[1..].iter().all(|&g| g == 1));
    let mut want = 0f32;
    for _ in 0..n {
        want += 0.1f32;
    }
    assert_eq!(bufs[4].to_vec::<f32>().unwrap(), vec![want]);
}

#[test]
fn every_atomic_op() {
    // One work-item applies each op to its own element and records the old value.
    let m = global("m", Scalar::I64);
    let olds = global("olds", Scalar::I64);
    let cases: [(AtomicOp, i64, Vec<i64>, i64); 9] = [
        (AtomicOp::Add, 5, vec![7], 12),
        (AtomicOp::Sub, 5, vec![7], -2),
        (AtomicOp::Min, 5, vec![-7], -7),
        (AtomicOp::Max, 5, vec![-7], 5),
        (AtomicOp::And, 6, vec![3], 2),
        (AtomicOp::Or, 6, vec![3], 7),
        (AtomicOp::Xor, 6, vec![3], 5),
        (AtomicOp::Xchg, 6, vec![-1], -1),
        (AtomicOp::CmpXchg, 6, vec![6, 42], 42),
    ];
    let mut body = Vec::new();
    for (i, (op, _, vals, _)) in cases.iter().enumerate() {
        let r = Var::new(format!("r{i}"), Type::I64);
        let mut args = vec![m.expr(), Expr::u32(i as u32)];
        args.extend(vals.iter().map(|&v| Expr::i64(v)));
        body.push(atomic(Some(&r), *op, args));
        body.push(Stmt::store(&olds, i as u32, &r));
    }
    let k = Kernel::new("ops", vec![m, olds], Stmt::block(body));
    let init: Vec<i64> = cases.iter().map(|c| c.1).collect();
    let mut bufs = vec![Buffer::from_slice(&init), Buffer::zeroed(Scalar::I64, 9)];
    run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<i64>().unwrap(), cases.iter().map(|c| c.3).collect::<Vec<_>>());
    assert_eq!(bufs[1].to_vec::<i64>().unwrap(), init);
    // u32 min/max compare unsigned.
    let u = global("u", Scalar::U32);
    let body = Stmt::block([
        atomic(None, AtomicOp::Max, vec![u.expr(), Expr::u32(0), Expr::u32(0x8000_0000)]),
        atomic(None, AtomicOp::Min, vec![u.expr(), Expr::u32(1), Expr::u32(0x8000_0000)]),
    ]);
    let k = Kernel::new("uminmax", vec![u], body);
    let mut bufs = vec![Buffer::from_slice(&[1u32, 1])];
    run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![0x8000_0000, 1]);
}

#[test]
fn atomics_on_local_memory() {
    let out = global("out", Scalar::U32);
    let c = Var::new("c", Type::ptr(AddrSpace::Local, Scalar::U32));
    let body = Stmt::block([
        Stmt::alloc(&c, 1),
        atomic(None, AtomicOp::Add, vec![c.expr(), Expr::u32(0), Expr::global_id(0)]),
        Stmt::barrier(MemFence::LOCAL),
        Stmt::store(&out, Expr::global_id(0), c.load(0u32)),
    ]);
    let k = Kernel::new("lsum", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 8)];
    run(&k, &NdRange::new(&[8]).with_local(&[4]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![6, 6, 6, 6, 22, 22, 22, 22]);
}

#[test]
fn private_arrays_are_per_item_and_rezeroed() {
    // for r in 0..2 { private p: i32[4]; p[r] = p[r] + gid; for j in 0..4 { acc += p[j] * (j+1) } }
    let out = global("out", Scalar::I32);
    let p = Var::new("p", Type::ptr(AddrSpace::Private, Scalar::I32));
    let (r, j) = (Var::new("r", Type::I32), Var::new("j", Type::I32));
    let (gid, acc) = (Var::new("gid", Type::I32), Var::new("acc", Type::I32));
    let inner = Stmt::for_(&j, 0, 4, 1, Stmt::assign(&acc, &acc + p.load(&j) * (&j + 1)));
    let round = Stmt::block([
        Stmt::alloc(&p, 4),
        Stmt::store(&p, &r, p.load(&r) + &gid),
        Stmt::store(&p, 3, p.load(3) + 100),
        inner,
    ]);
    let body = Stmt::block([
        Stmt::let_(&gid, Expr::global_id(0).cast(Scalar::I32)),
        Stmt::decl(&acc, 0),
        Stmt::for_(&r, 0, 2, 1, round),
        Stmt::store(&out, &gid, &acc),
    ]);
    let k = Kernel::new("priv", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::I32, 6)];
    run(&k, &NdRange::new(&[6]).with_local(&[3]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    // Round 0: p = [g,0,0,100] -> g + 400; round 1: p = [0,g,0,100] -> 2g + 400.
    let want: Vec<i32> = (0..6).map(|g| 3 * g + 800).collect();
    assert_eq!(bufs[0].to_vec::<i32>().unwrap(), want);
}

#[test]
fn aliased_buffers_see_each_others_stores() {
    let (a, b) = (global("a", Scalar::I32), global("b", Scalar::I32));
    let i = u32v("i");
    let body = Stmt::block([
        Stmt::let_(&i, Expr::global_id(0)),
        Stmt::store(&a, &i, a.load(&i) * 2),
        Stmt::store(&b, &i, b.load(&i) + 1),
        Stmt::if_(i.expr().cmp_eq(0u32), Stmt::store(&a, 4u32, b.load(0u32) * 100)),
    ]);
    let k = Kernel::new("alias", vec![a, b], body);
    let mut bufs = vec![Buffer::from_slice(&[1i32, 2, 3, 4, 0])];
    run(&k, &NdRange::new(&[4]), &[Arg::Buffer(0), Arg::Buffer(0)], &mut bufs).unwrap();
    assert_eq!(bufs[0].to_vec::<i32>().unwrap(), vec![3, 5, 7, 9, 300]);
}

/// Evaluates `e` in a one-work-item kernel and returns the stored result.
fn eval(e: Expr) -> Imm {
    let ty = e.ty().scalar().unwrap();
    let elem = if ty == Scalar::Bool { Scalar::U8 } else { ty };
    let out = global("out", elem);
    let v = if ty == Scalar::Bool { e.cast(Scalar::U8) } else { e };
    let k = Kernel::new("eval", vec![out.clone()], Stmt::store(&out, 0u32, v));
    let mut bufs = vec![Buffer::zeroed(elem, 1)];
    run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    let r = bufs[0].get(0).unwrap();
    if ty == Scalar::Bool {
        Imm::Bool(!r.is_zero())
    } else {
        r
    }
}

#[test]
fn integer_semantics() {
    let i = |v: i32| Expr::i32(v);
    assert_eq!(eval(i(i32::MIN) / i(-1)), Imm::int(Scalar::I32, i32::MIN as i128));
    assert_eq!(eval(i(i32::MIN) % i(-1)), Imm::int(Scalar::I32, 0));
    assert_eq!(eval(i(-7) / i(2)), Imm::int(Scalar::I32, -3));
    assert_eq!(eval(i(-7) % i(2)), Imm::int(Scalar::I32, -1));
    assert_eq!(eval(i(7) % i(-2)), Imm::int(Scalar::I32, 1));
    assert_eq!(eval(i(i32::MAX) + i(1)), Imm::int(Scalar::I32, i32::MIN as i128));
    assert_eq!(eval(i(1) << i(32)), Imm::int(Scalar::I32, 1));
    assert_eq!(eval(i(1) << i(35)), Imm::int(Scalar::I32, 8));
    assert_eq!(eval(i(-16) >> i(2)), Imm::int(Scalar::I32, -4));
    assert_eq!(eval(i(-16) >> i(34)), Imm::int(Scalar::I32, -4));
    assert_eq!(eval(Expr::u32(0xF000_0000) >> Expr::u32(28)), Imm::int(Scalar::U32, 15));
    assert_eq!(eval(Expr::u64(1) << Expr::u64(64)), Imm::int(Scalar::U64, 1));
    let u8c = |v: i128| Expr::int(Scalar::U8, v);
    assert_eq!(eval(u8c(200) + u8c(100)), Imm::int(Scalar::U8, 44));
    assert_eq!(eval(u8c(1) << u8c(9)), Imm::int(Scalar::U8, 2));
    let i8c = |v: i128| Expr::int(Scalar::I8, v);
    assert_eq!(eval(i8c(-128) / i8c(-1)), Imm::int(Scalar::I8, -128));
    assert_eq!(eval(-i8c(-128)), Imm::int(Scalar::I8, -128));
    assert_eq!(eval(!Expr::int(Scalar::U16, 1)), Imm::int(Scalar::U16, 0xFFFE));
    assert_eq!(
        eval(Expr::intrinsic(Intrinsic::Abs, [i(i32::MIN)])),
        Imm::int(Scalar::I32, i32::MIN as i128)
    );
    assert_eq!(eval(Expr::i64(-1).cmp_lt(Expr::i64(0))), Imm::Bool(true));
    assert_eq!(eval(Expr::u64(u64::MAX).cmp_lt(Expr::u64(0))), Imm::Bool(false));
    assert_eq!(eval(Expr::select(Expr::bool(false), i(1), i(2))), Imm::int(Scalar::I32, 2));
    assert_eq!(eval(Expr::bool(true).logic_and(Expr::bool(false))), Imm::Bool(false));
    assert_eq!(eval(Expr::bool(true) ^ Expr::bool(true)), Imm::Bool(false));
}

#[test]
fn float_semantics() {
    let f = |v: f32| Expr::f32(v);
    // f32 arithmetic rounds to f32 at every step.
    assert_eq!(eval(f(16777216.0) + f(1.0)), Imm::float(Scalar::F32, 16777216.0));
    assert_eq!(eval(f(0.1) + f(0.2)), Imm::float(Scalar::F32, (0.1f32 + 0.2f32) as f64));
    assert_eq!(eval(Expr::f64(0.1) + Expr::f64(0.2)), Imm::float(Scalar::F64, 0.1 + 0.2));
    assert_eq!(eval(f(1.0) / f(0.0)), Imm::float(Scalar::F32, f64::INFINITY));
    let nan = eval(f(0.0) / f(0.0));
    assert!(nan.as_f64().unwrap().is_nan());
    // NaN -> int is 0; out-of-range saturates; truncation toward zero.
    assert_eq!(eval((f(0.0) / f(0.0)).cast(Scalar::I32)), Imm::int(Scalar::I32, 0));
    assert_eq!(eval(f(3e9).cast(Scalar::I32)), Imm::int(Scalar::I32, i32::MAX as i128));
    assert_eq!(eval(f(-3e9).cast(Scalar::U32)), Imm::int(Scalar::U32, 0));
    assert_eq!(eval(f(-2.9).cast(Scalar::I8)), Imm::int(Scalar::I8, -2));
    assert_eq!(eval(Expr::i32(16777217).cast(Scalar::F32)), Imm::float(Scalar::F32, 16777216.0));
    // min/max: -0.0 < +0.0; a NaN operand yields the other.
    let min = |a: Expr, b: Expr| eval(a.min(b));
    let neg_zero = min(f(0.0), f(-0.0)).as_f64().unwrap();
    assert!(neg_zero == 0.0 && neg_zero.is_sign_negative());
    let pos_zero = eval(f(-0.0).max(f(0.0))).as_f64().unwrap();
    assert!(pos_zero == 0.0 && pos_zero.is_sign_positive());
    assert_eq!(min(f(0.0) / f(0.0), f(5.0)), Imm::float(Scalar::F32, 5.0));
    assert_eq!(
        eval(Expr::f64(2.0).max(Expr::f64(0.0) / Expr::f64(0.0))),
        Imm::float(Scalar::F64, 2.0)
    );
    // fma rounds once.
    let fma = eval(Expr::intrinsic(Intrinsic::Fma, [f(0.1), f(10.0), f(-1.0)]));
    assert_eq!(fma, Imm::float(Scalar::F32, 0.1f32.mul_add(10.0, -1.0) as f64));
    assert_eq!(
        eval(Expr::intrinsic(Intrinsic::Sqrt, [f(2.0)])),
        Imm::float(Scalar::F32, 2f32.sqrt() as f64)
    );
    assert_eq!(eval(Expr::intrinsic(Intrinsic::Floor, [f(-0.5)])), Imm::float(Scalar::F32, -1.0));
    assert_eq!(
        eval(Expr::intrinsic(Intrinsic::Trunc, [f(-0.5)])).as_f64().unwrap().to_bits(),
        (-0.0f64).to_bits()
    );
    assert_eq!(eval(-f(0.0)).as_f64().unwrap().to_bits(), (-0.0f64).to_bits());
    // f16 and bool casts.
    assert_eq!(eval(f(1.0 / 3.0).cast(Scalar::F16)), Imm::float(Scalar::F16, 0.333251953125));
    assert_eq!(
        eval(f(1e6).cast(Scalar::F16).cast(Scalar::F32)),
        Imm::float(Scalar::F32, f64::INFINITY)
    );
    assert_eq!(eval(Expr::i32(-3).cast(Scalar::Bool)), Imm::Bool(true));
    assert_eq!(eval(f(-0.0).cast(Scalar::Bool)), Imm::Bool(false));
    assert_eq!(eval(Expr::bool(true).cast(Scalar::F64)), Imm::float(Scalar::F64, 1.0));
    assert_eq!(eval(Expr::i32(-1).cast(Scalar::U64)), Imm::int(Scalar::U64, u64::MAX as i128));
    assert_eq!(
        eval(Expr::u32(u32::MAX).cast(Scalar::I64)),
        Imm::int(Scalar::I64, u32::MAX as i128)
    );
    assert_eq!(eval(Expr::i32(300).cast(Scalar::I8)), Imm::int(Scalar::I8, 44));
}

#[test]
fn f16_loads_and_stores() {
    let h = global("h", Scalar::F16);
    let o = global("o", Scalar::F32);
    let i = u32v("i");
    let body = Stmt::block([
        Stmt::let_(&i, Expr::global_id(0)),
        Stmt::store(&o, &i, h.load(&i).cast(Scalar::F32) * 2),
        Stmt::store(&h, &i, (h.load(&i).cast(Scalar::F32) + 0.5f32).cast(Scalar::F16)),
    ]);
    let k = Kernel::new("half", vec![h, o], body);
    let hv = [half::f16::from_f32(1.5), half::f16::from_f32(-0.25), half::f16::from_f32(65504.0)];
    let mut bufs = vec![Buffer::from_slice(&hv), Buffer::zeroed(Scalar::F32, 3)];
    run(&k, &NdRange::new(&[3]), &[Arg::Buffer(0), Arg::Buffer(1)], &mut bufs).unwrap();
    assert_eq!(bufs[1].to_vec::<f32>().unwrap(), vec![3.0, -0.5, 131008.0]);
    let hs: Vec<f32> = bufs[0].to_vec::<half::f16>().unwrap().iter().map(|h| h.to_f32()).collect();
    assert_eq!(hs, vec![2.0, 0.25, 65504.0]);
}

#[test]
fn loops_scoping_and_while() {
    // for i in 250u8 .. 255u8 step 3 visits 250 and 253 without wrapping; hi is evaluated
    // once even though the body changes what it was computed from; two sequential loops and
    // both branches of an if re-bind the same names; a while loop counts down.
    let out = global("out", Scalar::I32);
    let i = Var::new("i", Type::U8);
    let (n, acc, t, w) = (
        Var::new("n", Type::I32),
        Var::new("acc", Type::I32),
        Var::new("t", Type::I32),
        Var::new("w", Type::I32),
    );
    let i2 = Var::new("i", Type::I32);
    let body = Stmt::block([
        Stmt::decl(&acc, 0),
        Stmt::for_(
            &i,
            Expr::int(Scalar::U8, 250),
            Expr::int(Scalar::U8, 255),
            Expr::int(Scalar::U8, 3),
            Stmt::assign(&acc, &acc + i.expr().cast(Scalar::I32)),
        ),
        Stmt::store(&out, 0u32, &acc),
        Stmt::decl(&n, 3),
        Stmt::for_(
            &i2,
            -2,
            &n * 2,
            1,
            Stmt::block([Stmt::assign(&n, &n + 1), Stmt::assign(&acc, &acc + 1)]),
        ),
        Stmt::store(&out, 1u32, &acc),
        Stmt::store(&out, 2u32, &n),
        Stmt::if_else(
            acc.expr().cmp_gt(0),
            Stmt::block([Stmt::let_(&t, &acc * 2), Stmt::store(&out, 3u32, &t)]),
            Stmt::block([Stmt::let_(&t, &acc * 3), Stmt::store(&out, 3u32, &t)]),
        ),
        Stmt::if_(acc.expr().cmp_lt(0), Stmt::let_(&t, 0)),
        Stmt::decl(&w, 5),
        Stmt::decl(&t, 0),
        Stmt::while_(
            w.expr().cmp_gt(0),
            Stmt::block([Stmt::assign(&t, &t + &w), Stmt::assign(&w, &w - 1)]),
        ),
        Stmt::store(&out, 4u32, &t),
        // Nested loops with an inner bound depending on the outer counter.
        Stmt::decl(&w, 0),
    ]);
    // `w` declared twice in one block is a verifier error, so build the nested part apart.
    let mut stmts = body.stmts().to_vec();
    stmts.pop();
    let (a, b) = (Var::new("a", Type::I64), Var::new("b", Type::I64));
    let cnt = Var::new("cnt", Type::I64);
    stmts.push(Stmt::decl(&cnt, Expr::i64(0)));
    stmts.push(Stmt::for_(
        &a,
        Expr::i64(0),
        Expr::i64(5),
        Expr::i64(1),
        Stmt::for_(&b, a.expr(), Expr::i64(5), Expr::i64(2), Stmt::assign(&cnt, &cnt + 1)),
    ));
    stmts.push(Stmt::store(&out, 5u32, cnt.expr().cast(Scalar::I32)));
    let k = Kernel::new("loops", vec![out], Stmt::block(stmts));
    let mut bufs = vec![Buffer::zeroed(Scalar::I32, 6)];
    run(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs).unwrap();
    // 250 + 253 = 503; then 8 iterations (-2..6); n = 3 + 8; t = 2 * 511; 5+4+3+2+1;
    // inner trip counts for a = 0..5: 3, 2, 2, 1, 1.
    assert_eq!(bufs[0].to_vec::<i32>().unwrap(), vec![503, 511, 11, 1022, 15, 9]);
}

#[test]
fn step_limit_bounds_loops() {
    let out = global("out", Scalar::U32);
    let body = Stmt::while_(Expr::bool(true), Stmt::store(&out, 0u32, out.load(0u32) + 1u32));
    let k = Kernel::new("forever", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 1)];
    let e = run_with(
        &k,
        &NdRange::new(&[2]),
        &[Arg::Buffer(0)],
        &mut bufs,
        &RunOptions::with_max_steps(1001),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "kernel `forever`, work-item (0, 0, 0): step limit exceeded: more than 1001 statements executed"
    );
    // 1001 steps: a test and a store per iteration, so 500 stores.
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![500]);
    // Limits are summed over work-items: item 1 fails.
    let k = Kernel::new("short", vec![global("out", Scalar::U32)], Stmt::block([]));
    let body = Stmt::store(k.param("out").unwrap(), Expr::global_id(0), 1u32);
    let k = k.with_body(body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 4)];
    let e = run_with(
        &k,
        &NdRange::new(&[4]),
        &[Arg::Buffer(0)],
        &mut bufs,
        &RunOptions::with_max_steps(2),
    )
    .unwrap_err();
    assert_eq!(e.work_item, Some([2, 0, 0]));
    run_with(&k, &NdRange::new(&[4]), &[Arg::Buffer(0)], &mut bufs, &RunOptions::with_max_steps(4))
        .unwrap();
}

#[test]
fn deadline_stops_endless_kernel() {
    let out = global("out", Scalar::U32);
    let body = Stmt::while_(Expr::bool(true), Stmt::store(&out, 0u32, out.load(0u32) + 1u32));
    let k = Kernel::new("forever", vec![out], body);
    let mut bufs = vec![Buffer::zeroed(Scalar::U32, 1)];
    let opts = RunOptions {
        deadline: Some(std::time::Instant::now() + std::time::Duration::from_millis(50)),
        ..RunOptions::default()
    };
    let e = run_with(&k, &NdRange::new(&[2]), &[Arg::Buffer(0)], &mut bufs, &opts).unwrap_err();
    assert_eq!(e.work_item, Some([0, 0, 0]), "{e}");
    assert!(e.message.starts_with("time limit exceeded"), "{e}");
    // A deadline that has already passed stops the launch at the first clock reading, not
    // before: a short kernel still finishes.
    let k = Kernel::new("short", vec![global("out", Scalar::U32)], Stmt::block([]));
    let k = k.with_body(Stmt::store(k.param("out").unwrap(), 0u32, 7u32));
    let opts = RunOptions { deadline: Some(std::time::Instant::now()), ..RunOptions::default() };
    run_with(&k, &NdRange::new(&[1]), &[Arg::Buffer(0)], &mut bufs, &opts).unwrap();
    assert_eq!(bufs[0].to_vec::<u32>().unwrap(), vec![7]);
}

#[test]
fn reverse_schedule_exposes_races() {
    // Every work-item writes out[0]: a race, so the two schedules disagree.
    let out = global("out", Scalar::U32);
    let k = Kernel::new("racy", vec![out.clone()], Stmt::store(&out, 0u32, Expr::global_id(0)));
    let range = NdRange::new(&[4, 2]).with_local(&[2, 1]);
    let mut fwd = vec![Buffer::zeroed(Scalar::U32, 1)];
    run(&k, &range, &[Arg::Buffer(0)], &mut fwd).unwrap();
    let mut rev = vec![Buffer::zeroed(Scalar::U32, 1)];
    let opts = RunOptions { reverse_order: true, ..RunOptions::default() };
    run_with(&k, &range, &[Arg::Buffer(0)], &mut rev, &opts).unwrap();
    assert_eq!(fwd[0].to_vec::<u32>().unwrap(), vec![3]);
    assert_eq!(rev[0].to_vec::<u32>().unwrap(), vec![0]);
    // A race-free kernel with barriers agrees under both schedules.
    let (mut a, mut b) = (
        vec![Buffer::zeroed(Scalar::I32, 4), Buffer::from_slice(&(0..256).collect::<Vec<i32>>())],
        vec![Buffer::zeroed(Scalar::I32, 4), Buffer::from_slice(&(0..256).collect::<Vec<i32>>())],
    );
    let k = reduction_kernel();
    run(&k, &NdRange::new(&[256]), &[Arg::Buffer(1), Arg::Buffer(0)], &mut a).unwrap();
    run_with(&k, &NdRange::new(&[256]), &[Arg::Buffer(1), Arg::Buffer(0)], &mut b, &opts).unwrap();
    assert_eq!(a, b);
    assert_eq!(a[0].to_vec::<i32>().unwrap(), vec![2016, 6112, 10208, 14304]);
}
