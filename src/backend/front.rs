//! [`HypatiaFusion`]: burn-fusion's `Fusion<HypatiaBackend>`, every op forwarded, with Hypatia's
//! submission and `sync` (`runtime::submit`).

use super::{HypatiaBackend, Inner};
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{Backend, BackendTypes, DType, DTypeUsageSet, ExecutionError, TensorData};
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};
use burn_fusion::{Fusion, FusionTensor};
use burn_ir::{BackendIr, TensorHandle};
use core::marker::PhantomData;

use crate::runtime::HypatiaRuntime;

/// burn-fusion's backend over [`HypatiaBackend`], which [`HypatiaFusion`] forwards to.
pub(crate) type Fused<R, F, I, BT> = Fusion<HypatiaBackend<R, F, I, BT>>;

/// What [`Hypatia<B>`](crate::Hypatia) names: burn-fusion's `Fusion<HypatiaBackend<..>>` (same
/// tensors, same op stream, same fusers), except that under the default policies the ops are
/// handed to burn-fusion's thread as they are recorded (so they are fused while the caller
/// records the next ones), and `sync` spins on burn-fusion's answer before parking (see
/// `runtime::submit`, [`SubmitPolicy`](crate::kernel::SubmitPolicy) and
/// [`SyncPolicy`](crate::kernel::SyncPolicy)).
pub struct HypatiaFusion<R, F = f32, I = i32, BT = u8> {
    _types: PhantomData<(R, F, I, BT)>,
}

impl<R, F, I, BT> core::fmt::Debug for HypatiaFusion<R, F, I, BT> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("HypatiaFusion")
    }
}

impl<R, F, I, BT> Clone for HypatiaFusion<R, F, I, BT> {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl<R, F, I, BT> Default for HypatiaFusion<R, F, I, BT> {
    fn default() -> Self {
        Self {
            _types: PhantomData,
        }
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> BackendTypes
    for HypatiaFusion<R, F, I, BT>
{
    type Device = R::Device;
    type FloatTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
    type FloatElem = F;
    type IntTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
    type IntElem = I;
    type BoolTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
    type BoolElem = BT;
    type QuantizedTensorPrimitive = FusionTensor<HypatiaRuntime<R>>;
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> Backend
    for HypatiaFusion<R, F, I, BT>
{
    fn name(device: &Self::Device) -> String {
        format!("fusion<{}>", HypatiaBackend::<R, F, I, BT>::name(device))
    }

    fn seed(device: &Self::Device, seed: u64) {
        Fused::<R, F, I, BT>::seed(device, seed)
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        crate::runtime::submit::fusion_sync::<HypatiaBackend<R, F, I, BT>>(device)
    }

    fn ad_enabled(device: &Self::Device) -> bool {
        Fused::<R, F, I, BT>::ad_enabled(device)
    }

    fn memory_persistent_allocations<
        Output: Send,
        Input: Send,
        Func: Fn(Input) -> Output + Send,
    >(
        device: &Self::Device,
        input: Input,
        func: Func,
    ) -> Output {
        Fused::<R, F, I, BT>::memory_persistent_allocations(device, input, func)
    }

    fn memory_cleanup(device: &Self::Device) {
        Fused::<R, F, I, BT>::memory_cleanup(device)
    }

    fn staging<'a, Iter>(data: Iter, device: &Self::Device)
    where
        Iter: Iterator<Item = &'a mut TensorData>,
    {
        Fused::<R, F, I, BT>::staging(data, device)
    }

    fn supports_dtype(device: &Self::Device, dtype: DType) -> bool {
        Fused::<R, F, I, BT>::supports_dtype(device, dtype)
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        Fused::<R, F, I, BT>::dtype_usage(device, dtype)
    }

    fn device_count(type_id: u16) -> usize {
        Inner::<R, F, I, BT>::device_count(type_id)
    }
}

impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement> BackendIr
    for HypatiaFusion<R, F, I, BT>
{
    type Handle = FusionTensor<HypatiaRuntime<R>>;

    fn float_tensor(handle: TensorHandle<Self::Handle>) -> FloatTensor<Self> {
        Fused::<R, F, I, BT>::float_tensor(handle)
    }

    fn int_tensor(handle: TensorHandle<Self::Handle>) -> IntTensor<Self> {
        Fused::<R, F, I, BT>::int_tensor(handle)
    }

    fn bool_tensor(handle: TensorHandle<Self::Handle>) -> BoolTensor<Self> {
        Fused::<R, F, I, BT>::bool_tensor(handle)
    }

    fn quantized_tensor(handle: TensorHandle<Self::Handle>) -> QuantizedTensor<Self> {
        Fused::<R, F, I, BT>::quantized_tensor(handle)
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> Self::Handle {
        Fused::<R, F, I, BT>::float_tensor_handle(tensor)
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> Self::Handle {
        Fused::<R, F, I, BT>::int_tensor_handle(tensor)
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> Self::Handle {
        Fused::<R, F, I, BT>::bool_tensor_handle(tensor)
    }

    fn quantized_tensor_handle(tensor: QuantizedTensor<Self>) -> Self::Handle {
        Fused::<R, F, I, BT>::quantized_tensor_handle(tensor)
    }
}
