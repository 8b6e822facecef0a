//! Which cubek-matmul kernel is fastest on this device? Times Burn's autotuned matmul and every
//! cubek-matmul routine Burn tunes over (its own inferred tilings), plus forced tilings that
//! Burn's selector never proposes, on one `M x K x N` problem. This is the measurement behind
//! Hypatia's choice of matmul engine (`book/src/performance.md`).
//!
//! ```text
//! cargo run --release --features cuda --example matmul_strategies -- --dtype bf16 --shape 4096x4096x4096
//! ```

#[path = "common/device.rs"]
mod device;
use burn::prelude::{Backend, Tensor};
use burn::tensor::{DType, TensorPrimitive, bf16, f16};
use burn_cubecl::tensor::CubeTensor;
use clap::Parser;
use cubecl::prelude::{AddressType, ComputeClient, StorageType};
use cubek_matmul::components::tile::TileMatmulKind;
use cubek_matmul::definition::{MatmulElems, MatmulGlobalElems, MatmulProblem};
use cubek_matmul::launch::Strategy;
use cubek_matmul::routines::{
    BlueprintStrategy, double_buffering::DoubleBufferingArgs,
    ordered_double_buffering::OrderedSelectionArgs, simple::SimpleArgs,
};
use cubek_std::{InputBinding, MatrixLayout};
use hypatia::kernel::engine::{Loading, Tiling};
use std::time::Instant;

#[cfg(not(feature = "cuda"))]
type Runtime = cubecl::wgpu::WgpuRuntime;
#[cfg(feature = "cuda")]
type Runtime = cubecl::cuda::CudaRuntime;

type Bare<F> = burn_cubecl::CubeBackend<Runtime, F, i32, u8>;

#[derive(Parser, Debug)]
struct Args {
    /// f32, f16 or bf16.
    #[arg(long, default_value = "bf16")]
    dtype: String,
    /// Problem as MxKxN.
    #[arg(long, default_value = "4096x4096x4096")]
    shape: String,
    /// Launches per timed batch.
    #[arg(long, default_value_t = 10)]
    iters: usize,
    /// Timed batches (the median is reported).
    #[arg(long, default_value_t = 20)]
    runs: usize,
    /// Only candidates whose name contains this.
    #[arg(long, default_value = "")]
    filter: String,
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Every candidate: a name and a strategy.
fn candidates(problem: &MatmulProblem, client: &ComputeClient<Runtime>) -> Vec<(String, Strategy)> {
    use TileMatmulKind::{Cmma, Mma};
    let mut out = Vec::new();
    for kind in [Cmma, Mma] {
        let k = format!("{kind:?}").to_lowercase();
        let simple = |multi_rows| SimpleArgs {
            multi_rows,
            tile_matmul: kind,
        };
        let double = |specialized| DoubleBufferingArgs {
            specialized,
            tile_matmul: kind,
        };
        let ordered = |row_count| OrderedSelectionArgs {
            partition_k: Some(2),
            row_count: Some(row_count),
            rows_per_plane: Some(2),
            tile_matmul: kind,
        };
        let cmma = kind == Cmma;
        let simple_cyclic = |s| match cmma {
            true => Strategy::SimpleCyclicCmma(s),
            false => Strategy::SimpleCyclicMma(s),
        };
        let double_cyclic = |s| match cmma {
            true => Strategy::DoubleCyclicCmma(s),
            false => Strategy::DoubleCyclicMma(s),
        };
        let ordered_double = |s| match cmma {
            true => Strategy::OrderedDoubleCmma(s),
            false => Strategy::OrderedDoubleMma(s),
        };
        let simple_tma = |s| match cmma {
            true => Strategy::SimpleTmaCmma(s),
            false => Strategy::SimpleTmaMma(s),
        };
        let specialized_tma = |s| match cmma {
            true => Strategy::SpecializedTmaCmma(s),
            false => Strategy::SpecializedTmaMma(s),
        };
        out.push((
            format!("inferred simple {k}"),
            simple_cyclic(BlueprintStrategy::Inferred(simple(false))),
        ));
        out.push((
            format!("inferred simple-multirow {k}"),
            simple_cyclic(BlueprintStrategy::Inferred(simple(true))),
        ));
        out.push((
            format!("inferred double {k}"),
            double_cyclic(BlueprintStrategy::Inferred(double(false))),
        ));
        out.push((
            format!("inferred double-specialized {k}"),
            double_cyclic(BlueprintStrategy::Inferred(double(true))),
        ));
        out.push((
            format!("inferred ordered-4 {k}"),
            ordered_double(BlueprintStrategy::Inferred(ordered(4))),
        ));
        out.push((
            format!("inferred ordered-8 {k}"),
            ordered_double(BlueprintStrategy::Inferred(ordered(8))),
        ));
        out.push((
            format!("inferred simple-tma {k}"),
            simple_tma(BlueprintStrategy::Inferred(simple(false))),
        ));
        out.push((
            format!("inferred specialized-tma {k}"),
            specialized_tma(BlueprintStrategy::Inferred(Default::default())),
        ));

        // Forced tilings, beyond what Burn's selector proposes: plane tile, planes, k depth.
        type Grid = ((u32, u32), (u32, u32), u32);
        let grid: [Grid; 6] = [
            ((64, 64), (2, 2), 32),
            ((64, 32), (2, 4), 32),
            ((32, 64), (4, 2), 32),
            ((64, 64), (2, 4), 32),
            ((64, 64), (2, 2), 64),
            ((128, 32), (1, 4), 32),
        ];
        for (plane, planes, depth) in grid {
            let swizzles: &[bool] = if kind == Mma {
                &[false, true]
            } else {
                &[false]
            };
            for &swizzle in swizzles {
                for loading in [
                    Loading::DoubleCyclic,
                    Loading::SpecializedTma,
                    Loading::SimpleTma,
                ] {
                    let tiling = Tiling {
                        kind,
                        loading,
                        plane,
                        planes,
                        k: depth,
                        swizzle,
                    };
                    out.push((
                        format!("forced {}", tiling.name()),
                        tiling.strategy(problem, client),
                    ));
                }
            }
        }
    }
    out
}

fn tensor<F: burn_cubecl::FloatElement>(
    shape: [usize; 2],
    device: &burn::tensor::Device<Bare<F>>,
) -> CubeTensor<Runtime> {
    let t = Tensor::<Bare<F>, 2>::random(shape, burn::tensor::Distribution::Default, device);
    match t.into_primitive() {
        TensorPrimitive::Float(t) => t,
        TensorPrimitive::QFloat(_) => unreachable!(),
    }
}

fn run<F: burn_cubecl::FloatElement>(args: &Args) {
    let dims: Vec<usize> = args.shape.split('x').map(|d| d.parse().unwrap()).collect();
    let (m, k, n) = (dims[0], dims[1], dims[2]);
    let device = Default::default();
    let dtype: DType = F::dtype();
    let elem: StorageType = dtype.into();
    let lhs = tensor::<F>([m, k], &device);
    let rhs = tensor::<F>([k, n], &device);
    let out = tensor::<F>([m, n], &device);
    let client = lhs.client.clone();
    let problem = MatmulProblem::from_parameters(
        m,
        n,
        k,
        Vec::<usize>::new().into(),
        Vec::<usize>::new().into(),
        MatrixLayout::RowMajor,
        MatrixLayout::RowMajor,
        MatrixLayout::RowMajor,
        None,
        None,
        MatmulGlobalElems {
            lhs: elem,
            rhs: elem,
            out: elem,
        },
        AddressType::U32,
    );
    let flops = 2.0 * (m * n * k) as f64;
    let time = |launch: &dyn Fn() -> Result<(), String>| -> Result<f64, String> {
        launch()?;
        Bare::<F>::sync(&device).map_err(|e| format!("{e:?}"))?;
        let batch = || {
            let start = Instant::now();
            for _ in 0..args.iters {
                launch().unwrap();
            }
            Bare::<F>::sync(&device).unwrap();
            start.elapsed().as_secs_f64() * 1e3 / args.iters as f64
        };
        batch();
        Ok(median((0..args.runs).map(|_| batch()).collect()))
    };

    let mut rows: Vec<(String, Result<f64, String>)> = Vec::new();
    let x = Tensor::<Bare<F>, 2>::from_primitive(TensorPrimitive::Float(lhs.clone()));
    let w = Tensor::<Bare<F>, 2>::from_primitive(TensorPrimitive::Float(rhs.clone()));
    if "burn autotune".contains(&args.filter) {
        // Burn's own path: `matmul` on the bare backend autotunes over cubek's strategies.
        let burn = time(&|| {
            let y = x.clone().matmul(w.clone());
            drop(y);
            Ok(())
        });
        rows.push(("burn autotune".into(), burn));
    }
    for (name, strategy) in candidates(&problem, &client) {
        if !name.contains(&args.filter) {
            continue;
        }
        let launch = || {
            let mut dtypes = MatmulElems::from_globals(&problem.global_dtypes);
            cubek_matmul::launch::launch_ref(
                &strategy,
                &client,
                InputBinding::new(lhs.clone().binding(), elem),
                InputBinding::new(rhs.clone().binding(), elem),
                out.clone().binding(),
                &mut dtypes,
            )
            .map_err(|e| format!("{e:?}"))
        };
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| time(&launch)))
            .unwrap_or_else(|_| Err("panicked".into()));
        eprintln!("{name}: {result:?}");
        rows.push((name, result));
    }
    rows.sort_by(|a, b| {
        let key = |r: &Result<f64, String>| r.as_ref().copied().unwrap_or(f64::INFINITY);
        key(&a.1).partial_cmp(&key(&b.1)).unwrap()
    });
    println!("{} {:?}", args.shape, dtype);
    println!("{:<58} {:>10} {:>9}", "kernel", "ms", "TFLOP/s");
    for (name, result) in rows {
        match result {
            Ok(ms) => println!("{name:<58} {ms:>10.4} {:>9.1}", flops / ms / 1e9),
            Err(e) => println!(
                "{name:<58} {:>10} {}",
                "-",
                e.chars().take(60).collect::<String>()
            ),
        }
    }
}

fn main() {
    let args = Args::parse();
    device::require_device();
    match args.dtype.as_str() {
        "f32" => run::<f32>(&args),
        "f16" => run::<f16>(&args),
        "bf16" => run::<bf16>(&args),
        other => panic!("unknown dtype {other}"),
    }
}
