//! Whether this machine has a device for the example's backend, asked before Burn starts one:
//! without one, CubeCL panics twice inside its device thread (`No possible adapter available
//! for backend`, then `RecvError`), which names no fix.

/// Exits with one line naming the fix when no device can run the example.
pub fn require_device() {
    if let Err(message) = check() {
        eprintln!("error: {message}");
        std::process::exit(1);
    }
}

/// wgpu: an adapter of the graphics API Burn's `Wgpu` asks for (`AutoGraphicsApi`: Vulkan,
/// or Metal on macOS); CubeCL picks the best one, a CPU one like lavapipe too.
#[cfg(not(feature = "cuda"))]
fn check() -> Result<(), String> {
    use cubecl::wgpu::{AutoGraphicsApi, GraphicsApi};
    let backends = wgpu::Backends::from(AutoGraphicsApi::backend());
    let instance = wgpu::Instance::default();
    let adapters = cubecl::future::block_on(instance.enumerate_adapters(backends));
    match adapters.is_empty() {
        true => Err(
            "no GPU adapter found (wgpu): install your GPU's Vulkan or Metal driver, or \
             Mesa's software Vulkan driver to run on the CPU (`sudo apt-get install \
             mesa-vulkan-drivers`), or build with `--features cuda` on an NVIDIA GPU"
                .into(),
        ),
        false => Ok(()),
    }
}

/// CUDA: the NVIDIA kernel driver (on Linux, where it says so in `/proc`).
#[cfg(feature = "cuda")]
fn check() -> Result<(), String> {
    let linux = cfg!(target_os = "linux");
    match linux && !std::path::Path::new("/proc/driver/nvidia/version").exists() {
        true => Err(
            "no NVIDIA driver found (`/proc/driver/nvidia/version`): `--features cuda` \
             needs an NVIDIA GPU and its driver; without one, leave the feature out (wgpu: any \
             Vulkan or Metal GPU, or the CPU through Mesa's lavapipe: `sudo apt-get install \
             mesa-vulkan-drivers`)"
                .into(),
        ),
        false => Ok(()),
    }
}
