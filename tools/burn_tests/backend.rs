// Replaces burn-backend-tests' tests/common/backend.rs: the backend under test is `Inner`
// (Hypatia over Burn's backend, or Burn's alone) where Burn's suite uses `Dispatch`.

use ctor::ctor;

// Re-export
use super::{FloatElem, IntElem};

/// The backend under test without autodiff: Hypatia over Burn's, or Burn's alone.
#[cfg(all(feature = "hypatia", not(feature = "cuda")))]
pub type Inner = hypatia::Hypatia<burn::backend::Wgpu>;
#[cfg(all(not(feature = "hypatia"), not(feature = "cuda")))]
pub type Inner = burn::backend::Wgpu;
#[cfg(all(feature = "hypatia", feature = "cuda"))]
pub type Inner = hypatia::Hypatia<burn::backend::Cuda>;
#[cfg(all(not(feature = "hypatia"), feature = "cuda"))]
pub type Inner = burn::backend::Cuda;

pub type TestBackend = Inner;

#[ctor]
fn init_device_settings() {
    let device = Default::default();
    burn_tensor::set_default_dtypes::<Inner>(
        &device,
        <FloatElem as burn_tensor::Element>::dtype(),
        <IntElem as burn_tensor::Element>::dtype(),
    )
    .unwrap();
}

/// Collection of types used across tests
#[allow(unused)]
pub mod prelude {
    pub use burn_tensor::Tensor;

    use super::*;
    pub type TestTensor<const D: usize> = Tensor<TestBackend, D>;
    pub type TestTensorInt<const D: usize> = Tensor<TestBackend, D, burn_tensor::Int>;
    pub type TestTensorBool<const D: usize> = Tensor<TestBackend, D, burn_tensor::Bool>;
}

#[allow(unused)]
pub use prelude::*;

/// The default quantization scheme of the backend under test (Burn's tests ask `Dispatch`).
#[allow(unused)]
pub fn default_quant_scheme(
    _device: &burn_backend::tensor::Device<Inner>,
) -> burn_tensor::quantization::QuantScheme {
    <burn_backend::tensor::QuantizedTensor<Inner> as burn_backend::QTensorPrimitive>::default_scheme()
}
