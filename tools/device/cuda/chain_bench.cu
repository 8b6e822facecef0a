// Standalone timing of the grid-wide MLP chain kernel (src/kernel/chain/grid_chain.cu), without
// Burn or CubeCL: GPU time per launch from CUDA events over back-to-back launches, and a check
// against a float reference that rounds the hidden activations to bf16 as the kernel does.
// Built on the device by tools/device/device_chain_bench.sh, one binary per (rows, kernel file):
//   ./cuda_source chain --rows 8 > k.cu    (--mma --rows 16|32: the tensor-core items)
//   nvcc -O3 -std=c++17 -arch=sm_90a -DKERNEL='"k.cu"' tools/device/chain_bench.cu -o chain_bench
// Usage: chain_bench M [launches]   (the MLP is 784 -> 512 -> 512 -> 10, ReLU, ReLU, none)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <algorithm>
#include <vector>
#include "bench_timing.cuh"
// KERNEL: the kernel as the crate compiles it, written by `cuda_source chain` (784 -> 512 ->
// 512 -> 10 bf16 by default).
#include KERNEL


static float bf(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

int main(int argc, char** argv) {
    const u32 m = argc > 1 ? atoi(argv[1]) : 1;
    const int launches = argc > 2 ? atoi(argv[2]) : 2000;
    const u32 widths[4] = {784, 512, 512, 10};
    srand(7);
    auto rnd = [](float scale) { return bf(((rand() % 2001) - 1000) / 1000.0f * scale); };
    std::vector<float> x(m * widths[0]), w[3], b[3];
    for (auto& v : x) v = rnd(1.0f);
    for (int l = 0; l < 3; l++) {
        w[l].resize(widths[l] * widths[l + 1]);
        b[l].resize(widths[l + 1]);
        for (auto& v : w[l]) v = rnd(1.0f / sqrtf((float)widths[l]));
        for (auto& v : b[l]) v = rnd(0.1f);
    }
    auto upload = [](const std::vector<float>& h) {
        std::vector<__nv_bfloat16> t(h.size());
        for (size_t i = 0; i < h.size(); i++) t[i] = __float2bfloat16_rn(h[i]);
        __nv_bfloat16* d;
        CHECK(cudaMalloc(&d, t.size() * 2));
        CHECK(cudaMemcpy(d, t.data(), t.size() * 2, cudaMemcpyHostToDevice));
        return d;
    };
    __nv_bfloat16 *dx = upload(x), *dw[3], *db[3], *out, *scratch;
    for (int l = 0; l < 3; l++) { dw[l] = upload(w[l]); db[l] = upload(b[l]); }
    CHECK(cudaMalloc(&out, m * widths[3] * 2));
    CHECK(cudaMemset(out, 0xff, m * widths[3] * 2)); // NaN poison
    CHECK(cudaMalloc(&scratch, 2 * m * 512 * 2));
    u32* counter;
    CHECK(cudaMalloc(&counter, 64));
    CHECK(cudaMemset(counter, 0, 64));

    Params p{};
    p.m = m; p.x_row = widths[0]; p.x_col = 1; p.hidden = 512;
    for (int l = 0; l < 3; l++) { p.k[l] = widths[l]; p.n[l] = widths[l + 1]; p.w_row[l] = widths[l + 1]; }
    const u32 per_layer[3] = {layer_items<VEC0>(m, widths[1]), layer_items<VEC1>(m, widths[2]),
                              layer_items<VEC2>(m, widths[3])};
    u32 items = 0;
    for (int l = 0; l < 3; l++) items = per_layer[l] > items ? per_layer[l] : items;
    int sms;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const u32 blocks = items < (u32)sms ? items : sms;
#if MMA
    const int smem_bytes = MMA_X_BYTES + MMA_W_BYTES + WARPS * ROWS * 8 * 4;
    CHECK(cudaFuncSetAttribute(hypatia_grid_chain, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
#else
    const int smem_bytes = 0;
#endif
    auto launch = [&]() {
        hypatia_grid_chain<<<blocks, THREADS, smem_bytes>>>(dx, dw[0], db[0], dw[1], db[1], dw[2], db[2],
                                                dw[0], db[0], out, scratch, counter, p);
    };
    for (int i = 0; i < 50; i++) launch();
    CHECK(cudaDeviceSynchronize());

    // Reference: hidden layers rounded to bf16.
    std::vector<float> in = x, h;
    for (int l = 0; l < 3; l++) {
        const u32 k = widths[l], n = widths[l + 1];
        h.assign(m * n, 0.0f);
        for (u32 r = 0; r < m; r++)
            for (u32 c = 0; c < n; c++) {
                double s = b[l][c];
                for (u32 j = 0; j < k; j++) s += (double)in[r * k + j] * w[l][j * n + c];
                float v = (float)s;
                if (l < 2) v = v <= 0.0f ? 0.0f : v;
                h[r * n + c] = bf(v);
            }
        in = h;
    }
    std::vector<__nv_bfloat16> got(m * widths[3]);
    CHECK(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost));
    double err = 0, norm = 0;
    for (size_t i = 0; i < got.size(); i++) {
        double d = __bfloat162float(got[i]) - in[i];
        err += d * d; norm += (double)in[i] * in[i];
    }
    const double rel = sqrt(err / (norm > 0 ? norm : 1));

    const std::vector<float> per = time_launches(launch, launches);
    printf("%-24s mma=%d m=%-3u rows=%d blocks=%-3u us/launch=%7.2f (min %7.2f) rel_err=%.2e %s\n",
           KERNEL, MMA, m, ROWS, blocks, per[2], per[0], rel, rel < 1e-2 ? "ok" : "WRONG");
    return 0;
}
