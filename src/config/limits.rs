//! The configuration's bounds: the `[rewrite]` table (one equality-saturation run of the
//! rewrite stage) and the device memory of the TF32 weight copies.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Bounds on one equality-saturation run ([`saturate`](crate::rewrite::saturate)); the
/// `[rewrite]` table of the configuration (`nodes`, `iterations`, `time-ms`). Defined here, with
/// the other settings, so that the configuration depends on no stage.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Maximum number of e-nodes.
    pub nodes: usize,
    /// Maximum number of rule iterations.
    pub iterations: usize,
    /// Maximum wall time (whole milliseconds in the file).
    #[serde(rename = "time-ms", with = "millis")]
    pub time: Duration,
}

/// How much device memory, in MiB, the K-major copies of TF32 weights read again may hold in
/// the process (`weight-copies-mib`; decision record 0009): 1024 by default, 0 keeps none.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct WeightCopies(pub u64);

impl WeightCopies {
    /// The budget in bytes.
    pub fn bytes(self) -> usize {
        (self.0 as usize).saturating_mul(1 << 20)
    }
}

impl Default for WeightCopies {
    fn default() -> Self {
        Self(1024)
    }
}

/// A [`Duration`] as whole milliseconds.
mod millis {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(time: &Duration, to: S) -> Result<S::Ok, S::Error> {
        to.serialize_u64(time.as_millis() as u64)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Duration, D::Error> {
        u64::deserialize(from).map(Duration::from_millis)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            nodes: 10_000,
            iterations: 12,
            time: Duration::from_millis(50),
        }
    }
}
