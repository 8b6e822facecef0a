// Hypatia's Hopper kernel: out = act(x · w + bias) (and pre = x · w + bias) in one launch.
//
// One CTA computes a BM × BN tile with three warpgroups: warpgroup 0 is the producer (one thread
// issues TMA loads into a STAGES-deep ring of shared-memory stages), warpgroups 1 and 2 are
// consumers, each running `wgmma.mma_async` m64nBNk16 on 64 of the BM rows with f32
// accumulators in registers, then the epilogue from those registers. Stages are handed over with
// mbarriers: `full[s]` completes when TMA has landed stage s, `empty[s]` when both consumers are
// done reading it.
//
// Shared-memory layouts are the canonical 128-byte-swizzled wgmma layouts that TMA writes with
// CU_TENSOR_MAP_SWIZZLE_128B: x as K-major [BM][64]; w either N-major (Burn's [K, N] weight,
// BN/64 boxes of [64 k][64 n], transposed operand B) or K-major ([N, K] storage, one [BN][64] box).
//
// Defined by the host before this text: ELEM, ELEM2, PACK2, TO_F32, BN, STAGES, B_K_MAJOR and
// wgmma_step(d, desc_a, desc_b).

#define BM 128
#define BK 64
#define THREADS 384
#define A_STAGE_BYTES (BM * BK * 2)
#define B_STAGE_BYTES (BN * BK * 2)
#define STAGE_BYTES (A_STAGE_BYTES + B_STAGE_BYTES)

struct Params {
    u32 m;
    u32 n;
    u32 k;
    u32 flags; // bit 0: bias, bit 1: write pre, bit 2: relu
};

__device__ __forceinline__ u32 smem_addr(const void* ptr) {
    u32 addr;
    asm volatile("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }"
                 : "=r"(addr) : "l"(ptr));
    return addr;
}

__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(u32 bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
    u32 done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; "
                     "selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    }
}

__device__ __forceinline__ void tma_load_2d(u32 dst, const CUtensorMap* map, u32 bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        :: "r"(dst), "l"((u64)map), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// wgmma shared-memory matrix descriptor, 128-byte swizzle.
__device__ __forceinline__ u64 make_desc(u32 addr, u32 lbo, u32 sbo) {
    return (u64)((addr & 0x3FFFF) >> 4)
        | ((u64)((lbo & 0x3FFFF) >> 4) << 16)
        | ((u64)((sbo & 0x3FFFF) >> 4) << 32)
        | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

__device__ __forceinline__ void wgmma_wait_1() {
    asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
}

__device__ __forceinline__ void wgmma_wait_0() {
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
}

extern "C" __global__ void __launch_bounds__(THREADS, 1) hypatia_wgmma_linear(
    const __grid_constant__ CUtensorMap tm_a,
    const __grid_constant__ CUtensorMap tm_b,
    const ELEM* __restrict__ a_ptr,
    const ELEM* __restrict__ b_ptr,
    ELEM* out,
    const ELEM* __restrict__ bias,
    ELEM* pre,
    const __grid_constant__ Params p) {
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // The swizzle pattern is a function of address bits 4..9: stages start on 1024 bytes.
    const u32 raw = smem_addr(smem_raw);
    const u32 base = (raw + 1023u) & ~1023u;
    const u32 full = base + STAGES * STAGE_BYTES;
    const u32 empty = full + STAGES * 8;

    const u32 tid = threadIdx.x;
    const u32 wg = tid / 128;
    const u32 m0 = blockIdx.y * BM;
    const u32 n0 = blockIdx.x * BN;
    const u32 k_tiles = (p.k + BK - 1) / BK;

    if (tid == 0) {
        for (u32 s = 0; s < STAGES; ++s) {
            mbar_init(full + s * 8, 1);
            mbar_init(empty + s * 8, 2);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        if (tid == 0) {
            for (u32 kt = 0; kt < k_tiles; ++kt) {
                const u32 s = kt % STAGES;
                if (kt >= STAGES) {
                    mbar_wait(empty + s * 8, ((kt / STAGES) + 1) & 1);
                }
                const u32 sa = base + s * STAGE_BYTES;
                const u32 sb = sa + A_STAGE_BYTES;
                mbar_expect_tx(full + s * 8, STAGE_BYTES);
                tma_load_2d(sa, &tm_a, full + s * 8, (int)(kt * BK), (int)m0);
#if B_K_MAJOR
                tma_load_2d(sb, &tm_b, full + s * 8, (int)(kt * BK), (int)n0);
#else
#pragma unroll
                for (u32 j = 0; j < BN / 64; ++j) {
                    tma_load_2d(sb + j * (64 * BK * 2), &tm_b, full + s * 8, (int)(n0 + 64 * j),
                                (int)(kt * BK));
                }
#endif
            }
        }
        return;
    }

    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const u32 cw = wg - 1;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
        d[i] = 0.0f;
    }
    for (u32 kt = 0; kt < k_tiles; ++kt) {
        const u32 s = kt % STAGES;
        mbar_wait(full + s * 8, (kt / STAGES) & 1);
        const u32 sa = base + s * STAGE_BYTES + cw * (64 * BK * 2);
        const u32 sb = base + s * STAGE_BYTES + A_STAGE_BYTES;
        wgmma_fence();
#pragma unroll
        for (u32 kk = 0; kk < BK / 16; ++kk) {
            const u64 da = make_desc(sa + kk * 32, 16, 1024);
#if B_K_MAJOR
            const u64 db = make_desc(sb + kk * 32, 16, 1024);
#else
            const u64 db = make_desc(sb + kk * (16 * 128), 64 * BK * 2, 1024);
#endif
            wgmma_step(d, da, db);
        }
        wgmma_commit();
        // The previous stage's MMAs are done: hand its buffers back to the producer.
        wgmma_wait_1();
        if (kt > 0 && (tid % 128) == 0) {
            mbar_arrive(empty + ((kt - 1) % STAGES) * 8);
        }
    }
    wgmma_wait_0();

    // Epilogue from the accumulators: thread (warp w, lane l) holds rows 16w + l/4 (+8) and,
    // per 8 columns j, columns 8j + 2(l%4) (+1).
    const u32 t = tid % 128;
    const u32 warp = t / 32;
    const u32 lane = t % 32;
    const u32 row0 = m0 + cw * 64 + warp * 16 + lane / 4;
    const bool has_bias = (p.flags & 1u) != 0;
    const bool write_pre = (p.flags & 2u) != 0;
    const bool relu = (p.flags & 4u) != 0;
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const u32 col = n0 + j * 8 + (lane % 4) * 2;
        if (col < p.n) {
            float b0 = 0.0f;
            float b1 = 0.0f;
            if (has_bias) {
                b0 = TO_F32(bias[col]);
                b1 = TO_F32(bias[col + 1]);
            }
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const u32 row = row0 + h * 8;
                if (row < p.m) {
                    float v0 = d[j * 4 + h * 2] + b0;
                    float v1 = d[j * 4 + h * 2 + 1] + b1;
                    const unsigned long long idx = (unsigned long long)row * p.n + col;
                    if (write_pre) {
                        *reinterpret_cast<ELEM2*>(pre + idx) = PACK2(v0, v1);
                    }
                    if (relu) {
                        // Keeps NaN, like Burn's relu (never fmaxf).
                        v0 = v0 <= 0.0f ? 0.0f : v0;
                        v1 = v1 <= 0.0f ? 0.0f : v1;
                    }
                    *reinterpret_cast<ELEM2*>(out + idx) = PACK2(v0, v1);
                }
            }
        }
    }
}
