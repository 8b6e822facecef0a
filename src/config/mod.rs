//! One configuration for the process: every policy, switch and limit in [`HypatiaConfig`].
//!
//! Read once, on first use, the way Burn reads `burn.toml` (CubeCL's `RuntimeConfig`): a
//! `hypatia.toml` in the working directory or the nearest directory above it, else a
//! `[hypatia]` table in the nearest `burn.toml`, else the defaults; then every `HYPATIA_*`
//! variable set overrides its key ([`HypatiaConfig::override_from_env`], [`ENV`]). A file of
//! its own keeps Hypatia's keys out of Burn's file for users who want that; the table lets a
//! project keep one file. An unknown key or value is an error that names the valid ones.
//!
//! [`set_config`] replaces it for the whole process at any time (tests and benchmarks compare
//! settings in one process); [`config`] is the configuration in force. It is read where Burn
//! calls into Hypatia (the fuser once a block, an optimization once an execution, the backend
//! at each sync and hand-over) and passed down from there: `execute`, `kernel` and `host` take
//! it, or the choices resolved from it, as arguments (decision record 0018).
//!
//! ```
//! use hypatia::config::{HypatiaConfig, RacePolicy};
//! let config = HypatiaConfig::from_toml("race = \"never\"\n[rewrite]\niterations = 20").unwrap();
//! assert_eq!(config.race, RacePolicy::Never);
//! assert_eq!(config.rewrite.iterations, 20);
//! let error = HypatiaConfig::from_toml("race = \"fast\"").unwrap_err();
//! assert!(error.contains("`auto`, `always`, `burn`, `never`"), "{error}");
//! ```

mod choices;
mod fused_pattern;
mod limits;

pub use choices::*;
pub use fused_pattern::FusedPattern;
pub use limits::{Limits, WeightCopies};

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

/// Every setting of Hypatia, as `hypatia.toml` (kebab-case keys) and the `HYPATIA_*`
/// variables ([`ENV`]) spell them. Missing keys take their defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "kebab-case")]
pub struct HypatiaConfig {
    /// How fused steps run (`HYPATIA_EXECUTION`).
    pub execution: ExecutionPolicy,
    /// Whether f32 steps multiply as Burn's matmul does, as TF32 or exact f32 (`HYPATIA_F32`;
    /// decision record 0014).
    pub f32: F32Precision,
    /// Which element types the engine offers the Hopper `wgmma` kernel (`HYPATIA_WGMMA`).
    pub wgmma: WgmmaOffer,
    /// Whether runs of small layers become one MLP-chain launch (`HYPATIA_CHAIN`).
    pub chain: ChainPolicy,
    /// Whether fused steps race Burn's fused matmul (`HYPATIA_RACE`).
    pub race: RacePolicy,
    /// When Hypatia's launches go to CubeCL's device thread (`HYPATIA_FLUSH`).
    pub flush: FlushPolicy,
    /// How `Backend::sync` waits (`HYPATIA_SYNC`).
    pub sync: SyncPolicy,
    /// When recorded ops go to burn-fusion's thread (`HYPATIA_SUBMIT`).
    pub submit: SubmitPolicy,
    /// When a recorded collective reaches the GPU (`HYPATIA_COLLECTIVE`; decision record 0010).
    pub collective: CollectivePolicy,
    /// How many GPU streams CubeCL runs a device's kernels on (`HYPATIA_GPU_STREAMS`;
    /// decision record 0012).
    pub gpu_streams: GpuStreams,
    /// Whether the first run of each fused step is checked against Burn's ops
    /// (`HYPATIA_VERIFY`; see `execute::verify`).
    pub verify: VerifyMode,
    /// Patterns the fuser leaves to Burn, for measuring what each is worth
    /// (`HYPATIA_DISABLE=matmul,matmul-relu-grad`).
    pub disable: Vec<Pattern>,
    /// Where each planned window is dumped (`HYPATIA_DUMP=<dir>`; see
    /// [`plan::dump`](crate::plan::dump)); none by default.
    pub dump: Option<PathBuf>,
    /// A device profile (JSON) replacing the built-in ones (`HYPATIA_PROFILE=<file.json>`; see
    /// [`Profile`](crate::rewrite::Profile)).
    pub profile: Option<PathBuf>,
    /// One tensor-core engine candidate that runs every linear it applies to, instead of the
    /// autotuned choice (`HYPATIA_ENGINE_CANDIDATE`, e.g. `wgmma 128x256 s4 g16 persistent`;
    /// for benchmarks).
    pub engine_candidate: Option<String>,
    /// Device memory (MiB) for K-major copies of f32 weights read again, which the TF32
    /// `wgmma` kernel reads instead of copying the weight at each launch
    /// (`HYPATIA_WEIGHT_COPIES_MIB`; 0: none; decision record 0009).
    pub weight_copies_mib: WeightCopies,
    /// Bounds on each window's equality saturation (`[rewrite]` in the file).
    pub rewrite: Limits,
}

/// Each `HYPATIA_*` variable and the key it overrides. `HYPATIA_DISABLE` takes a
/// comma-separated list; an empty variable counts as unset.
pub const ENV: [(&str, &str); 16] = [
    ("HYPATIA_EXECUTION", "execution"),
    ("HYPATIA_F32", "f32"),
    ("HYPATIA_WGMMA", "wgmma"),
    ("HYPATIA_CHAIN", "chain"),
    ("HYPATIA_RACE", "race"),
    ("HYPATIA_FLUSH", "flush"),
    ("HYPATIA_SYNC", "sync"),
    ("HYPATIA_SUBMIT", "submit"),
    ("HYPATIA_COLLECTIVE", "collective"),
    ("HYPATIA_GPU_STREAMS", "gpu-streams"),
    ("HYPATIA_VERIFY", "verify"),
    ("HYPATIA_DISABLE", "disable"),
    ("HYPATIA_DUMP", "dump"),
    ("HYPATIA_PROFILE", "profile"),
    ("HYPATIA_ENGINE_CANDIDATE", "engine-candidate"),
    ("HYPATIA_WEIGHT_COPIES_MIB", "weight-copies-mib"),
];

impl HypatiaConfig {
    /// A configuration from TOML text (the file's form). Errors name the key and the valid
    /// choices.
    pub fn from_toml(text: &str) -> Result<Self, String> {
        toml::from_str(text).map_err(|e| e.message().to_string())
    }

    /// This configuration with each variable of [`ENV`] that `var` returns overriding its key:
    /// the one place variables are read ([`HypatiaConfig::override_from_env`] passes
    /// `std::env::var`). An unknown value is an error that names the variable and the choices.
    pub fn override_from(self, var: impl Fn(&str) -> Option<String>) -> Result<Self, String> {
        let mut value = serde_json::to_value(self).map_err(|e| e.to_string())?;
        for (name, key) in ENV {
            let Some(text) = var(name).filter(|text| !text.is_empty()) else {
                continue;
            };
            let setting = match key {
                "disable" => (text.split(','))
                    .map(|p| serde_json::Value::from(p.trim()))
                    .collect(),
                // A number key reads the variable as a number; text that is none stays text,
                // and the check below names the variable.
                _ if value[key].is_number() => (text.trim().parse::<u64>())
                    .map_or_else(|_| serde_json::Value::from(text.clone()), Into::into),
                _ => serde_json::Value::String(text.clone()),
            };
            value[key] = setting;
            // Checked one variable at a time, so that an error names its variable.
            serde_json::from_value::<Self>(value.clone())
                .map_err(|e| format!("{name}={text}: {e}"))?;
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }

    /// [`override_from`](Self::override_from) the process environment.
    pub fn override_from_env(self) -> Result<Self, String> {
        self.override_from(|name| std::env::var(name).ok())
    }

    /// The file's configuration (see the [module](self)), then the environment's.
    pub fn load() -> Result<Self, String> {
        file::load()?.override_from_env()
    }

    /// How an f32 matmul of `m × k → n` (per batch, as Burn's autotune key reads it)
    /// multiplies under [`f32`](Self::f32) (decision record 0014).
    pub fn f32_math(&self, m: usize, k: usize, n: usize) -> F32Math {
        match self.f32 {
            F32Precision::Exact => F32Math::Exact,
            F32Precision::Tf32 => F32Math::Tf32,
            F32Precision::Burn if burn_runs_tf32(m, k, n) => F32Math::Burn,
            F32Precision::Burn => F32Math::Exact,
        }
    }

    /// Whether the fuser leaves `pattern` to Burn.
    pub fn disabled(&self, pattern: Pattern) -> bool {
        self.disable.contains(&pattern)
    }
}

/// Whether Burn 0.21's f32 matmul autotune tries tensor-core (TF32) kernels only for an
/// `m × k → n` problem: a general one (every side above 1) with a side of 512 or more. There
/// its "accelerated" group ranks first and wins with the first kernel that runs; for smaller
/// general problems ("small" scale) it times f32-FMA kernels against TF32 ones and keeps the
/// faster, and matrix-vector and outer products rank f32-FMA kernels first
/// (`burn-cubecl-fusion`'s `optim/matmul/tune.rs`, cubek-matmul's `MatmulGlobalScale`).
/// Measured on an H200: decision record 0014.
pub fn burn_runs_tf32(m: usize, k: usize, n: usize) -> bool {
    m > 1 && k > 1 && n > 1 && (m >= 512 || k >= 512 || n >= 512)
}

/// The file half of loading, through CubeCL's `RuntimeConfig` (which Burn's `burn.toml` uses).
mod file {
    use super::HypatiaConfig;
    use cubecl::config::RuntimeConfig;
    use std::sync::Arc;

    /// CubeCL's trait wants a slot; Hypatia keeps the configuration in force itself (it may be
    /// replaced at any time), so this one is never filled.
    static SLOT: spin::Mutex<Option<Arc<HypatiaConfig>>> = spin::Mutex::new(None);

    impl RuntimeConfig for HypatiaConfig {
        fn storage() -> &'static spin::Mutex<Option<Arc<Self>>> {
            &SLOT
        }

        fn file_names() -> &'static [&'static str] {
            &["hypatia.toml", "Hypatia.toml"]
        }

        fn section_file_names() -> &'static [(&'static str, &'static str)] {
            &[("burn.toml", "hypatia"), ("Burn.toml", "hypatia")]
        }
    }

    /// The nearest file's configuration, or the defaults. CubeCL's loader panics on a malformed
    /// file; that panic becomes the error, with its message (key and choices).
    pub(super) fn load() -> Result<HypatiaConfig, String> {
        std::panic::catch_unwind(HypatiaConfig::from_current_dir).map_err(|panic| {
            let message = (panic.downcast_ref::<String>().cloned())
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            format!(
                "hypatia.toml (or burn.toml's [hypatia]): {}",
                message.unwrap_or_default()
            )
        })
    }
}

static CONFIG: RwLock<Option<Arc<HypatiaConfig>>> = RwLock::new(None);

/// The configuration in force: the last [`set_config`], else [`HypatiaConfig::load`] on first
/// use.
///
/// # Panics
/// On first use, if the file or a variable holds an unknown key or value: the message names
/// it and the valid choices, as Burn's does for `burn.toml`.
pub fn config() -> Arc<HypatiaConfig> {
    if let Some(config) = CONFIG.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return config.clone();
    }
    let mut slot = CONFIG.write().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(|| {
        Arc::new(HypatiaConfig::load().unwrap_or_else(|error| panic!("hypatia: {error}")))
    })
    .clone()
}

/// Replaces the configuration for the whole process; steps already planned keep their plans
/// (set [`dump`](HypatiaConfig::dump) and [`disable`](HypatiaConfig::disable) before the model
/// first runs).
pub fn set_config(config: HypatiaConfig) {
    *CONFIG.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(config));
}

/// Changes the configuration in force with `change`, and returns the one it replaced.
///
/// ```
/// use hypatia::config::{ExecutionPolicy, config, set_config, update_config};
/// let before = update_config(|c| c.execution = ExecutionPolicy::Split);
/// assert_eq!(config().execution, ExecutionPolicy::Split);
/// set_config(before);
/// ```
pub fn update_config(change: impl FnOnce(&mut HypatiaConfig)) -> HypatiaConfig {
    let before = (*config()).clone();
    let mut after = before.clone();
    change(&mut after);
    set_config(after);
    before
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = (pairs.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| (pairs.iter().find(|(k, _)| k == name)).map(|(_, v)| v.clone())
    }

    #[test]
    fn the_defaults_are_every_policys_auto() {
        let config = HypatiaConfig::default();
        assert_eq!(config.execution, ExecutionPolicy::Auto);
        assert_eq!(config.f32, F32Precision::Burn);
        assert_eq!(config.race, RacePolicy::Auto);
        assert_eq!(config.verify, VerifyMode::Off);
        assert!(config.disable.is_empty() && config.dump.is_none());
        assert_eq!(config.weight_copies_mib, WeightCopies(1024));
        assert_eq!(config.rewrite.iterations, Limits::default().iterations);
        assert_eq!(HypatiaConfig::from_toml("").unwrap(), config);
    }

    #[test]
    fn a_file_sets_every_key() {
        let text = r#"
            execution = "tensor-core"
            f32 = "exact"
            wgmma = "off"
            chain = "never"
            race = "burn"
            flush = "blocks"
            sync = "park"
            submit = "batched"
            verify = "strict"
            disable = ["matmul", "bias-grad"]
            dump = "dumps"
            profile = "h100.json"
            engine-candidate = "tiled"
            weight-copies-mib = 0
            [rewrite]
            nodes = 500
            iterations = 3
            time-ms = 7
        "#;
        let config = HypatiaConfig::from_toml(text).unwrap();
        assert_eq!(config.execution, ExecutionPolicy::TensorCore);
        assert_eq!(config.f32, F32Precision::Exact);
        assert_eq!(config.wgmma, WgmmaOffer::Off);
        assert_eq!(config.chain, ChainPolicy::Never);
        assert_eq!(config.race, RacePolicy::Burn);
        assert_eq!(config.flush, FlushPolicy::Blocks);
        assert_eq!(config.sync, SyncPolicy::Park);
        assert_eq!(config.submit, SubmitPolicy::Batched);
        assert_eq!(config.verify, VerifyMode::Strict);
        assert_eq!(config.disable, [Pattern::Matmul, Pattern::BiasGrad]);
        assert_eq!(config.dump, Some("dumps".into()));
        assert_eq!(config.profile, Some("h100.json".into()));
        assert_eq!(config.engine_candidate.as_deref(), Some("tiled"));
        assert_eq!(config.weight_copies_mib, WeightCopies(0));
        assert_eq!(config.rewrite.time, Duration::from_millis(7));
        // Written back, it reads the same.
        let written = toml::to_string(&config).unwrap();
        assert_eq!(HypatiaConfig::from_toml(&written).unwrap(), config);
    }

    #[test]
    fn unknown_keys_and_values_name_the_choices() {
        let error = HypatiaConfig::from_toml("flush = \"typo\"").unwrap_err();
        assert!(
            error.contains("`auto`, `never`, `blocks`, `paced`"),
            "{error}"
        );
        let error = HypatiaConfig::from_toml("rase = \"never\"").unwrap_err();
        assert!(
            error.contains("rase") && error.contains("`race`"),
            "{error}"
        );
        let error = HypatiaConfig::from_toml("disable = [\"linear-typo\"]").unwrap_err();
        assert!(error.contains("`linear-relu`"), "{error}");
    }

    #[test]
    fn variables_override_the_file_and_name_themselves_when_wrong() {
        let file = HypatiaConfig::from_toml("race = \"never\"\nchain = \"never\"").unwrap();
        let config = (file.clone())
            .override_from(vars(&[
                ("HYPATIA_RACE", "burn"),
                ("HYPATIA_DISABLE", "matmul, mlp-chain"),
                ("HYPATIA_DUMP", "out"),
                ("HYPATIA_CHAIN", ""),
                ("HYPATIA_WEIGHT_COPIES_MIB", "64"),
            ]))
            .unwrap();
        assert_eq!(config.weight_copies_mib.bytes(), 64 << 20);
        assert_eq!(config.race, RacePolicy::Burn);
        assert_eq!(
            config.chain,
            ChainPolicy::Never,
            "an empty variable is unset"
        );
        assert_eq!(config.disable, [Pattern::Matmul, Pattern::MlpChain]);
        assert_eq!(config.dump, Some("out".into()));
        let error = file
            .override_from(vars(&[("HYPATIA_FLUSH", "typo")]))
            .unwrap_err();
        assert!(error.starts_with("HYPATIA_FLUSH=typo"), "{error}");
        assert!(error.contains("`blocks`"), "{error}");
        let error = HypatiaConfig::default()
            .override_from(vars(&[("HYPATIA_DISABLE", "matmul,nope")]))
            .unwrap_err();
        assert!(error.starts_with("HYPATIA_DISABLE=matmul,nope"), "{error}");
        let error = HypatiaConfig::default()
            .override_from(vars(&[("HYPATIA_WEIGHT_COPIES_MIB", "lots")]))
            .unwrap_err();
        assert!(
            error.starts_with("HYPATIA_WEIGHT_COPIES_MIB=lots"),
            "{error}"
        );
    }

    #[test]
    fn files_are_found_as_burn_finds_burn_toml() {
        use cubecl::config::RuntimeConfig;
        let dir = std::env::temp_dir().join(format!("hypatia-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // Its own file, or a `[hypatia]` table of burn.toml beside Burn's own keys.
        std::fs::write(dir.join("hypatia.toml"), "chain = \"always\"").unwrap();
        let burn = "[fusion]\n[hypatia]\nsubmit = \"eager\"\n[hypatia.rewrite]\nnodes = 9\n";
        std::fs::write(dir.join("burn.toml"), burn).unwrap();
        let own = HypatiaConfig::from_file_path(dir.join("hypatia.toml")).unwrap();
        assert_eq!(own.chain, ChainPolicy::Always);
        let table = HypatiaConfig::from_section_file_path(dir.join("burn.toml"), "hypatia");
        let table = table.unwrap();
        assert_eq!(
            (table.submit, table.rewrite.nodes),
            (SubmitPolicy::Eager, 9)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_troubleshooting_chapter_lists_every_key_and_variable() {
        let chapter = include_str!("../../book/src/troubleshooting.md");
        for (name, key) in ENV {
            let row = format!("| `{key}` | `{name}`");
            assert!(chapter.contains(&row), "no row {row}");
        }
        for key in ["nodes", "iterations", "time-ms"] {
            assert!(chapter.contains(&format!("{key} = ")), "[rewrite] {key}");
        }
    }

    #[test]
    fn every_variable_names_a_key_of_the_file() {
        let keys = serde_json::to_value(HypatiaConfig::default()).unwrap();
        for (name, key) in ENV {
            assert!(keys.get(key).is_some(), "{name} → {key}");
        }
        // And every key but the file-only `rewrite` table has its variable.
        let named: Vec<_> = ENV.iter().map(|(_, key)| *key).collect();
        for key in keys.as_object().unwrap().keys() {
            assert!(key == "rewrite" || named.contains(&key.as_str()), "{key}");
        }
    }
}
