// Hypatia's Hopper kernel: out = act(x · w + bias) (and pre = x · w + bias) in one launch.
//
// Persistent: one CTA per SM walks BM × BN output tiles (grouped GROUP_M tiles along m, so a
// wave's operands stay in L2) with three warpgroups: warpgroup 0 is the producer (one thread
// issues TMA loads into a STAGES-deep ring of shared-memory stages that runs on across tiles,
// so the next tile loads while this one's epilogue runs), warpgroups 1 and 2 are consumers,
// each running `wgmma.mma_async` m64nBNk16 on 64 of the BM rows with f32 accumulators in
// registers, then the epilogue from those registers. Stages are handed over with mbarriers:
// `full[s]` completes when TMA has landed stage s, `empty[s]` when both consumers are done
// reading it.
//
// With PINGPONG, each consumer instead owns whole tiles of MH × 64 rows (64 × MH-row wgmmas per
// k-step), taking every other of the CTA's tiles: the producer fills the ring with both
// consumers' tiles in turn, and a `turn` mbarrier lets one consumer start its MMAs only once
// the other has issued its last ones, so that each consumer's epilogue runs under the other's
// MMAs. For a training step's K = 1024 launches, whose epilogues write `pre` or read the gate,
// the 128 × 192 ping-pong tile took 8-11% off the cooperative 128 × 256 tile's time (H200).
// Its mainloop is slower where the epilogue is short, and a 64 × 256 ping-pong tile's is
// slower still: each stage is then read by one warpgroup instead of two, so shared memory
// moves a quarter more bytes per MMA, and it is shared memory's bandwidth that bounds the
// mainloop (a version that loaded half of w per stage ran as fast as the cooperative tile).
//
// Shared-memory layouts are the canonical 128-byte-swizzled wgmma layouts that TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B: x either K-major ([M, K] storage, one [BM][64] box) or M-major
// (a transposed view of [K, M] storage, as in a weight gradient xᵀ·dy: two boxes of
// [64 k][64 m], transposed operand A); w either N-major (Burn's [K, N] weight, BN/64 boxes of
// [64 k][64 n], transposed operand B) or K-major ([N, K] storage, one [BN][64] box).
//
// With TMA_STORE, each consumer stages its activated 64 × BN tile in shared memory (swizzled
// like TMA's 128-byte mode), SUB columns at a time, and one thread stores each sub-tile with
// TMA: coalesced, and asynchronous, so the next tile's MMAs start while it drains. A SUB of
// half the tile halves the staging buffers, which buys a fourth stage of operands (with three,
// the consumers waited on operands for a quarter of their time). Without TMA_STORE, threads
// store from registers. The pre-activation goes the same way, staged and stored before the
// activation; and a backward's gate arrives by TMA into the same staging buffer (its first
// sub-tile while the tile's MMAs run), each thread reading its gate values where it then writes
// its output. Scattered 4-byte stores of pre and 2-byte gate loads from registers had cost a
// training step's K = 1024 layers ~80% of their time (H100, 8192×1024×4096 bf16: 222 µs with
// pre against 122 µs without).
//
// f32 runs as TF32 (`wgmma ... .tf32`, what Burn's f32 matmul does on tensor cores): 4-byte
// elements, so a 128-byte swizzle row holds 32 of k (BK) and a staged output box 32 columns
// (CB); each wgmma still reads 32 bytes of k per row (k8 instead of k16). PTX's tf32 wgmma
// takes both operands K-major only: the host hands it K-major copies (decision record 0001).
//
// Defined by the host before this text: ELEM, ELEM2, PACK2, TO_F32, ROUND(v) (v rounded to
// ELEM, back in f32), ESIZE (bytes per element), BN, STAGES, GROUP_M, A_M_MAJOR, B_K_MAJOR,
// TMA_STORE, SUB (columns per staged store, a multiple of CB dividing BN; BN without
// TMA_STORE), wgmma_step(d, desc_a, desc_b) and the PTX
// helpers of wgmma_ptx.cuh; for ping-pong tilings also PINGPONG 1 and MH (64-row halves of a
// consumer's tile). `WgmmaSource` writes all of it (`cargo run --example cuda_source`).

#ifndef PINGPONG
#define PINGPONG 0
#endif
#if PINGPONG
// Each consumer owns whole tiles of MH × 64 rows, the two taking turns: one runs its MMAs
// while the other runs its epilogue.
#define BM (64 * MH)
#else
// The two consumers share each tile, 64 rows each.
#define MH 1
#define BM 128
#endif
// k per stage: one 128-byte swizzle row.
#define BK (128 / ESIZE)
// Output columns per 128-byte staged box.
#define CB (128 / ESIZE)
// wgmma instructions per stage: each reads 32 bytes of k per row.
#define K_STEPS 4
// Bytes of 64 rows of a stage (one consumer's rows of A, one [64 k][64 n] box of M/N-major).
#define ROWS64_BYTES (64 * 128)
#define THREADS 384
#define A_STAGE_BYTES (BM * 128)
#define B_STAGE_BYTES (BN * 128)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)
#define C_BYTES (64 * SUB * ESIZE)
#define SUBS (BN / SUB)
#if !TMA_STORE && SUB != BN
#error "stores from registers take the whole tile"
#endif
#if ESIZE == 4 && (A_M_MAJOR || !B_K_MAJOR)
#error "tf32 wgmma reads K-major operands only"
#endif

struct Params {
    u32 m;
    u32 n;
    u32 k;
    u32 flags; // bit 0: bias, bit 1: write pre, bit 3: gate (an activation's backward, GATE), bit 4: row sums;
               // ACT is compiled in
    float alpha; // run-time parameters: LeakyReLU's slope, clamp's min, dropout's scale
    float beta;  // clamp's max
};

// The activation `ACT` (one of hypatia.cuh's ACT_* codes) is compiled in (`WgmmaSource`), so
// `activate`'s switch folds away.

// A backward epilogue's second gate-shaped operand `mask`, read from global memory where the
// thread stores (contiguous, as the gate): dropout's mask (DROPOUT: the value is scaled by
// alpha and multiplied by it before the gate, as Burn's dropout backward does) or SiLU's saved
// sigmoid (GATE_SILU: gate_grad's `s`) or tanh GELU's saved tanh + 1 (GATE_GELU_TANH: the same).
#define SAVES (GATE == GATE_SILU || GATE == GATE_GELU_TANH)
#define MASKED (DROPOUT || SAVES)
// A third, `aux`, read the same way: tanh GELU's saved tanh input (gate_grad's `i`), or
// SwiGLU's up projection (PRODUCT: the activated value is multiplied by it, before the gate,
// as Burn's `mul` and its backward do).
#define AUXED (GATE == GATE_GELU_TANH || PRODUCT)
// The gate moves by TMA through the output's staging buffer (TMA_STORE), except LeakyReLU's,
// a bool mask (GATE_ELEM, a bool's storage integer): read where the thread stores, as `mask`.
#define STAGED_GATE (TMA_STORE && GATE != GATE_LEAKY_RELU)

// An operand's element as f32: ELEM through TO_F32, a bool's integer (nonzero is true) as is.
template <typename T>
__device__ __forceinline__ float as_f32(T v) {
    return (float)v;
}
template <>
__device__ __forceinline__ float as_f32<ELEM>(ELEM v) {
    return TO_F32(v);
}

// Makes a consumer's staged 64 × SUB tile (at `c_tile`) visible to the TMA unit, then one
// thread stores it to `map` at rows m0.., columns n0.. (clipped to the tensor's bounds by TMA)
// and commits the store. Every thread of consumer `cw` calls it.
__device__ __forceinline__ void store_staged(const CUtensorMap* map, u32 c_tile, u32 m0, u32 n0,
                                             u32 cw, u32 t128) {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("bar.sync %0, 128;" :: "r"(1 + cw) : "memory");
    if (t128 == 0) {
#pragma unroll
        for (u32 box = 0; box < SUB / CB; ++box) {
            tma_store_2d(map, c_tile + box * ROWS64_BYTES, (int)(n0 + CB * box), (int)m0);
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
}

// One thread loads the gate's 64 × SUB sub-tile at rows m0.., columns n0.. into a consumer's
// staging buffer (at `c_tile`), completing on mbarrier `bar`.
__device__ __forceinline__ void load_gate(const CUtensorMap* map, u32 c_tile, u32 bar, u32 m0,
                                          u32 n0) {
    mbar_expect_tx(bar, C_BYTES);
#pragma unroll
    for (u32 box = 0; box < SUB / CB; ++box) {
        tma_load_2d(c_tile + box * ROWS64_BYTES, map, bar, (int)(n0 + CB * box), (int)m0);
    }
}

// Tile `t` of a grouped raster: GROUP_M tiles down m, then the next column of n.
__device__ __forceinline__ void tile_origin(u32 t, u32 tiles_m, u32 tiles_n, u32& m0, u32& n0) {
    const u32 per_group = GROUP_M * tiles_n;
    const u32 first_m = (t / per_group) * GROUP_M;
    const u32 rows = min(tiles_m - first_m, (u32)GROUP_M);
    const u32 in_group = t % per_group;
    m0 = (first_m + in_group % rows) * BM;
    n0 = (in_group / rows) * BN;
}

// Shared-memory address of (row r, column c) of a consumer's staged 64 × SUB tile: box c / CB
// of [64 rows][128 bytes], 16-byte chunks XOR row % 8 (TMA's 128-byte swizzle).
__device__ __forceinline__ u32 staged_addr(u32 c_tile, u32 r, u32 col_local) {
    const u32 byte = (col_local % CB) * ESIZE;
    return c_tile + (col_local / CB) * ROWS64_BYTES + r * 128 + (((byte / 16) ^ (r % 8)) * 16)
        + byte % 16;
}

// Stages the pre-activation (accumulators + bias, rounded) of sub-tile `sub` of a consumer's
// tile for a TMA store.
__device__ __forceinline__ void stage_pre(const float (&d)[BN / 2], const ELEM* bias_s, u32 warp,
                                          u32 lane, u32 c_tile, u32 sub) {
    const u32 row_local0 = warp * 16 + lane / 4;
#pragma unroll
    for (int j = sub * (SUB / 8); j < (sub + 1) * (SUB / 8); ++j) {
        const u32 col_local = j * 8 + (lane % 4) * 2;
        const float b0 = TO_F32(bias_s[col_local]);
        const float b1 = TO_F32(bias_s[col_local + 1]);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            st_pair(staged_addr(c_tile, row_local0 + h * 8, col_local - sub * SUB),
                    PACK2(ROUND(d[j * 4 + h * 2]) + b0, ROUND(d[j * 4 + h * 2 + 1]) + b1));
        }
    }
}

// Loads, for BATCH column groups from j0, the four values of a contiguous [m, n] operand at the
// positions this thread stores (rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1)), as f32; lanes
// outside the output read element 0, whose values are not stored.
template <int BATCH, typename T>
__device__ __forceinline__ void load_where_stored(const T* __restrict__ src,
                                                  float (&dst)[BATCH][4], u32 row0, u32 n0,
                                                  int j0, u32 lane, const Params& p) {
#pragma unroll
    for (int jj = 0; jj < BATCH; ++jj) {
        const u32 col = n0 + (j0 + jj) * 8 + (lane % 4) * 2;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const u32 row = row0 + h * 8;
            const unsigned long long idx =
                row < p.m && col < p.n ? (unsigned long long)row * p.n + col : 0;
            dst[jj][h * 2] = as_f32(src[idx]);
            dst[jj][h * 2 + 1] = as_f32(src[idx + 1]);
        }
    }
}

// The epilogue of sub-tile `sub` (columns sub·SUB..) of one consumer's 64 × BN tile (rows from
// m0), from its accumulators: thread (warp w, lane l) holds rows 16w + l/4 (+8) and, per 8
// columns j, columns 8j + 2(l%4) (+1).
// GATED (an activation's backward) is a template argument so that the gate loads sit unconditionally in
// one block, where they can be issued ahead of their use; under a run-time branch per column
// group each load was waited on alone. SUM_ROWS is one too: its code, even when skipped at run
// time, had cost the other epilogues ~5% of an 8192×1024×4096 launch (H100).
// With SUM_ROWS (a bias gradient), each warp also adds up its 16 rows of the stored output per
// column and writes them as row (m0 + 16 warp) / 16 of `row_sums`, an f32 [tiles_m * 8, n]
// buffer of partial sums that a second, small kernel adds up. Per batch of 8 column groups, a
// thread first adds its two rows; then the 8 lanes that share columns (l, l ^ 4, .., l ^ 28)
// reduce-scatter: at each of three steps a lane keeps half of its column groups and adds the
// partner's half of them, so that lane l ends with the sum of column group l / 4 alone: 14
// shuffles per batch, where an all-reduce per column group took 48 (the gated 8192×1024×4096
// launch gained 14 µs of the 31 its row sums had cost, H100).
template <bool GATED, bool SUM_ROWS>
__device__ __forceinline__ void epilogue(const float (&d)[BN / 2], const ELEM* bias_s, u32 m0,
                                         u32 n0, u32 warp, u32 lane, ELEM* out, ELEM* pre,
                                         const GATE_ELEM* __restrict__ gate,
                                         const ELEM* __restrict__ mask,
                                         const ELEM* __restrict__ aux, float* row_sums,
                                         const Params& p, bool write_pre, u32 c_tile, u32 sub) {
    const u32 row_local0 = warp * 16 + lane / 4;
    const u32 row0 = m0 + row_local0;
    // Column groups per batch of gate loads (and of row sums): all of a batch's loads are
    // issued before the first is used (32 registers), so a tile waits on BN / 64 load
    // latencies, not on BN / 8.
    constexpr int BATCH = 8;
#pragma unroll
    for (int j0 = sub * (SUB / 8); j0 < (sub + 1) * (SUB / 8); j0 += BATCH) {
        float g[BATCH][4];
        float mk[BATCH][4];
        float ax[BATCH][4];
        float sums[BATCH][2];
        if (MASKED) {
            load_where_stored(mask, mk, row0, n0, j0, lane, p);
        }
        if (AUXED) {
            load_where_stored(aux, ax, row0, n0, j0, lane, p);
        }
        if (GATED && !STAGED_GATE) {
            load_where_stored(gate, g, row0, n0, j0, lane, p);
        }
#pragma unroll
        for (int jj = 0; jj < BATCH; ++jj) {
            const int j = j0 + jj;
            const u32 col_local = j * 8 + (lane % 4) * 2;
            const u32 col = n0 + col_local;
            const float b0 = TO_F32(bias_s[col_local]);
            const float b1 = TO_F32(bias_s[col_local + 1]);
            sums[jj][0] = 0.0f;
            sums[jj][1] = 0.0f;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 row = row0 + h * 8;
                const bool inside = row < p.m && col < p.n;
                // The product rounded to ELEM first, as Burn's matmul stores it (decision
                // record 0027).
                float v0 = ROUND(d[j * 4 + h * 2]) + b0;
                float v1 = ROUND(d[j * 4 + h * 2 + 1]) + b1;
#if TMA_STORE
                // pre was staged and stored before this pass (stage_pre); the gate, if any,
                // sits where this thread's output goes.
                const u32 addr = staged_addr(c_tile, row_local0 + h * 8, col_local - sub * SUB);
                if (GATED && STAGED_GATE) {
                    const ELEM2 gate2 = ld_pair(addr);
                    g[jj][h * 2] = TO_F32(gate2.x);
                    g[jj][h * 2 + 1] = TO_F32(gate2.y);
                }
#else
                const unsigned long long idx = (unsigned long long)row * p.n + col;
                if (write_pre && inside) {
                    *reinterpret_cast<ELEM2*>(pre + idx) = PACK2(v0, v1);
                }
#endif
                v0 = activate(v0, ACT, p.alpha, p.beta);
                v1 = activate(v1, ACT, p.alpha, p.beta);
#if DROPOUT
                // Burn's dropout backward: `mul_scalar(grad, 1 / (1 - p))`, then `mul(.., mask)`.
                v0 = ROUND(ROUND(v0 * p.alpha) * mk[jj][h * 2]);
                v1 = ROUND(ROUND(v1 * p.alpha) * mk[jj][h * 2 + 1]);
#endif
#if PRODUCT
                // SwiGLU's `mul(silu(a), b)` (the activation stored first, as Burn's `silu` is),
                // or its backward's `mul(grad, b)`, the product's gradient for `silu(a)`.
                v0 = ROUND(ROUND(v0) * ax[jj][h * 2]);
                v1 = ROUND(ROUND(v1) * ax[jj][h * 2 + 1]);
#endif
                if (GATED) {
                    // An activation's backward at the forward's pre-activation (`GATE`), SiLU's
                    // with its saved sigmoid, tanh GELU's with its saved tanh + 1 and tanh input.
                    const bool saves = SAVES;
                    const float s0 = saves ? mk[jj][h * 2] : 0.0f;
                    const float s1 = saves ? mk[jj][h * 2 + 1] : 0.0f;
                    const float i0 = AUXED ? ax[jj][h * 2] : 0.0f;
                    const float i1 = AUXED ? ax[jj][h * 2 + 1] : 0.0f;
                    v0 = gate_grad(v0, g[jj][h * 2], s0, i0, p.alpha, GATE);
                    v1 = gate_grad(v1, g[jj][h * 2 + 1], s1, i1, p.alpha, GATE);
                }
                ELEM2 packed = PACK2(v0, v1);
                if (SUM_ROWS && inside) {
                    // The stored (rounded) values, as Burn's sum over the output adds them.
                    sums[jj][0] += TO_F32(packed.x);
                    sums[jj][1] += TO_F32(packed.y);
                }
#if TMA_STORE
                (void)pre;
                (void)write_pre;
                st_pair(addr, packed);
#else
                (void)c_tile;
                if (inside) {
                    *reinterpret_cast<ELEM2*>(out + idx) = packed;
                }
#endif
            }
        }
        if (SUM_ROWS) {
            // Reduce-scatter over lane bits 4, 3 and 2 (the row groups): keep the upper half of
            // the column groups where the bit is set, the lower half where it is clear.
#pragma unroll
            for (int half = BATCH / 2; half >= 1; half /= 2) {
                const u32 offset = 4u * (u32)half;
                const bool upper = (lane & offset) != 0;
#pragma unroll
                for (int i = 0; i < half; ++i) {
#pragma unroll
                    for (int c = 0; c < 2; ++c) {
                        const float keep = upper ? sums[half + i][c] : sums[i][c];
                        const float send = upper ? sums[i][c] : sums[half + i][c];
                        sums[i][c] = keep + __shfl_xor_sync(0xffffffffu, send, offset);
                    }
                }
            }
            const u32 col = n0 + (j0 + lane / 4) * 8 + (lane % 4) * 2;
            if (col < p.n) {
                const unsigned long long block = m0 / 16 + warp;
                *reinterpret_cast<float2*>(row_sums + block * p.n + col) =
                    make_float2(sums[0][0], sums[0][1]);
            }
        }
    }
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) hypatia_wgmma_linear(
    const __grid_constant__ CUtensorMap tm_a,
    const __grid_constant__ CUtensorMap tm_b,
    const __grid_constant__ CUtensorMap tm_c,
#if TMA_STORE
    const __grid_constant__ CUtensorMap tm_pre,  // out's map when there is no pre
    const __grid_constant__ CUtensorMap tm_gate, // out's map when there is no gate
#endif
    const ELEM* __restrict__ a_ptr,
    const ELEM* __restrict__ b_ptr,
    ELEM* out,
#if TMA_STORE
    // CubeCL passes every tensor map's buffer after the maps: tm_pre's and tm_gate's, unused.
    const ELEM* __restrict__ pre_map_ptr,
    const ELEM* __restrict__ gate_map_ptr,
#endif
    const ELEM* __restrict__ bias,
    ELEM* pre,
    const GATE_ELEM* __restrict__ gate,
    const ELEM* __restrict__ mask, // out when the epilogue reads none (MASKED)
    const ELEM* __restrict__ aux,  // out when the epilogue reads none (AUXED)
    float* row_sums,
    const __grid_constant__ Params p) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // The swizzle pattern is a function of address bits 4..9: stages start on 1024 bytes.
    const u32 raw = smem_addr(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;
    const u32 c_base = base + STAGES * STAGE_BYTES;
    const u32 full = c_base + (TMA_STORE ? 2 * C_BYTES : 0);
    const u32 empty = full + STAGES * 8;
    // One per consumer: its tile's gate has landed in its staging buffer (TMA_STORE only).
    const u32 gate_full = empty + STAGES * 8;
    // One per consumer (PINGPONG only): its turn to run MMAs, given by the other consumer once
    // that one's MMAs are issued.
    const u32 turn = gate_full + 16;

    const u32 tid = threadIdx.x;
    const u32 wg = tid / 128;
    const u32 tiles_m = (p.m + BM - 1) / BM;
    const u32 tiles_n = (p.n + BN - 1) / BN;
    const u32 tiles = tiles_m * tiles_n;
    const u32 k_tiles = (p.k + BK - 1) / BK;

    if (tid == 0) {
        for (u32 s = 0; s < STAGES; ++s) {
            mbar_init(full + s * 8, 1);
            // Released by each consumer that reads the stage.
            mbar_init(empty + s * 8, PINGPONG ? 1 : 2);
        }
        mbar_init(gate_full, 1);
        mbar_init(gate_full + 8, 1);
        mbar_init(turn, 1);
        mbar_init(turn + 8, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            // `it` counts k-steps over all of this CTA's tiles: the ring's position and phase.
            u32 it = 0;
            for (u32 t = blockIdx.x; t < tiles; t += gridDim.x) {
                u32 m0, n0;
                tile_origin(t, tiles_m, tiles_n, m0, n0);
                for (u32 kt = 0; kt < k_tiles; ++kt, ++it) {
                    const u32 s = it % STAGES;
                    if (it >= STAGES) {
                        mbar_wait(empty + s * 8, ((it / STAGES) + 1) & 1);
                    }
                    const u32 sa = base + s * STAGE_BYTES;
                    const u32 sb = sa + A_STAGE_BYTES;
                    mbar_expect_tx(full + s * 8, STAGE_BYTES);
#if A_M_MAJOR
#pragma unroll
                    for (u32 j = 0; j < BM / 64; ++j) {
                        tma_load_2d(sa + j * ROWS64_BYTES, &tm_a, full + s * 8,
                                    (int)(m0 + 64 * j), (int)(kt * BK));
                    }
#else
                    tma_load_2d(sa, &tm_a, full + s * 8, (int)(kt * BK), (int)m0);
#endif
#if B_K_MAJOR
                    tma_load_2d(sb, &tm_b, full + s * 8, (int)(kt * BK), (int)n0);
#else
#pragma unroll
                    for (u32 j = 0; j < BN / 64; ++j) {
                        tma_load_2d(sb + j * ROWS64_BYTES, &tm_b, full + s * 8,
                                    (int)(n0 + 64 * j), (int)(kt * BK));
                    }
#endif
                }
            }
        }
    } else {
        // One branch per warpgroup role, so that ptxas applies setmaxnreg.
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
        const u32 cw = wg - 1;
        // This consumer's copy of its tile's bias (BN values), after the barriers.
        ELEM* bias_s = reinterpret_cast<ELEM*>(smem_raw + (turn + 16 - raw)) + cw * BN;
        const u32 t128 = tid % 128;
        const u32 warp = t128 / 32;
        const u32 lane = t128 % 32;
        const bool has_bias = (p.flags & 1u) != 0;
        const bool write_pre = (p.flags & 2u) != 0;
        const bool gated = (p.flags & 8u) != 0;
        const bool sum_rows = (p.flags & 16u) != 0;
        float d[MH][BN / 2];
#if PINGPONG
        // Consumer cw takes every other of this CTA's tiles; the producer fills the ring with
        // both consumers' tiles in turn, so `it` skips the other consumer's k-steps, and this
        // consumer's MMAs start as the other's end.
        const u32 first_tile = blockIdx.x + cw * gridDim.x;
        const u32 tile_step = 2 * gridDim.x;
        u32 it = cw * k_tiles;
        // Mainloops run strictly in turn, which also keeps a consumer from waiting on a stage
        // two phases ahead of the ring (an mbarrier's parity would alias).
        u32 turns = 0;
#else
        const u32 first_tile = blockIdx.x;
        const u32 tile_step = gridDim.x;
        u32 it = 0;
#endif
#if TMA_STORE
        u32 gate_phase = 0; // parity of this consumer's next gate arrival
        const u32 c_tile = c_base + cw * C_BYTES;
#endif
        for (u32 t = first_tile; t < tiles; t += tile_step) {
            u32 m0, n0;
            tile_origin(t, tiles_m, tiles_n, m0, n0);
            // This consumer's rows: its half of a shared tile, or the whole of its own.
            const u32 rows0 = PINGPONG ? m0 : m0 + cw * 64;
#pragma unroll
            for (int h = 0; h < MH; ++h) {
#pragma unroll
                for (int i = 0; i < BN / 2; ++i) {
                    d[h][i] = 0.0f;
                }
            }
            // Two bias values per thread, loaded now so that their latency hides under the
            // MMAs: loaded in the epilogue, each column group waited on its own load.
            float bias0 = 0.0f;
            float bias1 = 0.0f;
            if (has_bias && 2 * t128 < BN && n0 + 2 * t128 < p.n) {
                bias0 = TO_F32(bias[n0 + 2 * t128]);
                bias1 = TO_F32(bias[n0 + 2 * t128 + 1]);
            }
#if TMA_STORE
            // The gate's first piece loads into this consumer's staging buffer under the MMAs,
            // once the previous tile's store has read it out.
            if (gated && STAGED_GATE && t128 == 0) {
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                load_gate(&tm_gate, c_tile, gate_full + cw * 8, rows0, n0);
            }
#endif
#if PINGPONG
            if (cw == 1 || turns > 0) {
                mbar_wait(turn + cw * 8, (turns - (cw == 0)) & 1);
            }
            ++turns;
#endif
            for (u32 kt = 0; kt < k_tiles; ++kt, ++it) {
                const u32 s = it % STAGES;
                mbar_wait(full + s * 8, (it / STAGES) & 1);
                // Rows 64h.. of the stage's A: this consumer's 64 (cooperative) or its h-th.
                const u32 sa = base + s * STAGE_BYTES + (PINGPONG ? 0 : cw * ROWS64_BYTES);
                const u32 sb = base + s * STAGE_BYTES + A_STAGE_BYTES;
                wgmma_fence();
#pragma unroll
                for (u32 kk = 0; kk < K_STEPS; ++kk) {
#if B_K_MAJOR
                    const u64 db = make_desc(sb + kk * 32, 16, 1024);
#else
                    const u64 db = make_desc(sb + kk * (16 * 128), ROWS64_BYTES, 1024);
#endif
#pragma unroll
                    for (u32 h = 0; h < MH; ++h) {
                        const u32 sah = sa + h * ROWS64_BYTES;
#if A_M_MAJOR
                        const u64 da = make_desc(sah + kk * (16 * 128), ROWS64_BYTES, 1024);
#else
                        const u64 da = make_desc(sah + kk * 32, 16, 1024);
#endif
                        wgmma_step(d[h], da, db);
                    }
                }
                wgmma_commit();
                // The previous stage's MMAs are done: hand its buffers back to the producer.
                wgmma_wait_1();
                if (kt > 0 && t128 == 0) {
                    mbar_arrive(empty + ((it - 1) % STAGES) * 8);
                }
            }
#if PINGPONG
            // Every stage of this tile has landed: the other consumer's MMAs may start.
            if (t128 == 0) {
                mbar_arrive(turn + (1 - cw) * 8);
            }
#endif
            wgmma_wait_0();
            if (t128 == 0) {
                mbar_arrive(empty + ((it - 1) % STAGES) * 8);
            }
#if PINGPONG
            it += k_tiles; // the other consumer's next tile
#endif

            // This tile's bias, loaded before its MMAs, goes to shared memory for the epilogue.
            // The barrier before the write also orders it after the previous tile's reads
            // (and, with TMA_STORE, after the previous tile's store has read its staging).
#if TMA_STORE
            if (t128 == 0) {
                asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
            }
#else
            const u32 c_tile = 0;
#endif
            asm volatile("bar.sync %0, 128;" :: "r"(1 + cw) : "memory");
            if (2 * t128 < BN) {
                // Exact: the values came from ELEM.
                *reinterpret_cast<ELEM2*>(bias_s + 2 * t128) = PACK2(bias0, bias1);
            }
            asm volatile("bar.sync %0, 128;" :: "r"(1 + cw) : "memory");
            // The epilogue in pieces of 64 rows × SUB columns: each 64-row half of the
            // consumer's rows, SUB columns at a time.
#pragma unroll
            for (u32 piece = 0; piece < MH * SUBS; ++piece) {
                const u32 h = piece / SUBS;
                const u32 sub = piece % SUBS;
                const u32 rows = rows0 + h * 64;
                const u32 cols = n0 + sub * SUB;
#if !TMA_STORE
                (void)cols;
#else
                if (piece > 0) {
                    // The previous piece's store has read the staging buffer out; the gate's
                    // next piece (if any) loads into it.
                    if (t128 == 0) {
                        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                        if (gated && STAGED_GATE) {
                            load_gate(&tm_gate, c_tile, gate_full + cw * 8, rows, cols);
                        }
                    }
                    asm volatile("bar.sync %0, 128;" :: "r"(1 + cw) : "memory");
                }
                if (write_pre) {
                    // pre first, through the staging buffer; the activation reuses it once the
                    // store has read it out.
                    stage_pre(d[h], bias_s, warp, lane, c_tile, sub);
                    store_staged(&tm_pre, c_tile, rows, cols, cw, t128);
                    if (t128 == 0) {
                        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
                    }
                    asm volatile("bar.sync %0, 128;" :: "r"(1 + cw) : "memory");
                }
                if (gated && STAGED_GATE) {
                    mbar_wait(gate_full + cw * 8, gate_phase);
                    gate_phase ^= 1u;
                }
#endif
                if (gated && sum_rows) {
                    epilogue<true, true>(d[h], bias_s, rows, n0, warp, lane, out, pre, gate,
                                         mask, aux, row_sums, p, write_pre, c_tile, sub);
                } else if (gated) {
                    epilogue<true, false>(d[h], bias_s, rows, n0, warp, lane, out, pre, gate,
                                          mask, aux, row_sums, p, write_pre, c_tile, sub);
                } else if (sum_rows) {
                    epilogue<false, true>(d[h], bias_s, rows, n0, warp, lane, out, pre, gate,
                                          mask, aux, row_sums, p, write_pre, c_tile, sub);
                } else {
                    epilogue<false, false>(d[h], bias_s, rows, n0, warp, lane, out, pre, gate,
                                           mask, aux, row_sums, p, write_pre, c_tile, sub);
                }
#if TMA_STORE
                // One thread stores the staged sub-tile and moves on without waiting.
                store_staged(&tm_c, c_tile, rows, cols, cw, t128);
#endif
            }
        }
#if TMA_STORE
        if (t128 == 0) {
            asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
        }
#endif
    }
}
