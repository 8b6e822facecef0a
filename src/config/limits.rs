//! The `[rewrite]` table: bounds on one equality-saturation run of the rewrite stage.

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
