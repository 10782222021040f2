//! kiln as a library, end to end: build saxpy with the IR builders, print it in the text
//! format, check that the text parses back to the same kernel, verify it, and run it on the
//! reference interpreter.
//!
//! ```text
//! cargo run --example build_and_run
//! ```

use std::error::Error;

use kiln::ir::interp;
use kiln::ir::launch::{Arg, Buffer, NdRange};
use kiln::ir::{
    parse_module, verify_kernel, AddrSpace, Expr, Imm, Kernel, Scalar, Stmt, Type, Var,
};

/// `y[i] = a * x[i] + y[i]` for every `i < n`.
fn saxpy() -> Kernel {
    let x = Var::new("x", Type::ptr(AddrSpace::Global, Scalar::F32));
    let y = Var::new("y", Type::ptr(AddrSpace::Global, Scalar::F32));
    let a = Var::new("a", Type::F32);
    let n = Var::new("n", Type::U32);
    let i = Var::new("i", Type::U32);
    let body = Stmt::block([
        Stmt::let_(&i, Expr::global_id(0)),
        Stmt::if_(
            i.expr().cmp_lt(&n),
            Stmt::block([Stmt::store(&y, &i, &a * x.load(&i) + y.load(&i))]),
        ),
    ]);
    Kernel::new("saxpy", vec![x, y, a, n], body)
}

fn run() -> Result<(), Box<dyn Error>> {
    let kernel = saxpy();
    println!("{kernel}");

    // The text format round-trips: parsing what was printed gives the same kernel.
    let text = kernel.to_string();
    let parsed = parse_module(&text)?;
    assert!(parsed.kernels.len() == 1 && parsed.kernels[0].is_equal(&kernel));

    verify_kernel(&kernel)
        .map_err(|errs| errs.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))?;

    let n = 8u32;
    let xs: Vec<f32> = (0..n).map(|v| v as f32).collect();
    let ys = vec![1.0f32; n as usize];
    let a = 2.0f32;
    let mut buffers = vec![Buffer::from_slice(&xs), Buffer::from_slice(&ys)];
    let args = [
        Arg::Buffer(0),
        Arg::Buffer(1),
        Arg::Scalar(Imm::float(Scalar::F32, a as f64)),
        Arg::Scalar(Imm::int(Scalar::U32, n as i128)),
    ];
    let range = NdRange::new(&[n]);
    interp::run(&kernel, &range, &args, &mut buffers)?;

    let out: Vec<f32> = buffers[1].to_vec().ok_or("y is not an f32 buffer")?;
    println!("y = {out:?}");
    for i in 0..n as usize {
        assert_eq!(out[i], a * xs[i] + ys[i]);
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            std::process::ExitCode::FAILURE
        }
    }
}
