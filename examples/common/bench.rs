//! What the benchmark examples share: the runtime, medians, and one child process per dtype.

#[cfg(not(feature = "cuda"))]
pub mod runtime {
    pub type Runtime = cubecl::wgpu::WgpuRuntime;
    pub type PlainOf<F> = burn::backend::Wgpu<F, i32>;
}
#[cfg(feature = "cuda")]
pub mod runtime {
    pub type Runtime = cubecl::cuda::CudaRuntime;
    pub type PlainOf<F> = burn::backend::Cuda<F, i32>;
}

/// A benchmark that runs for one float type at a time.
pub trait PerDtype<Row> {
    /// Appends the rows of float type `F`.
    fn run<F: burn_cubecl::FloatElement>(&self, rows: &mut Vec<Row>);
}

/// The median of `v`.
pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// This process's arguments without `--dtypes`, `--json` and `--no-header` (and their values).
fn passed_on_args() -> Vec<String> {
    let mut args = Vec::new();
    let mut skip_value = false;
    for arg in std::env::args().skip(1) {
        let name = arg.split('=').next().unwrap_or_default();
        if std::mem::take(&mut skip_value) {
            continue;
        }
        match name {
            "--dtypes" | "--json" => skip_value = !arg.contains('='),
            "--no-header" => {}
            _ => args.push(arg),
        }
    }
    args
}

/// Runs this benchmark for one dtype in a child process (Burn 0.21 fixes a device's float
/// dtype at the first tensor of the process, so a second dtype in the same process would
/// silently run in the first one's) with this process's other arguments, and returns the rows
/// it wrote.
fn run_child<Row: serde::de::DeserializeOwned>(dtype: &str) -> Vec<Row> {
    let exe = std::env::current_exe().expect("own path");
    let name = exe
        .file_name()
        .expect("a file")
        .to_string_lossy()
        .to_string();
    let json = std::env::temp_dir().join(format!("{name}_{}_{dtype}.json", std::process::id()));
    let status = std::process::Command::new(&exe)
        .args(passed_on_args())
        .args(["--dtypes", dtype, "--no-header", "--json"])
        .arg(&json)
        .status()
        .expect("spawn the benchmark for one dtype");
    assert!(status.success(), "{dtype} benchmark failed");
    let rows = std::fs::read_to_string(&json).expect("child's json");
    let _ = std::fs::remove_file(&json);
    serde_json::from_str(&rows).expect("child's rows")
}

/// A table header from `columns`, `|`-separated: `name:W` right-aligns `name` in `W`
/// characters, `name:<W` left-aligns it, and a column without a width is printed as it is.
fn header(columns: &str) -> String {
    let cells: Vec<String> = columns
        .split('|')
        .map(|column| match column.rsplit_once(':') {
            Some((name, width)) if width.starts_with('<') => {
                format!("{name:<w$}", w = width[1..].parse().expect("a width"))
            }
            Some((name, width)) => format!("{name:>w$}", w = width.parse().expect("a width")),
            None => format!(" {column}"),
        })
        .collect();
    cells.join(" ")
}

/// A benchmark's whole run: the table's header (`columns`, see [`header`]) unless
/// `no_header` (a per-dtype child leaves it to its parent), the rows of each of `dtypes`
/// (see [`rows_for`]), and the rows as JSON to `json` if given.
pub fn run_table<Row: serde::de::DeserializeOwned + serde::Serialize>(
    bench: &impl PerDtype<Row>,
    dtypes: &str,
    no_header: bool,
    columns: &str,
    json: Option<&std::path::Path>,
) {
    if !no_header {
        println!("{}", header(columns));
    }
    let rows = rows_for(dtypes, bench);
    write_json(json, &rows);
}

/// Writes `rows` as pretty JSON to `path`, if given.
fn write_json<Row: serde::Serialize>(path: Option<&std::path::Path>, rows: &[Row]) {
    if let Some(path) = path {
        std::fs::write(
            path,
            serde_json::to_string_pretty(rows).expect("rows serialise"),
        )
        .expect("write the json");
    }
}

/// The rows for `dtypes` (comma separated): one dtype runs here through `bench`, several run
/// one child process each.
fn rows_for<Row: serde::de::DeserializeOwned>(
    dtypes: &str,
    bench: &impl PerDtype<Row>,
) -> Vec<Row> {
    use burn::tensor::{bf16, f16};
    let dtypes: Vec<&str> = dtypes.split(',').collect();
    let mut rows = Vec::new();
    match dtypes.as_slice() {
        ["f32"] => bench.run::<f32>(&mut rows),
        ["f16"] => bench.run::<f16>(&mut rows),
        ["bf16"] => bench.run::<bf16>(&mut rows),
        [other] => panic!("unknown dtype {other}"),
        _ => {
            for dtype in dtypes {
                rows.extend(run_child::<Row>(dtype));
            }
        }
    }
    rows
}

/// Linear layers of the given widths with ReLU between them (none after the last).
#[derive(burn::module::Module, Debug)]
pub struct Mlp<B: burn::prelude::Backend> {
    layers: Vec<burn::nn::Linear<B>>,
}

impl<B: burn::prelude::Backend> Mlp<B> {
    /// `widths`: d_in, the hidden widths, d_out.
    #[allow(dead_code)] // not every benchmark builds an MLP
    pub fn new(widths: &[usize], device: &B::Device) -> Self {
        let layers = widths
            .windows(2)
            .map(|w| burn::nn::LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        Self { layers }
    }

    /// The output of the last layer.
    #[allow(dead_code)]
    pub fn forward(&self, mut x: burn::prelude::Tensor<B, 2>) -> burn::prelude::Tensor<B, 2> {
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(x);
            if i + 1 < self.layers.len() {
                x = burn::tensor::activation::relu(x);
            }
        }
        x
    }
}
