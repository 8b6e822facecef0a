//! The `forward!` macro behind every file of this folder, and [`Rebind`].

use super::{Fused, HypatiaBackend, HypatiaFusion, Inner};
use burn_backend::TensorPrimitive;
use burn_backend::ops::{
    DeformConv2dBackward, MaxPool1dBackward, MaxPool1dWithIndices, MaxPool2dBackward,
    MaxPool2dWithIndices, TransactionPrimitive,
};
use burn_backend::quantization::QuantizationParametersPrimitive;
use burn_cubecl::{BoolElement, CubeRuntime, FloatElement, IntElement};

/// Expands one-line trait method signatures into methods that call the inner backend.
///
/// ```text
/// forward! { FloatTensorOps<Inner<R, F, I, BT>> {
///     fn float_add(lhs: FloatTensor<Self>, rhs: FloatTensor<Self>) -> FloatTensor<Self>;
/// }}
/// ```
///
/// becomes `fn float_add(lhs, rhs) -> .. { <Inner<..> as FloatTensorOps<Inner<..>>>::float_add(lhs, rhs) }`.
/// Both backends share their tensor primitives; the few types generic over the backend
/// (`TensorPrimitive<B>`, pooling results, ...) go through [`Rebind`], a move of the same fields.
/// Methods returning `impl Future` forward the inner future as is.
macro_rules! forward {
    ($trait:ident<$inner:ty> {
        $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $([$device:ident])?;)*
    }) => {
        $(
            fn $name($($arg: $ty),*) -> $ret {
                use $crate::backend::forward::Rebind as _;
                <$inner as $trait<$inner>>::$name($($arg.rebind()),*).rebind()
            }
        )*
    };
}

pub(crate) use forward;

/// [`forward!`] for the reads (`*_into_data`): an error Hypatia kept for the user (a failed
/// strict verification, a device error it flushed) is returned first, where Burn returns
/// device errors; then the inner backend reads.
macro_rules! forward_read {
    ($trait:ident<$inner:ty> {
        $(fn $name:ident($arg:ident: $ty:ty) -> $ret:ty;)*
    }) => {
        $(
            fn $name($arg: $ty) -> $ret {
                let deferred = $crate::execute::take_deferred(&$arg.device);
                let read = <$inner as $trait<$inner>>::$name($arg);
                async move {
                    match deferred {
                        Some(error) => Err(error),
                        None => read.await,
                    }
                }
            }
        )*
    };
}

pub(crate) use forward_read;

/// [`forward!`] for [`HypatiaFusion`](super::HypatiaFusion): the op is recorded by
/// burn-fusion's `Fusion`, then handed to burn-fusion's thread under the submit policy
/// (`host::submit::submitted`). An op marked `[device]` (it names a device: the ops that
/// create tensors, and moves) first starts Hypatia's service there (`host::submit::start`).
macro_rules! submit {
    ($trait:ident<$inner:ty> {
        $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty $([$device:ident])?;)*
    }) => {
        $(
            fn $name($($arg: $ty),*) -> $ret {
                use $crate::backend::forward::Rebind as _;
                $($crate::host::submit::start::<R, $crate::runtime::HypatiaRuntime<R>>($device);)?
                let out = <$inner as $trait<$inner>>::$name($($arg.rebind()),*).rebind();
                $crate::host::submit::submitted($crate::config::config().submit);
                out
            }
        )*
    };
}

pub(crate) use submit;

/// [`submit!`] for the methods [`HypatiaFusion`](super::HypatiaFusion) runs itself
/// (`backend::bias::OwnOps`: a Linear's bias reshaped once), then hands to burn-fusion's
/// thread under the submit policy.
macro_rules! own {
    ($trait:ident<$inner:ty> {
        $(fn $name:ident($($arg:ident: $ty:ty),* $(,)?) -> $ret:ty;)*
    }) => {
        $(
            fn $name($($arg: $ty),*) -> $ret {
                let out = <Self as $crate::backend::bias::OwnOps>::$name($($arg),*);
                $crate::host::submit::submitted($crate::config::config().submit);
                out
            }
        )*
    };
}

pub(crate) use own;

/// The `Backend` methods both backends forward as they are (all but `name` and `sync`), each
/// after `$before` (for [`HypatiaFusion`](super::HypatiaFusion): `host::stream::configure`, as
/// any of them may start the device's CubeCL server).
macro_rules! forward_backend {
    ($inner:ty $(, $before:expr)?) => {
        fn seed(device: &Self::Device, seed: u64) {
            $($before;)?
            <$inner>::seed(device, seed)
        }

        fn ad_enabled(device: &Self::Device) -> bool {
            $($before;)?
            <$inner>::ad_enabled(device)
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
            $($before;)?
            <$inner>::memory_persistent_allocations(device, input, func)
        }

        fn memory_cleanup(device: &Self::Device) {
            $($before;)?
            <$inner>::memory_cleanup(device)
        }

        fn staging<'a, Iter>(data: Iter, device: &Self::Device)
        where
            Iter: Iterator<Item = &'a mut burn_backend::TensorData>,
        {
            $($before;)?
            <$inner>::staging(data, device)
        }

        fn supports_dtype(device: &Self::Device, dtype: burn_backend::DType) -> bool {
            $($before;)?
            <$inner>::supports_dtype(device, dtype)
        }

        fn dtype_usage(
            device: &Self::Device,
            dtype: burn_backend::DType,
        ) -> burn_backend::DTypeUsageSet {
            $($before;)?
            <$inner>::dtype_usage(device, dtype)
        }

        fn device_count(type_id: u16) -> usize {
            $($before;)?
            <$inner>::device_count(type_id)
        }
    };
}

pub(crate) use forward_backend;

/// `BackendIr`, forwarded: both backends share the inner backend's handle type.
macro_rules! forward_backend_ir {
    ($inner:ty) => {
        type Handle = <$inner as burn_ir::BackendIr>::Handle;

        fn float_tensor(handle: burn_ir::TensorHandle<Self::Handle>) -> FloatTensor<Self> {
            <$inner>::float_tensor(handle)
        }

        fn int_tensor(handle: burn_ir::TensorHandle<Self::Handle>) -> IntTensor<Self> {
            <$inner>::int_tensor(handle)
        }

        fn bool_tensor(handle: burn_ir::TensorHandle<Self::Handle>) -> BoolTensor<Self> {
            <$inner>::bool_tensor(handle)
        }

        fn quantized_tensor(handle: burn_ir::TensorHandle<Self::Handle>) -> QuantizedTensor<Self> {
            <$inner>::quantized_tensor(handle)
        }

        fn float_tensor_handle(tensor: FloatTensor<Self>) -> Self::Handle {
            <$inner>::float_tensor_handle(tensor)
        }

        fn int_tensor_handle(tensor: IntTensor<Self>) -> Self::Handle {
            <$inner>::int_tensor_handle(tensor)
        }

        fn bool_tensor_handle(tensor: BoolTensor<Self>) -> Self::Handle {
            <$inner>::bool_tensor_handle(tensor)
        }

        fn quantized_tensor_handle(tensor: QuantizedTensor<Self>) -> Self::Handle {
            <$inner>::quantized_tensor_handle(tensor)
        }
    };
}

pub(crate) use forward_backend_ir;

/// The same value seen with the other backend as type parameter.
pub(crate) trait Rebind<T> {
    fn rebind(self) -> T;
}

impl<T> Rebind<T> for T {
    fn rebind(self) -> T {
        self
    }
}

/// Implements [`Rebind`] both ways for a struct generic over the backend, field by field,
/// between the two backends of each pair that share their tensor primitives.
macro_rules! rebind_struct {
    ($($name:ident { $($field:ident),* })*) => {$(
        rebind_struct!(@pair $name { $($field),* } HypatiaBackend, Inner);
        rebind_struct!(@pair $name { $($field),* } HypatiaFusion, Fused);
    )*};
    (@pair $name:ident { $($field:ident),* } $a:ident, $b:ident) => {
        impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
            Rebind<$name<$b<R, F, I, BT>>> for $name<$a<R, F, I, BT>>
        {
            fn rebind(self) -> $name<$b<R, F, I, BT>> {
                $name { $($field: self.$field),* }
            }
        }
        impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
            Rebind<$name<$a<R, F, I, BT>>> for $name<$b<R, F, I, BT>>
        {
            fn rebind(self) -> $name<$a<R, F, I, BT>> {
                $name { $($field: self.$field),* }
            }
        }
    };
}

rebind_struct! {
    DeformConv2dBackward { x_grad, offset_grad, weight_grad, mask_grad, bias_grad }
    MaxPool1dBackward { x_grad }
    MaxPool1dWithIndices { output, indices }
    MaxPool2dBackward { x_grad }
    MaxPool2dWithIndices { output, indices }
    QuantizationParametersPrimitive { scales }
}

// `TransactionPrimitive` has a private field (its read order), empty on the way in from
// `Fusion`, which builds it with `new`; so does this.
macro_rules! rebind_transaction {
    ($from:ident => $to:ident) => {
        impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
            Rebind<TransactionPrimitive<$to<R, F, I, BT>>>
            for TransactionPrimitive<$from<R, F, I, BT>>
        {
            fn rebind(self) -> TransactionPrimitive<$to<R, F, I, BT>> {
                TransactionPrimitive::new(
                    self.read_floats,
                    self.read_qfloats,
                    self.read_ints,
                    self.read_bools,
                )
            }
        }
    };
}

rebind_transaction!(HypatiaBackend => Inner);
rebind_transaction!(Inner => HypatiaBackend);
rebind_transaction!(HypatiaFusion => Fused);
rebind_transaction!(Fused => HypatiaFusion);

macro_rules! rebind_primitive {
    ($from:ident => $to:ident) => {
        impl<R: CubeRuntime, F: FloatElement, I: IntElement, BT: BoolElement>
            Rebind<TensorPrimitive<$to<R, F, I, BT>>> for TensorPrimitive<$from<R, F, I, BT>>
        {
            fn rebind(self) -> TensorPrimitive<$to<R, F, I, BT>> {
                match self {
                    TensorPrimitive::Float(tensor) => TensorPrimitive::Float(tensor),
                    TensorPrimitive::QFloat(tensor) => TensorPrimitive::QFloat(tensor),
                }
            }
        }
    };
}

rebind_primitive!(HypatiaBackend => Inner);
rebind_primitive!(Inner => HypatiaBackend);
rebind_primitive!(HypatiaFusion => Fused);
rebind_primitive!(Fused => HypatiaFusion);
