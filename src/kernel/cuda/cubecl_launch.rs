//! Launching a hand-written kernel through CubeCL's CUDA runtime.

use burn_backend::DType;
use cubecl::cuda::{CudaCompiler, CudaComputeKernel};
use cubecl::prelude::*;
use cubecl::server::KernelArguments;
use cubecl::{CompilationError, CubeTask};
use cubecl_cpp::shared::{Body, Elem, Flags, Item, SharedMemory};
use cubecl_runtime::id::KernelId;
use cubecl_runtime::kernel::{CompiledKernel, KernelMetadata};
use cubecl_runtime::server::ComputeServer;
use std::any::{Any, TypeId};
use std::collections::HashSet;
use std::fmt::Debug;
use std::hash::Hash;

/// One configuration of a hand-written kernel.
pub(crate) trait CudaSource: Copy + Debug + Hash + Eq + Send + Sync + 'static {
    /// The `extern "C"` entry point.
    const ENTRY_POINT: &'static str;
    /// The name in CubeCL's logs and profiles.
    const DEBUG_NAME: &'static str;
    /// Threads per block (1-D).
    fn threads(&self) -> u32;
    /// Dynamic shared memory bytes (0: none).
    fn shared_bytes(&self) -> usize;
    /// The CUDA source of this configuration.
    fn source(&self) -> String;
}

struct SourceTask<S: CudaSource> {
    config: S,
}

impl<S: CudaSource> KernelMetadata for SourceTask<S> {
    fn id(&self) -> KernelId {
        // CubeCL's PTX cache (`[compilation] cache` in `cubecl.toml`) finds a kernel by this id,
        // not by its source: the version keeps an upgraded Hypatia from running cached PTX of
        // an older one's kernels.
        KernelId::new::<Self>()
            .info((env!("CARGO_PKG_VERSION"), self.config))
            .cube_dim(CubeDim::new_1d(self.config.threads()))
    }

    fn address_type(&self) -> StorageType {
        DType::U32.into()
    }
}

impl<S: CudaSource> CubeTask<CudaCompiler> for SourceTask<S> {
    fn compile(
        &self,
        _compiler: &mut CudaCompiler,
        _options: &<CudaCompiler as cubecl::Compiler>::CompilationOptions,
        _mode: ExecutionMode,
        _address_type: StorageType,
    ) -> Result<CompiledKernel<CudaCompiler>, CompilationError> {
        let cube_dim = CubeDim::new_1d(self.config.threads());
        Ok(CompiledKernel {
            entrypoint_name: S::ENTRY_POINT.to_string(),
            debug_name: Some(S::DEBUG_NAME),
            source: self.config.source(),
            repr: Some(shared_memory_repr(
                self.config.shared_bytes(),
                cube_dim,
                S::ENTRY_POINT,
            )),
            cube_dim,
            debug_info: None,
        })
    }
}

/// The runtime reads only the dynamic shared-memory size from the compiled representation.
fn shared_memory_repr(bytes: usize, cube_dim: CubeDim, name: &str) -> CudaComputeKernel {
    let address_type = Item::scalar(Elem::U32, true);
    CudaComputeKernel {
        tensor_maps: Vec::new(),
        buffers: Vec::new(),
        scalars: Vec::new(),
        info: Default::default(),
        meta_static_len: 0,
        body: Body {
            instructions: Vec::new(),
            shared_memories: (bytes > 0)
                .then_some(SharedMemory::Array {
                    index: 0,
                    item: Item::scalar(Elem::U8, true),
                    length: bytes,
                    align: 1024,
                    offset: 0,
                })
                .into_iter()
                .collect(),
            pipelines: Vec::new(),
            barriers: Vec::new(),
            const_arrays: Vec::new(),
            local_arrays: Vec::new(),
            info_by_ptr: false,
            has_dynamic_meta: false,
            address_type,
        },
        cube_dim,
        cluster_dim: None,
        extensions: Vec::new(),
        flags: Flags::default(),
        items: HashSet::new(),
        kernel_name: name.to_string(),
    }
}

/// Whether `R` is CubeCL's CUDA runtime (the only one that runs these kernels).
pub(crate) fn is_cuda<R: Runtime>() -> bool {
    TypeId::of::<<R::Server as ComputeServer>::Kernel>()
        == TypeId::of::<Box<dyn CubeTask<CudaCompiler>>>()
}

/// Launches `config`'s kernel on `blocks` blocks with `args`.
///
/// # Errors
/// When `R` is not CubeCL's CUDA runtime (nothing launched then).
pub(crate) fn launch_source<R: Runtime, S: CudaSource>(
    client: &ComputeClient<R>,
    config: S,
    blocks: u32,
    args: KernelArguments,
) -> Result<(), String> {
    let task: Box<dyn CubeTask<CudaCompiler>> = Box::new(SourceTask { config });
    let kernel = (Box::new(task) as Box<dyn Any>)
        .downcast::<<R::Server as ComputeServer>::Kernel>()
        .map_err(|_| "not the CUDA runtime".to_string())?;
    client.launch(*kernel, CubeCount::Static(blocks, 1, 1), args);
    Ok(())
}

/// Packs 32-bit parameter words two to a 64-bit slot (little-endian), as a `struct` of `u32`s
/// and `float`s passed by value reads them.
pub(crate) fn pack_words(words: &[u32]) -> Vec<u64> {
    words
        .chunks(2)
        .map(|pair| pair[0] as u64 | (pair.get(1).copied().unwrap_or(0) as u64) << 32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_pack_low_half_first() {
        assert_eq!(pack_words(&[1, 2, 3]), vec![1 | 2 << 32, 3]);
    }
}
