//! Epilogues: what happens to an accumulator between the last FMA and the store.

use cubecl::prelude::*;
use serde::{Deserialize, Serialize};

/// The activation applied after the bias, before the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Epilogue {
    /// `x <= 0 ? 0 : x`, which keeps NaN like Burn's `relu` (`mask_fill(x, x <= 0, 0)`).
    Relu,
}

impl Epilogue {
    /// The pattern name used in stats and logs.
    pub fn pattern(&self) -> &'static str {
        match self {
            Epilogue::Relu => "linear-relu",
        }
    }
}

/// Burn's relu on an f32 accumulator: NaN compares false, so it passes through.
#[cube]
pub fn relu_keep_nan(value: f32) -> f32 {
    select(value <= 0.0f32, 0.0f32, value)
}
