//! Allocates and frees device buffers through cudarc's safe API and prints what it did.
//! cudarc resolves the driver with dlsym on a libcuda handle and allocates with
//! cuMemAllocAsync/cuMemFreeAsync when the device supports memory pools (else cuMemAlloc_v2).

use cudarc::driver::CudaContext;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = CudaContext::new(0)?;
    let stream = ctx.default_stream();
    let n = 64;
    let mut total = 0usize;
    for i in 0..n {
        let len = (i + 1) * 1024;
        let buf = stream.alloc_zeros::<f32>(len)?;
        total += len * 4;
        drop(buf);
    }
    stream.synchronize()?;
    println!("expect allocations {n} bytes {total}");
    Ok(())
}
