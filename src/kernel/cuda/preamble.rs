//! The one generator of CUDA source text: [the shared header](HEADER), a configuration's
//! `#define`s and generated code, then the kernel. The crate's kernels and the device
//! benchmarks (through `examples/cuda_source.rs`) compile what it writes.

use std::fmt::{Display, Write};

/// `hypatia.cuh`: headers, integer types and the activations every kernel shares.
pub const HEADER: &str = include_str!("hypatia.cuh");

/// The text before a kernel: the shared header, then `#define`s and generated code in the order
/// they are added.
///
/// ```
/// use hypatia::kernel::cuda::Preamble;
/// let source = Preamble::new().define("BN", 256).define("ACT", "1u").finish("// kernel\n");
/// assert!(source.starts_with("// What every hand-written kernel"));
/// assert!(source.ends_with("#define BN 256\n#define ACT 1u\n// kernel\n"));
/// ```
#[derive(Clone, Debug)]
pub struct Preamble {
    text: String,
}

impl Default for Preamble {
    fn default() -> Self {
        Self::new()
    }
}

impl Preamble {
    /// The shared header alone.
    pub fn new() -> Self {
        Self {
            text: HEADER.to_string(),
        }
    }

    /// `#define name value`.
    pub fn define(mut self, name: &str, value: impl Display) -> Self {
        let _ = writeln!(self.text, "#define {name} {value}");
        self
    }

    /// Generated code (an inline-PTX wrapper, a type), as is.
    pub fn code(mut self, code: &str) -> Self {
        self.text.push_str(code);
        self
    }

    /// The whole source: this preamble, then `kernel`.
    pub fn finish(mut self, kernel: &str) -> String {
        self.text.push_str(kernel);
        self.text
    }
}
