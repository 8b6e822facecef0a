//! A burn-cuda 0.22.1 program: relu(x · w) on `Device::cuda`, and `--dry` to stop before the
//! device is opened (this machine has no GPU).
use burn::tensor::{Device, DeviceIndex, Tensor, activation::relu};

fn main() {
    if std::env::args().any(|a| a == "--dry") {
        println!("built (burn-cuda, LLVM linked)");
        return;
    }
    let device = Device::cuda(DeviceIndex::Default);
    let x = Tensor::<2>::ones([4, 8], &device);
    let w = Tensor::<2>::ones([8, 3], &device);
    println!("{}", relu(x.matmul(w)));
}
