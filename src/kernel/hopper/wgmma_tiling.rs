//! The Hopper kernel's tilings: tile shape, consumer schedule, pipeline depth, stores.

/// Bytes of one row of a stage: a 128-byte swizzle row along k (64 16-bit or 32 f32 values).
pub(crate) const ROW_BYTES: usize = 128;
/// Shared memory a Hopper SM gives one block.
const SHARED_LIMIT: usize = 227 * 1024;

/// One shape of the kernel: tile size, consumer schedule, pipeline depth, tile order and grid.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct WgmmaTiling {
    /// Rows per tile, a multiple of 64: 128 when the two consumer warpgroups share each tile
    /// (64 rows each); 64 or 128 per consumer with `pingpong`.
    pub rows: u32,
    /// Columns per tile (the wgmma instruction is m64n`bn`k16).
    pub bn: u32,
    /// Each consumer warpgroup works on tiles of its own, the two taking turns at the tensor
    /// cores, so that one's epilogue runs under the other's MMAs. Cooperative (both on one
    /// tile) otherwise.
    pub pingpong: bool,
    /// Shared-memory stages in flight.
    pub stages: u32,
    /// Tiles walked down m before moving along n (1: row by row).
    pub group_m: u32,
    /// One CTA per SM looping over tiles (the next tile loads during the epilogue), instead
    /// of one CTA per tile.
    pub persistent: bool,
    /// Store the activation through shared memory with TMA (coalesced, asynchronous) instead
    /// of from registers.
    pub tma_store: bool,
    /// Columns per staged TMA store: `bn`, or half of it, which halves the staging buffers
    /// and so leaves room for a fourth stage of 128 × 256 operands. `bn` without `tma_store`.
    pub store_cols: u32,
}

impl WgmmaTiling {
    /// A short name, e.g. `wgmma 128x256 s4 g16 persistent tma-store/128`, or
    /// `wgmma pingpong 128x192 s4 g16 persistent tma-store`.
    pub fn name(&self) -> String {
        let store = match (self.tma_store, self.store_cols < self.bn) {
            (false, _) => String::new(),
            (true, false) => " tma-store".into(),
            (true, true) => format!(" tma-store/{}", self.store_cols),
        };
        format!(
            "wgmma {}{}x{} s{} g{}{}{store}",
            if self.pingpong { "pingpong " } else { "" },
            self.rows,
            self.bn,
            self.stages,
            self.group_m,
            if self.persistent { " persistent" } else { "" },
        )
    }

    /// Dynamic shared memory for elements of `size` bytes.
    pub(crate) fn shared_bytes(&self, size: usize) -> usize {
        let stage = (self.rows as usize + self.bn as usize) * ROW_BYTES;
        // Two consumers' 64-row staged sub-tiles.
        let staging = if self.tma_store {
            2 * 64 * self.store_cols as usize * size
        } else {
            0
        };
        // 1 KiB to align the first stage, two mbarriers per stage, two per consumer (its gate,
        // its turn), and each consumer's copy of its tile's bias.
        1024 + self.stages as usize * (stage + 16) + 32 + staging + 2 * self.bn as usize * size
    }

    /// Whether this tiling runs elements of `size` bytes: it fits an SM's shared memory, and
    /// its staged stores are whole 128-byte boxes.
    pub fn runs(&self, size: usize) -> bool {
        self.shared_bytes(size) <= SHARED_LIMIT
            && (self.store_cols as usize * size).is_multiple_of(ROW_BYTES)
            && self.bn.is_multiple_of(self.store_cols)
    }

    /// This tiling with each consumer on tiles of its own, `rows` (64 or 128) × `bn`.
    const fn pingpong(self, rows: u32) -> Self {
        WgmmaTiling {
            rows,
            pingpong: true,
            ..self
        }
    }
}

/// The tilings the engine tunes over: wide tiles for large problems, narrow ones so that
/// mid-sized problems still fill the GPU. The wide persistent one stores through shared memory
/// with TMA: once the epilogue stopped waiting on its bias loads, it beat the same tiling with
/// stores from registers by 5-21% at 8192×1024×4096, 8192×4096×1024 and 8192×4096×4096 bf16
/// (one H100 run). It stages half a tile at a time, for a
/// fourth stage: with three, consumers waited on operands for a quarter of their time, and the
/// fourth made every shape of a training step 1-18% faster
/// (decision record 0004).
///
/// The ping-pong 128 × 192 tiling is for epilogue-heavy launches (small k, `pre` written, or
/// relu's backward gate read): each consumer's epilogue runs under the other's MMAs. Its
/// 128 × 192 tile keeps shared-memory traffic per MMA near the cooperative 128 × 256 tile's,
/// which a 64 × 256 ping-pong tile raises by a quarter (decision record 0004).
pub const WGMMA_TILINGS: [WgmmaTiling; 4] = [
    tiling(256, 4, 16, true, true, 128),
    tiling(256, 4, 1, false, false, 256),
    tiling(128, 6, 16, true, false, 128),
    tiling(192, 4, 16, true, true, 192).pingpong(128),
];

/// The tilings the engine also tunes over for f32 (TF32): the first and last of
/// [`WGMMA_TILINGS`] need more shared memory in f32 than an SM has (4-byte staging and bias),
/// so these take their place with a stage fewer or half the staging.
pub const WGMMA_TF32_TILINGS: [WgmmaTiling; 2] = [
    tiling(256, 3, 16, true, true, 128),
    tiling(192, 4, 16, true, true, 64).pingpong(128),
];

/// Tilings that run only when forced by name (`HYPATIA_ENGINE_CANDIDATE`, benchmarks'
/// `--candidates`), kept for comparison: each extra candidate lengthens every autotune.
pub const WGMMA_FORCED_TILINGS: [WgmmaTiling; 4] = [
    tiling(256, 3, 16, true, true, 256),
    tiling(256, 4, 16, true, false, 256),
    tiling(128, 5, 16, true, true, 128),
    tiling(256, 4, 16, true, true, 128).pingpong(64),
];

const fn tiling(
    bn: u32,
    stages: u32,
    group_m: u32,
    persistent: bool,
    tma_store: bool,
    store_cols: u32,
) -> WgmmaTiling {
    WgmmaTiling {
        rows: 128,
        bn,
        pingpong: false,
        stages,
        group_m,
        persistent,
        tma_store,
        store_cols,
    }
}
