// Replaces burn-backend-tests' tests/common/autodiff.rs: Burn's autodiff suite, twice (plain
// and with balanced checkpointing), on `Autodiff<Inner>` where Burn's uses a `Dispatch` device.

pub use super::*;

/// The test types of one autodiff backend over `Inner`; its device is `Inner`'s.
macro_rules! autodiff_types {
    ($backend:ty) => {
        pub type TestBackend = $backend;
        pub type TestTensor<const D: usize> = burn_tensor::Tensor<TestBackend, D>;
        pub type TestTensorInt<const D: usize> =
            burn_tensor::Tensor<TestBackend, D, burn_tensor::Int>;
        pub type TestTensorBool<const D: usize> =
            burn_tensor::Tensor<TestBackend, D, burn_tensor::Bool>;

        // Autodiff-enabled device used for tests.
        pub struct AutodiffDevice;

        impl AutodiffDevice {
            #[allow(clippy::new_ret_no_self)]
            pub fn new() -> burn_backend::tensor::Device<Inner> {
                Default::default()
            }
        }
    };
}

mod base {
    pub use super::*;

    autodiff_types!(burn::backend::Autodiff<Inner>);

    include!("../autodiff/mod.rs");
}

mod checkpointing {
    pub use super::*;

    autodiff_types!(
        burn::backend::Autodiff<Inner, burn_autodiff::checkpoint::strategy::BalancedCheckpointing>
    );

    include!("../autodiff/mod.rs");
}
