// Hypatia's grid-wide MLP chain: up to four Linear layers in one launch, each layer spread over
// every SM, each layer starting once the previous one is done. See grid.rs for the host side.
//
// The host prepends: ELEM, TO_F32, FROM_F32, LOAD_X (the first layer's input load), ROWS (rows
// per work item), LAYERS, MMA (1: tensor-core items of PTX type MMA_TYPE, bf16 or f16, with KP
// the widest layer input rounded up to 16), and per layer i < LAYERS: VEC<i> (columns per FMA
// work item, a vector of at most 16 bytes), ACT<i> (0: none, 1: Burn's relu) and BIAS<i> (0/1).
//
// Without MMA a work item is ROWS rows × VEC<i> columns of layer i. Its block's 256 threads
// split k, each keeping its slice's products for every row and column in registers; the warps
// reduce by shuffles, then across warps through shared memory. With MMA (half types, ROWS 16
// or 32) a work item is ROWS rows × 8 columns: the 8 warps split k in steps of 16, each step
// one m16n8k16 tensor-core product per 16 rows (f32 accumulators, as the FMA path keeps), and
// the warps' partial tiles are summed through shared memory. Either way every product is
// exact in f32 and only the order of the f32 sums differs. The hidden activations go through a
// global scratch buffer (L2), rounded to ELEM as Burn's layer-by-layer path stores them, and
// are read back bypassing L1 (__ldcg): another SM wrote them during this launch.
//
// Work items are claimed from a counter per layer (atomicAdd), and a layer's items start once
// the previous layer's have all been counted done. A block only waits while holding no
// unfinished item of an earlier layer, and layer 0 never waits, so the launch completes
// however few of its blocks are resident at once (another stream's kernels, or another
// chain launch, may hold the other SMs): no co-residency is assumed.

#define THREADS 256
#define WARPS (THREADS / 32)

struct Params {
    u32 m;
    u32 x_row; // x's row stride (elements)
    u32 x_col; // x's column stride
    u32 hidden; // row length of each scratch buffer
    u32 k[4];
    u32 n[4];
    u32 w_row[4]; // weight row strides
};

template <int BYTES> struct Raw;
template <> struct Raw<16> { typedef uint4 T; };
template <> struct Raw<8> { typedef uint2 T; };
template <> struct Raw<4> { typedef unsigned int T; };
template <> struct Raw<2> { typedef unsigned short T; };

// VEC consecutive elements (one aligned vector load) as f32.
template <int VEC>
__device__ __forceinline__ void load_vec(const ELEM* __restrict__ p, float (&out)[VEC]) {
    typedef typename Raw<VEC * (int)sizeof(ELEM)>::T T;
    T raw = __ldg(reinterpret_cast<const T*>(p));
    const ELEM* e = reinterpret_cast<const ELEM*>(&raw);
#pragma unroll
    for (int i = 0; i < VEC; i++) out[i] = TO_F32(e[i]);
}

// Counters (u32, zeroed before the first launch, left zeroed by every launch): the next
// unclaimed item of layer i, the items of layer i done, and the blocks that finished.
#define NEXT(c, i) ((c) + (i))
#define DONE(c, i) ((c) + 4 + (i))
#define EXITED(c) ((c) + 8)

#ifndef MMA
#define MMA 0
#endif
// Columns of one work item of a layer whose vector is VEC.
#define ITEM_COLS(VEC) (MMA ? 8 : (VEC))

// Column groups of a layer of `n` outputs (the FMA path's VEC divides n; a tensor-core item's
// last group may be partly past n).
template <int VEC>
__host__ __device__ __forceinline__ u32 layer_groups(u32 n) {
    return (n + ITEM_COLS(VEC) - 1) / ITEM_COLS(VEC);
}

// Items of a layer of `n` outputs over `m` rows.
template <int VEC>
__host__ __device__ __forceinline__ u32 layer_items(u32 m, u32 n) {
    return layer_groups<VEC>(n) * ((m + ROWS - 1) / ROWS);
}

// One step of the warp reduction below: lanes `STEP` apart each keep one half of their first
// 2·HALF values (the upper half moved down) plus the partner's same half; with HALF = 0 both
// add their first value.
template <int NV, int STEP, int HALF>
__device__ __forceinline__ void halve(float (&acc)[NV], u32 lane) {
    if (HALF >= 1) {
        const bool upper = (lane & STEP) != 0;
#pragma unroll
        for (int i = 0; i < (HALF >= 1 ? HALF : 1); i++) {
            const float send = upper ? acc[i] : acc[i + HALF];
            const float keep = upper ? acc[i + HALF] : acc[i];
            acc[i] = keep + __shfl_xor_sync(0xffffffffu, send, STEP);
        }
    } else {
        acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], STEP);
    }
}

// One FMA work item: ROWS rows × VEC columns from column c0, its warps' sums left in `red`
// ([warp][row][column]).
template <int VEC, int FIRST>
__device__ __forceinline__ void item_fma(
    const ELEM* in, u32 in_row, u32 in_col, const ELEM* __restrict__ w, u32 w_row,
    u32 m, u32 k, u32 r0, u32 c0, u32 warp, u32 lane, float* red) {
    constexpr int NV = ROWS * VEC;
    float acc[NV]; // [row][column]
#pragma unroll
    for (int i = 0; i < NV; i++) acc[i] = 0.0f;
#pragma unroll 4
    for (u32 kk = threadIdx.x; kk < k; kk += THREADS) {
        float wv[VEC];
        load_vec<VEC>(w + (size_t)kk * w_row + c0, wv);
#pragma unroll
        for (int r = 0; r < ROWS; r++) {
            if (r0 + r < m) {
                const ELEM* p = in + (size_t)(r0 + r) * in_row + (size_t)kk * in_col;
                const float xv = FIRST ? TO_F32(LOAD_X(p)) : TO_F32(__ldcg(p));
#pragma unroll
                for (int v = 0; v < VEC; v++)
                    acc[r * VEC + v] = fmaf(xv, wv[v], acc[r * VEC + v]);
            }
        }
    }
    // Sum the warp's 32 partials of each of the NV values by halving: at each step a lane
    // keeps half of its values and sends the other half to its partner, so the shuffles total
    // ~NV instead of 5·NV. After it, lane l holds values l·NV/32 .. (l+1)·NV/32 (NV ≥ 32), or
    // value l/(32/NV) (NV < 32).
    halve<NV, 16, NV / 2>(acc, lane);
    halve<NV, 8, NV / 4>(acc, lane);
    halve<NV, 4, NV / 8>(acc, lane);
    halve<NV, 2, NV / 16>(acc, lane);
    halve<NV, 1, NV / 32>(acc, lane);
    if (NV >= 32) {
#pragma unroll
        for (int j = 0; j < (NV >= 32 ? NV / 32 : 1); j++)
            red[warp * NV + lane * (NV / 32) + j] = acc[j];
    } else if (lane % (32 / NV) == 0) {
        red[warp * NV + lane / (32 / NV)] = acc[0];
    }
}

#if MMA
#define MMA_STR2(t) #t
#define MMA_STR(t) MMA_STR2(t)
#define MMA_PTX "mma.sync.aligned.m16n8k16.row.col.f32." MMA_STR(MMA_TYPE) "." MMA_STR(MMA_TYPE) ".f32"

// Shared memory of a tensor-core item (dynamic; the host sizes it from KP, the widest layer
// input rounded up to 16): the item's rows of the layer input [ROWS][XS] (XS = KP + 8, so that
// the 8 rows one ldmatrix phase reads fall in distinct banks), its 8 weight columns [KP][8],
// and the warps' partial tiles [WARPS][ROWS][8] (f32).
#define XS (KP + 8)
#define MMA_X_BYTES (ROWS * XS * 2)
#define MMA_W_BYTES (KP * 16)
extern __shared__ __align__(16) unsigned char mma_smem[];

// k rows of a layer one thread loads weights for: kk = threadIdx.x + i·THREADS for i < KW
// (every layer input is at most KP wide).
#define KW ((KP + THREADS - 1) / THREADS)

// A thread's share of one tensor-core item's 8 weight columns, as loaded: 16 bytes for each
// of its k rows, zero past k and n.
struct WTile {
    uint4 r[KW];
};

// Loads `t` for the item at column c0. The weights do not depend on the previous layer, so a
// block loads its first item's share before it waits for that layer: the loads are in flight
// during the wait. (The FMA items load their weights with their inputs; loading them ahead
// made them slower, 9.65 → 10.11 µs at one row.)
__device__ __forceinline__ void load_w(WTile& t, const ELEM* __restrict__ w, u32 w_row, u32 k,
                                       u32 n, u32 c0) {
    const bool vec = w_row % 8 == 0 && c0 + 8 <= n && (reinterpret_cast<size_t>(w) & 15) == 0;
#pragma unroll
    for (int i = 0; i < KW; i++) {
        const u32 kk = threadIdx.x + i * THREADS;
        const ELEM* p = w + (size_t)kk * w_row + c0;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (kk < k && vec) {
            v = __ldg(reinterpret_cast<const uint4*>(p));
        } else if (kk < k) {
            u32 e[8];
#pragma unroll
            for (int c = 0; c < 8; c++)
                e[c] = c0 + c < n ? (u32)__ldg(reinterpret_cast<const unsigned short*>(p + c)) : 0u;
            v = make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
        }
        t.r[i] = v;
    }
}


// 16 bytes of a layer input: the launch's input through the read-only path, a hidden layer
// from L2 (another SM wrote it during this launch).
template <int FIRST>
__device__ __forceinline__ uint4 load16(const ELEM* p) {
    const uint4* q = reinterpret_cast<const uint4*>(p);
    return FIRST ? __ldg(q) : __ldcg(q);
}
template <int FIRST>
__device__ __forceinline__ unsigned short load2(const ELEM* p) {
    const unsigned short* q = reinterpret_cast<const unsigned short*>(p);
    return FIRST ? __ldg(q) : __ldcg(q);
}

__device__ __forceinline__ u32 smem_addr(const void* p) {
    return (u32)__cvta_generic_to_shared(p);
}

// One tensor-core work item: ROWS (16 or 32) rows × 8 columns, its weights in `wt`. The block
// first copies the item's input rows (coalesced loads: 16 bytes a thread where the layout
// allows, else 2) and weight columns to shared memory, zero beyond m, k and n, so the padding
// adds nothing. Then warp `warp` takes the k steps warp, warp + 8, ... of 16 each: ldmatrix
// (x4 for 16 rows of A, x2.trans for B) and one m16n8k16 product per 16 rows. Its warps' sums
// are left in `red` ([warp][row][column]).
template <int FIRST>
__device__ __forceinline__ void item_mma(
    const ELEM* in, u32 in_row, u32 in_col, const WTile& wt,
    u32 m, u32 k, u32 r0, u32 warp, u32 lane, float* red) {
    constexpr int MT = ROWS / 16;
    ELEM* xs = reinterpret_cast<ELEM*>(mma_smem);
    ELEM* ws = reinterpret_cast<ELEM*>(mma_smem + MMA_X_BYTES);
    unsigned short* xs16 = reinterpret_cast<unsigned short*>(xs);
    const u32 k16 = (k + 15) & ~15u; // k rounded up to whole steps
    const uint4 zero = make_uint4(0, 0, 0, 0);
    // Every load of the copy is issued before its first store, so that they are all in flight
    // at once (stores between them would keep the compiler from hoisting the loads).
    // The input rows.
    const bool x_vec = in_col == 1 && in_row % 8 == 0 && k % 8 == 0 &&
                       (reinterpret_cast<size_t>(in) & 15) == 0;
    if (x_vec) {
        constexpr int PER = (ROWS * (KP / 8) + THREADS - 1) / THREADS;
        const u32 per_row = k16 / 8;
        uint4 v[PER];
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const u32 c = threadIdx.x + i * THREADS;
            const u32 r = c / per_row;
            const u32 kk = (c % per_row) * 8;
            v[i] = (r < ROWS && r0 + r < m && kk < k)
                ? load16<FIRST>(in + (size_t)(r0 + r) * in_row + kk) : zero;
        }
#pragma unroll
        for (int i = 0; i < PER; i++) {
            const u32 c = threadIdx.x + i * THREADS;
            const u32 r = c / per_row;
            if (r < ROWS) *reinterpret_cast<uint4*>(xs + r * XS + (c % per_row) * 8) = v[i];
        }
    } else {
        for (u32 e0 = 0; e0 < ROWS * k16; e0 += 8 * THREADS) {
            unsigned short v[8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const u32 e = e0 + threadIdx.x + i * THREADS;
                const u32 r = e / k16;
                const u32 kk = e % k16;
                v[i] = (r < ROWS && r0 + r < m && kk < k)
                    ? load2<FIRST>(in + (size_t)(r0 + r) * in_row + (size_t)kk * in_col) : 0;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const u32 e = e0 + threadIdx.x + i * THREADS;
                if (e < ROWS * k16) xs16[(e / k16) * XS + e % k16] = v[i];
            }
        }
    }
    // The weight columns, from the registers they were loaded into.
#pragma unroll
    for (int i = 0; i < KW; i++) {
        const u32 kk = threadIdx.x + i * THREADS;
        if (kk < k16) *reinterpret_cast<uint4*>(ws + kk * 8) = wt.r[i];
    }
    __syncthreads();
    float acc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (u32 s = warp; s < k16 / 16; s += WARPS) {
        u32 b0, b1;
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                     : "=r"(b0), "=r"(b1)
                     : "r"(smem_addr(ws + (s * 16 + (lane & 15)) * 8)));
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            u32 a0, a1, a2, a3;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(a0), "=r"(a1), "=r"(a2), "=r"(a3)
                         : "r"(smem_addr(xs + (mt * 16 + (lane & 15)) * XS + s * 16 + (lane >> 4) * 8)));
            asm volatile(
                MMA_PTX " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                : "+f"(acc[mt][0]), "+f"(acc[mt][1]), "+f"(acc[mt][2]), "+f"(acc[mt][3])
                : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
        }
    }
    // c0, c1: (row g, columns 2t, 2t + 1); c2, c3: (row g + 8, same columns).
    const u32 g = lane >> 2;
    const u32 t = lane & 3;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float* tile = red + (warp * ROWS + mt * 16) * 8;
        tile[g * 8 + 2 * t] = acc[mt][0];
        tile[g * 8 + 2 * t + 1] = acc[mt][1];
        tile[(g + 8) * 8 + 2 * t] = acc[mt][2];
        tile[(g + 8) * 8 + 2 * t + 1] = acc[mt][3];
    }
}
#endif

// One layer: out[r][c] = act(sum_k in[r][k] * w[k][c] + b[c]) for this block's work items.
// FIRST: `in` is the launch's input (read through LOAD_X with its strides); else a scratch
// buffer another block wrote (read from L2).
template <int VEC, int ACT, int BIAS, int FIRST>
__device__ __forceinline__ void chain_layer(
    const ELEM* in, u32 in_row, u32 in_col,
    const ELEM* __restrict__ w, u32 w_row,
    const ELEM* __restrict__ b,
    ELEM* out, u32 out_row,
    u32 m, u32 k, u32 n,
    u32* next, u32* done, const u32* before, u32 before_items,
    float* red, u32* slot) {
    constexpr u32 COLS = ITEM_COLS(VEC);
    const u32 groups = layer_groups<VEC>(n);
    const u32 items = layer_items<VEC>(m, n);
    const u32 warp = threadIdx.x >> 5;
    const u32 lane = threadIdx.x & 31;
    __syncthreads(); // every thread has read `slot` for the previous layer
#if MMA
    // Claim, load the first item's weights, then wait for the layer before: the weights do
    // not depend on it, so their loads are in flight during the wait.
    if (threadIdx.x == 0) slot[0] = atomicAdd(next, 1u);
    __syncthreads();
    WTile wt;
    if (slot[0] < items) load_w(wt, w, w_row, k, n, (slot[0] % groups) * COLS);
    if (threadIdx.x == 0 && before != nullptr) {
        volatile const u32* d = before;
        while (*d < before_items) __nanosleep(32);
        __threadfence();
    }
#else
    if (threadIdx.x == 0) {
        // Claim first (it does not depend on the data), then wait for the layer before.
        const u32 first = atomicAdd(next, 1u);
        if (before != nullptr) {
            volatile const u32* d = before;
            while (*d < before_items) __nanosleep(32);
            __threadfence();
        }
        slot[0] = first;
    }
#endif
    __syncthreads();
    u32 count = 0; // items this block finished (kept by thread 0)
    for (u32 round = 0, item = slot[0]; item < items; round++) {
        // Claim the next item now, and publish it only after this item's loads and sums, so
        // that the atomic's round trip hides under them (warp 0 would stall at the publishing
        // store). A claim past the last item is harmless: the counters are reset at exit.
        // Every block keeps claiming until the items run out, so that the layer completes
        // with whichever blocks are resident.
        u32 claimed = 0;
        if (threadIdx.x == 0) claimed = atomicAdd(next, 1u);
        const u32 c0 = (item % groups) * COLS;
        const u32 r0 = (item / groups) * ROWS;
#if MMA
        if (round > 0) load_w(wt, w, w_row, k, n, c0);
        item_mma<FIRST>(in, in_row, in_col, wt, m, k, r0, warp, lane, red);
#else
        item_fma<VEC, FIRST>(in, in_row, in_col, w, w_row, m, k, r0, c0, warp, lane, red);
#endif
        if (threadIdx.x == 0) slot[(round + 1) & 1] = claimed;
        __syncthreads();
        for (u32 i = threadIdx.x; i < ROWS * COLS; i += THREADS) {
            const u32 r = i / COLS;
            const u32 v = i % COLS;
            if (r0 + r < m && c0 + v < n) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < WARPS; j++) s += red[j * ROWS * COLS + i];
                // Burn adds the bias to the product stored in ELEM (decision record 0027).
                if (BIAS) s = TO_F32(FROM_F32(s)) + TO_F32(__ldg(b + c0 + v));
                // Burn's relu: NaN compares false and passes through.
                if (ACT == ACT_RELU) s = activate(s, ACT_RELU, 0.0f, 0.0f);
                out[(size_t)(r0 + r) * out_row + c0 + v] = FROM_F32(s);
            }
        }
        __syncthreads(); // `red` is free again, and the next claim is in `slot`
        item = slot[(round + 1) & 1];
        count++;
    }
    // The block's items count as done together: one fence and one atomic per layer, not per
    // item. A block holding a claimed item never waits before finishing it, so the layer's
    // count still completes with any number of resident blocks.
    if (threadIdx.x == 0 && count != 0) {
        __threadfence(); // the items' stores are visible before they count as done
        atomicAdd(done, count);
    }
}

// The chain's layers, as `hypatia_grid_chain` below calls them. Layer 0 reads `x` through its
// strides and waits for nothing; layer i > 0 reads the hidden buffer `src` that layer `prev`
// wrote, once all `items<prev>` of that layer are done. Each writes `dst` with row pitch `ld`:
// the other hidden buffer, or `out` for the last layer.
#define FIRST_LAYER(dst, ld)                                                                      \
    chain_layer<VEC0, ACT0, BIAS0, 1>(x, p.x_row, p.x_col, w0, p.w_row[0], b0, dst, ld, p.m,     \
                                      p.k[0], p.n[0], NEXT(c, 0), DONE(c, 0), nullptr, 0, red,   \
                                      slot)
#define LAYER(i, prev, src, dst, ld)                                                              \
    chain_layer<VEC##i, ACT##i, BIAS##i, 0>(src, p.hidden, 1, w##i, p.w_row[i], b##i, dst, ld,   \
                                            p.m, p.k[i], p.n[i], NEXT(c, i), DONE(c, i),         \
                                            DONE(c, prev), items##prev, red, slot)
#define ITEMS(i) const u32 items##i = layer_items<VEC##i>(p.m, p.n[i])

extern "C" __global__ void __launch_bounds__(THREADS, 1) hypatia_grid_chain(
    const ELEM* x,
    const ELEM* __restrict__ w0, const ELEM* __restrict__ b0,
    const ELEM* __restrict__ w1, const ELEM* __restrict__ b1,
    const ELEM* __restrict__ w2, const ELEM* __restrict__ b2,
    const ELEM* __restrict__ w3, const ELEM* __restrict__ b3,
    ELEM* out,
    ELEM* scratch,
    u32* counter,
    const __grid_constant__ Params p) {
#if MMA
    float* red = reinterpret_cast<float*>(mma_smem + MMA_X_BYTES + MMA_W_BYTES);
#else
    __shared__ float red[WARPS * ROWS * 16];
#endif
    __shared__ u32 slot[2];
    ELEM* h0 = scratch;
    ELEM* h1 = scratch + (size_t)p.m * p.hidden;
    u32* c = counter;
#if LAYERS == 1
    FIRST_LAYER(out, p.n[0]);
#else
    FIRST_LAYER(h0, p.hidden);
    ITEMS(0);
#if LAYERS == 2
    LAYER(1, 0, h0, out, p.n[1]);
#else
    LAYER(1, 0, h0, h1, p.hidden);
    ITEMS(1);
#if LAYERS == 3
    LAYER(2, 1, h1, out, p.n[2]);
#else
    LAYER(2, 1, h1, h0, p.hidden);
    ITEMS(2);
    LAYER(3, 2, h0, out, p.n[3]);
#endif
#endif
#endif
    // The last block to finish leaves the counters zeroed for the next launch: every block
    // has made its last claim by then, so none still reads them.
    if (threadIdx.x == 0) {
        __threadfence();
        if (atomicAdd(EXITED(c), 1u) == gridDim.x - 1) {
            for (int i = 0; i < 9; i++) c[i] = 0;
            __threadfence();
        }
    }
}
