// Hypatia's grid-wide MLP chain: up to four Linear layers in one launch, each layer spread over
// every SM, each layer starting once the previous one is done. See grid.rs for the host side.
//
// The host prepends: ELEM, TO_F32, FROM_F32, LOAD_X (the first layer's input load), ROWS (rows
// per work item), LAYERS, and per layer i < LAYERS: VEC<i> (columns per work item, a vector
// of at most 16 bytes), ACT<i> (0: none, 1: Burn's relu) and BIAS<i> (0/1).
//
// A work item is ROWS rows × VEC<i> columns of layer i. Its block's 256 threads split k,
// each keeping its slice's products for every row and column in registers; the warps reduce
// by shuffles, then across warps through shared memory. The hidden activations go through a
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

// Items of a layer of `n` outputs over `m` rows.
template <int VEC>
__device__ __forceinline__ u32 layer_items(u32 m, u32 n) {
    return (n / VEC) * ((m + ROWS - 1) / ROWS);
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
    const u32 groups = n / VEC;
    const u32 items = layer_items<VEC>(m, n);
    const u32 warp = threadIdx.x >> 5;
    const u32 lane = threadIdx.x & 31;
    __syncthreads(); // every thread has read `slot` for the previous layer
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
        const u32 c0 = (item % groups) * VEC;
        const u32 r0 = (item / groups) * ROWS;
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
        // Sum the warp's 32 partials of each of the NV values by halving: at each step a
        // lane keeps half of its values and sends the other half to its partner, so the
        // shuffles total ~NV instead of 5·NV. After it, lane l holds values
        // l·NV/32 .. (l+1)·NV/32 (NV ≥ 32), or value l/(32/NV) (NV < 32).
        halve<NV, 16, NV / 2>(acc, lane);
        halve<NV, 8, NV / 4>(acc, lane);
        halve<NV, 4, NV / 8>(acc, lane);
        halve<NV, 2, NV / 16>(acc, lane);
        halve<NV, 1, NV / 32>(acc, lane);
        if (threadIdx.x == 0) slot[(round + 1) & 1] = claimed;
        if (NV >= 32) {
#pragma unroll
            for (int j = 0; j < (NV >= 32 ? NV / 32 : 1); j++)
                red[warp * NV + lane * (NV / 32) + j] = acc[j];
        } else if (lane % (32 / NV) == 0) {
            red[warp * NV + lane / (32 / NV)] = acc[0];
        }
        __syncthreads();
        for (u32 i = threadIdx.x; i < ROWS * VEC; i += THREADS) {
            const u32 r = i / VEC;
            const u32 v = i % VEC;
            if (r0 + r < m) {
                float s = 0.0f;
#pragma unroll
                for (int j = 0; j < WARPS; j++) s += red[j * ROWS * VEC + i];
                if (BIAS) s += TO_F32(__ldg(b + c0 + v));
                // Burn's relu: NaN compares false and passes through.
                if (ACT == 1) s = (s <= 0.0f) ? 0.0f : s;
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
    __shared__ float red[WARPS * ROWS * 16];
    __shared__ u32 slot[2];
    ELEM* h0 = scratch;
    ELEM* h1 = scratch + (size_t)p.m * p.hidden;
    u32* c = counter;
#if LAYERS == 1
    chain_layer<VEC0, ACT0, BIAS0, 1>(x, p.x_row, p.x_col, w0, p.w_row[0], b0, out, p.n[0],
                                      p.m, p.k[0], p.n[0], NEXT(c, 0), DONE(c, 0), nullptr, 0,
                                      red, slot);
#else
    chain_layer<VEC0, ACT0, BIAS0, 1>(x, p.x_row, p.x_col, w0, p.w_row[0], b0, h0, p.hidden,
                                      p.m, p.k[0], p.n[0], NEXT(c, 0), DONE(c, 0), nullptr, 0,
                                      red, slot);
    const u32 items0 = layer_items<VEC0>(p.m, p.n[0]);
#if LAYERS == 2
    chain_layer<VEC1, ACT1, BIAS1, 0>(h0, p.hidden, 1, w1, p.w_row[1], b1, out, p.n[1],
                                      p.m, p.k[1], p.n[1], NEXT(c, 1), DONE(c, 1), DONE(c, 0),
                                      items0, red, slot);
#else
    chain_layer<VEC1, ACT1, BIAS1, 0>(h0, p.hidden, 1, w1, p.w_row[1], b1, h1, p.hidden,
                                      p.m, p.k[1], p.n[1], NEXT(c, 1), DONE(c, 1), DONE(c, 0),
                                      items0, red, slot);
    const u32 items1 = layer_items<VEC1>(p.m, p.n[1]);
#if LAYERS == 3
    chain_layer<VEC2, ACT2, BIAS2, 0>(h1, p.hidden, 1, w2, p.w_row[2], b2, out, p.n[2],
                                      p.m, p.k[2], p.n[2], NEXT(c, 2), DONE(c, 2), DONE(c, 1),
                                      items1, red, slot);
#else
    chain_layer<VEC2, ACT2, BIAS2, 0>(h1, p.hidden, 1, w2, p.w_row[2], b2, h0, p.hidden,
                                      p.m, p.k[2], p.n[2], NEXT(c, 2), DONE(c, 2), DONE(c, 1),
                                      items1, red, slot);
    const u32 items2 = layer_items<VEC2>(p.m, p.n[2]);
    chain_layer<VEC3, ACT3, BIAS3, 0>(h0, p.hidden, 1, w3, p.w_row[3], b3, out, p.n[3],
                                      p.m, p.k[3], p.n[3], NEXT(c, 3), DONE(c, 3), DONE(c, 2),
                                      items2, red, slot);
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
