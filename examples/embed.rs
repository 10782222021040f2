//! Embedding kiln as a JIT library, one step at a time: pick a device, compile source, launch
//! a kernel (by name with `args!`, then through a typed handle), read the result back; then
//! fuse three kernels and launch the fused kernel with the arguments of the originals.
//!
//! `cargo run --example embed [interp|cpu|vulkan|cuda|best]` (default `interp`).

use kiln::{args, Buffer, Device, FusionSpec, Jit, NdRange};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // 1. A device and a JIT on it. The explicit constructors fail with a clear message when
    //    the driver is missing; `best()` takes a GPU, else the cpu device, else the
    //    interpreter.
    let device = match std::env::args().nth(1).as_deref().unwrap_or("interp") {
        "interp" => Device::interp(),
        "cpu" => Device::cpu()?,
        "vulkan" => Device::vulkan()?,
        "cuda" => Device::cuda()?,
        "best" => Device::best(),
        other => {
            return Err(format!("unknown device `{other}` (interp, cpu, vulkan, cuda, best)").into())
        }
    };
    let jit = Jit::new(device)?;
    println!("device: {}", jit.device().name());

    // 2. Source to a verified module; errors are located (file:line:col and a caret).
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/examples");
    let saxpy =
        jit.compile_source("saxpy.kir", &std::fs::read_to_string(format!("{dir}/saxpy.kir"))?)?;

    // 3. Typed buffers, a launch with arguments in parameter order, the result read back.
    let n = 8u32;
    let host_x: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = jit.buffer_from(&host_x);
    let y = jit.buffer_zeroed::<f32>(n as usize);
    jit.launch(&saxpy, "saxpy", NdRange::new(&[n]), args![&x, &y, 2.0f32, n])?.wait()?;
    let out: Vec<f32> = y.read()?;
    println!("saxpy: y = {out:?}");
    check(&out, &host_x.iter().map(|x| 2.0 * x).collect::<Vec<_>>())?;
    // The same kernel through a typed handle: its signature is checked once, here, and the
    // compiler checks each launch's arguments against it (`2.0f64` would not compile).
    let typed = jit.kernel::<(&Buffer<f32>, &Buffer<f32>, f32, u32)>(&saxpy, "saxpy")?;
    typed.launch(NdRange::new(&[n]), (&x, &y, 1.0, n))?.wait()?;
    check(&y.read()?, &host_x.iter().map(|x| 3.0 * x).collect::<Vec<_>>())?;

    // 4. Fusion: add, mul and sub of examples/fusion/chain.kir become one kernel whose
    //    intermediates t1 and t2 stay in private memory (chain.toml says how).
    let chain = jit.compile_source(
        "chain.kir",
        &std::fs::read_to_string(format!("{dir}/fusion/chain.kir"))?,
    )?;
    let spec =
        FusionSpec::from_toml(&std::fs::read_to_string(format!("{dir}/fusion/chain.toml"))?)?;
    let fused = jit.fuse(&chain, &spec)?;
    for w in fused.warnings() {
        println!("warning: {w}");
    }
    println!("fused kernel `{}` over {:?}", fused.kernel().name(), fused.range().global);

    // 5. The fused launch takes each original kernel's arguments, as if they ran in turn;
    //    the library maps them onto the fused kernel's parameters.
    let len = 64;
    let a = jit.buffer_from(&(0..len).map(|i| i as f32).collect::<Vec<_>>());
    let b = jit.buffer_from(&vec![1.0f32; len]);
    let c = jit.buffer_from(&vec![3.0f32; len]);
    let (t1, t2) = (jit.buffer_zeroed::<f32>(len), jit.buffer_zeroed::<f32>(len));
    let result = jit.buffer_zeroed::<f32>(len);
    jit.launch_fused(&fused, &[args![&a, &b, &t1], args![&t1, &c, &t2], args![&t2, &a, &result]])?
        .wait()?;
    let got = result.read()?;
    let want: Vec<f32> = (0..len).map(|i| (i as f32 + 1.0) * 3.0 - i as f32).collect();
    println!("chain: out[..4] = {:?}", &got[..4]);
    check(&got, &want)?;
    // t1 and t2 were promoted: the fused kernel never touched them.
    check(&t1.read()?, &vec![0.0; len])?;
    Ok(())
}

fn check(got: &[f32], want: &[f32]) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("wrong result: {got:?}, expected {want:?}"))
    }
}
