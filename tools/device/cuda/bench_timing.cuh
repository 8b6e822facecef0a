// Shared by the standalone kernel benchmarks (tools/device/chain_bench.cu, tools/device/wgmma_bench.cu):
// error checks and GPU time per launch from CUDA events.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <vector>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

// GPU µs per launch of 5 batches of `launches` back-to-back launches (after 5 warm-up
// launches), sorted: [2] is the median, [0] the best.
template <typename F>
static std::vector<float> time_launches(F launch, int launches) {
    for (int i = 0; i < 5; i++) launch();
    CHECK(cudaDeviceSynchronize());
    cudaEvent_t a, z;
    CHECK(cudaEventCreate(&a)); CHECK(cudaEventCreate(&z));
    std::vector<float> per;
    for (int rep = 0; rep < 5; rep++) {
        CHECK(cudaEventRecord(a));
        for (int i = 0; i < launches; i++) launch();
        CHECK(cudaEventRecord(z));
        CHECK(cudaEventSynchronize(z));
        float ms;
        CHECK(cudaEventElapsedTime(&ms, a, z));
        per.push_back(ms * 1000.0f / launches);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaEventDestroy(a)); CHECK(cudaEventDestroy(z));
    std::sort(per.begin(), per.end());
    return per;
}
