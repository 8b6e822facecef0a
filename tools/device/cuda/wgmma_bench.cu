// Standalone timing of Hypatia's Hopper kernel (src/kernel/hopper/wgmma_linear.cu) beside
// cuBLASLt, without Burn or CubeCL: GPU time per launch from CUDA events over back-to-back
// launches of one shape, and the kernel's output checked against cuBLASLt's.
// Built on the device by tools/device/device_wgmma_bench.sh, from the source the crate compiles:
//   ./cuda_source wgmma --bn 256 --store-cols 128 --tma-store --act relu > k.cu
//   nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -DKERNEL='"k.cu"' \
//        tools/device/wgmma_bench.cu -lcuda -lcublasLt
// Usage: wgmma_bench M K N MODE [launches]
//   MODE: none (no bias), bias, pre (bias, pre written), gated (relu-backward gate and
//   bias-gradient partial sums, no bias; needs ACT=0), as a training step's forward and backward
//   use the kernel; ACT (0 none, 1 relu) is compiled in. A_M_MAJOR / B_K_MAJOR pick the
//   operands' storage as the host does (all from `cuda_source`'s flags).
#include <cuda.h>
#include <cuda_bf16.h>
#include <cublasLt.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include "bench_timing.cuh"
// KERNEL: the kernel as the crate compiles it (macros, generated wgmma wrapper, kernel),
// written by `cuda_source wgmma`.
#include KERNEL
#ifndef BIAS_BYTES
#define BIAS_BYTES ESIZE // the kernel's copy of a tile's bias: BN values per consumer
#endif
#ifndef VARIANT
#define VARIANT KERNEL
#endif

#define CHECK_LT(x) do { cublasStatus_t s = (x); if (s != CUBLAS_STATUS_SUCCESS) { \
    printf("%s:%d cublasLt status %d\n", __FILE__, __LINE__, (int)s); exit(1); } } while (0)

__global__ void fill(ELEM* p, size_t n, u32 seed, float scale, float offset) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        u32 h = (u32)i * 2654435761u ^ seed;
        h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        p[i] = __float2bfloat16_rn(((h & 0xffff) / 65535.0f - 0.5f) * scale + offset);
    }
}

// Reference epilogue on cuBLASLt's plain product `ref` (bias already added by cuBLASLt where
// the mode has one): the expected output, and (gated) its column sums.
__global__ void expect(const ELEM* ref, const ELEM* gate, ELEM* want, size_t n_all, int mode) {
    const bool relu = ACT == 1u;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n_all;
         i += (size_t)gridDim.x * blockDim.x) {
        float v = __bfloat162float(ref[i]);
        if (mode == 3) v = __bfloat162float(gate[i]) <= 0.0f ? 0.0f : v;
        else if (relu) v = v <= 0.0f ? 0.0f : v;
        want[i] = __float2bfloat16_rn(v);
    }
}

__global__ void column_sums(const ELEM* t, float* sums, u32 rows, u32 n) {
    const u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    float s = 0.0f;
    for (u32 r = 0; r < rows; ++r) s += __bfloat162float(t[(size_t)r * n + c]);
    sums[c] = s;
}

__global__ void partial_sums(const float* partials, float* sums, u32 rows, u32 n) {
    const u32 c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    float s = 0.0f;
    for (u32 r = 0; r < rows; ++r) s += partials[(size_t)r * n + c];
    sums[c] = s;
}

static double rel_err(const ELEM* a, const ELEM* b, size_t n) {
    std::vector<ELEM> ha(n), hb(n);
    CHECK(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hb.data(), b, n * 2, cudaMemcpyDeviceToHost));
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        const double x = __bfloat162float(ha[i]), y = __bfloat162float(hb[i]);
        err += (x - y) * (x - y);
        norm += y * y;
    }
    return std::isnan(err) ? INFINITY : sqrt(err / (norm > 0 ? norm : 1));
}

// A 2-D tiled map of a row-major [rows, cols] bf16 matrix (pitch = cols), as
// src/kernel/hopper/mod.rs's tensor_map encodes it through CubeCL.
static CUtensorMap map2d(const void* ptr, u64 rows, u64 cols, u32 box_rows, u32 box_cols) {
    CUtensorMap map;
    const cuuint64_t dims[2] = {cols, rows};
    const cuuint64_t strides[1] = {cols * 2};
    const cuuint32_t box[2] = {box_cols, box_rows};
    const cuuint32_t elem[2] = {1, 1};
    CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void*)ptr,
                                        dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                        CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                        CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) { printf("cuTensorMapEncodeTiled: %d\n", (int)r); exit(1); }
    return map;
}

int main(int argc, char** argv) {
    if (argc < 5) { printf("usage: wgmma_bench M K N none|bias|pre|gated [launches]\n"); return 2; }
    const u32 m = atoi(argv[1]), k = atoi(argv[2]), n = atoi(argv[3]);
    const char* modes[4] = {"none", "bias", "pre", "gated"};
    int mode = -1;
    for (int i = 0; i < 4; i++) if (!strcmp(argv[4], modes[i])) mode = i;
    const int launches = argc > 5 ? atoi(argv[5]) : 20;
    const bool has_bias = mode == 1 || mode == 2;
    if (mode < 0 || (mode == 3 && ACT != 0u)) {
        printf("bad mode (gated needs -DACT=0u)\n");
        return 2;
    }

    ELEM *x, *w, *bias, *out, *pre, *gate, *ref, *want;
    float *partials, *sums_got, *sums_want;
    const size_t mn = (size_t)m * n;
    const u32 tiles_m = (m + BM - 1) / BM;
    CHECK(cudaMalloc(&x, (size_t)m * k * 2));
    CHECK(cudaMalloc(&w, (size_t)k * n * 2));
    CHECK(cudaMalloc(&bias, n * 2));
    for (ELEM** p : {&out, &pre, &gate, &ref, &want}) CHECK(cudaMalloc(p, mn * 2));
    CHECK(cudaMalloc(&partials, (size_t)tiles_m * (BM / 16) * n * 4));
    CHECK(cudaMalloc(&sums_got, n * 4));
    CHECK(cudaMalloc(&sums_want, n * 4));
    fill<<<1024, 256>>>(x, (size_t)m * k, 1, 2.0f, 0.0f);
    fill<<<1024, 256>>>(w, (size_t)k * n, 2, 2.0f / sqrtf((float)k), 0.0f);
    fill<<<1024, 256>>>(bias, n, 3, 0.2f, 0.0f);
    fill<<<1024, 256>>>(gate, mn, 4, 2.0f, 0.0f);
    CHECK(cudaMemset(out, 0xff, mn * 2)); // NaN poison
    CHECK(cudaMemset(pre, 0xff, mn * 2));

    // Storage as the training step hands it over: A_M_MAJOR reads x from [k, m] storage,
    // B_K_MAJOR reads w from [n, k] storage (the same random values, other layout).
    const CUtensorMap tm_a = A_M_MAJOR ? map2d(x, k, m, 64, 64) : map2d(x, m, k, BM, BK);
    const CUtensorMap tm_b = B_K_MAJOR ? map2d(w, n, k, BN, BK) : map2d(w, k, n, BK, 64);
    const CUtensorMap tm_c = map2d(out, m, n, 64, 64);
    const CUtensorMap tm_pre = map2d(mode == 2 ? pre : out, m, n, 64, 64);
    const CUtensorMap tm_gate = map2d(mode == 3 ? gate : out, m, n, 64, 64);

    Params p{};
    p.m = m; p.n = n; p.k = k;
    p.flags = (has_bias ? 1u : 0u) | (mode == 2 ? 2u : 0u) | (mode == 3 ? 8u | 16u : 0u);
    int sms;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const u32 tiles = tiles_m * ((n + BN - 1) / BN);
    const u32 ctas = tiles < (u32)sms ? tiles : sms;
    const size_t smem = 1024 + STAGES * (STAGE_BYTES + 16) + 32 + (TMA_STORE ? 2 * C_BYTES : 0)
        + 2 * BN * BIAS_BYTES;
    CHECK(cudaFuncSetAttribute(hypatia_wgmma_linear,
                               cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    auto launch = [&]() {
        hypatia_wgmma_linear<<<ctas, THREADS, smem>>>(tm_a, tm_b, tm_c,
#if TMA_STORE
                                                      tm_pre, tm_gate,
#endif
                                                      x, w, out,
#if TMA_STORE
                                                      pre, gate,
#endif
                                                      bias, pre, gate, gate, partials, p);
    };

    // cuBLASLt: column-major out^T [n, m] = op(w)^T [n, k] · op(x)^T [k, m], bias per row of
    // out^T; with a bias, RELU_BIAS (ACT relu) or BIAS, else DEFAULT (gated: masked afterwards).
    cublasLtHandle_t lt;
    CHECK_LT(cublasLtCreate(&lt));
    cublasLtMatmulDesc_t desc;
    CHECK_LT(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_w = B_K_MAJOR ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_x = A_M_MAJOR ? CUBLAS_OP_T : CUBLAS_OP_N;
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_w, 4));
    CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_x, 4));
    cublasLtMatrixLayout_t la, lb, lc;
    CHECK_LT(B_K_MAJOR ? cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, n, k)
                       : cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, n, k, n));
    CHECK_LT(A_M_MAJOR ? cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, m, k, m)
                       : cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k, m, k));
    CHECK_LT(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));
    auto lt_run = [&](cublasLtEpilogue_t epi, ELEM* dst, float* us) {
        CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, 4));
        if (epi != CUBLASLT_EPILOGUE_DEFAULT) {
            const void* bp = bias;
            CHECK_LT(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bp, sizeof(bp)));
        }
        size_t ws_size = 64 << 20;
        void* ws;
        CHECK(cudaMalloc(&ws, ws_size));
        cublasLtMatmulPreference_t pref;
        CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
        CHECK_LT(cublasLtMatmulPreferenceSetAttribute(
            pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
        cublasLtMatmulHeuristicResult_t heur;
        int found = 0;
        CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 1, &heur, &found));
        if (!found) { printf("cuBLASLt: no algorithm\n"); exit(1); }
        const float one = 1.0f, zero = 0.0f;
        auto run = [&]() {
            CHECK_LT(cublasLtMatmul(lt, desc, &one, w, la, x, lb, &zero, dst, lc, dst, lc,
                                    &heur.algo, ws, ws_size, 0));
        };
        *us = time_launches(run, launches)[2];
        CHECK(cudaFree(ws));
    };

    float lt_us = 0.0f, lt_plain_us;
    lt_run(CUBLASLT_EPILOGUE_DEFAULT, ref, &lt_plain_us);
    if (has_bias) lt_run(CUBLASLT_EPILOGUE_BIAS, ref, &lt_us); // pre-activation
    float lt_epi_us = lt_plain_us;
    if (has_bias && ACT == 1u) lt_run(CUBLASLT_EPILOGUE_RELU_BIAS, want, &lt_epi_us);
    if (has_bias && ACT != 1u) lt_epi_us = lt_us;
    expect<<<1024, 256>>>(ref, gate, want, mn, mode);
    CHECK(cudaDeviceSynchronize());

    launch();
    CHECK(cudaDeviceSynchronize());
    const double err_out = rel_err(out, want, mn);
    const double err_pre = mode == 2 ? rel_err(pre, ref, mn) : 0.0;
    double err_sums = 0.0;
    if (mode == 3) {
        column_sums<<<(n + 255) / 256, 256>>>(want, sums_want, m, n);
        partial_sums<<<(n + 255) / 256, 256>>>(partials, sums_got, tiles_m * (BM / 16), n);
        std::vector<float> summed(n), expected(n);
        CHECK(cudaMemcpy(summed.data(), sums_got, n * 4, cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(expected.data(), sums_want, n * 4, cudaMemcpyDeviceToHost));
        double err = 0, norm = 0;
        for (u32 i = 0; i < n; i++) {
            err += (summed[i] - expected[i]) * (summed[i] - expected[i]);
            norm += expected[i] * expected[i];
        }
        err_sums = std::isnan(err) ? INFINITY : sqrt(err / (norm > 0 ? norm : 1));
    }
    const float us = time_launches(launch, launches)[2];
    const double flops = 2.0 * m * k * n;
    const bool ok = err_out < 1e-2 && err_pre < 1e-2 && err_sums < 1e-2;
    printf("%-22s %5ux%5ux%5u %-5s a%d b%d | hypatia %8.2f us %6.1f TF/s | cublasLt %8.2f us "
           "(plain %8.2f) | lt/hyp %.3f | err %.1e %.1e %.1e %s\n",
           VARIANT, m, k, n, argv[4], A_M_MAJOR, B_K_MAJOR, us, flops / us * 1e-6, lt_epi_us,
           lt_plain_us, lt_epi_us / us, err_out, err_pre, err_sums, ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
}
