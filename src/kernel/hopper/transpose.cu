// dst = srcᵀ for a matrix of 4-byte elements: src [rows, cols] with rows `src_pitch` elements
// apart, dst [cols, rows] with rows `dst_pitch` apart. One 32 × 32 tile per block through
// shared memory (padded a column against bank conflicts), so that both the reads and the
// writes are coalesced. It makes the K-major copies that TF32 wgmma needs (wgmma_linear.cu).

struct Params {
    u32 rows;
    u32 cols;
    u32 src_pitch;
    u32 dst_pitch;
};

extern "C" __global__ void __launch_bounds__(256) hypatia_transpose(
    const u32* __restrict__ src, u32* __restrict__ dst, const __grid_constant__ Params p) {
    __shared__ u32 tile[32][33];
    const u32 tiles_c = (p.cols + 31) / 32;
    const u32 r0 = blockIdx.x / tiles_c * 32;
    const u32 c0 = blockIdx.x % tiles_c * 32;
    const u32 tx = threadIdx.x % 32;
    const u32 ty = threadIdx.x / 32;
#pragma unroll
    for (u32 i = ty; i < 32; i += 8) {
        const u32 r = r0 + i;
        const u32 c = c0 + tx;
        if (r < p.rows && c < p.cols) {
            tile[i][tx] = src[(u64)r * p.src_pitch + c];
        }
    }
    __syncthreads();
#pragma unroll
    for (u32 i = ty; i < 32; i += 8) {
        const u32 c = c0 + i;
        const u32 r = r0 + tx;
        if (c < p.cols && r < p.rows) {
            dst[(u64)c * p.dst_pitch + r] = tile[tx][i];
        }
    }
}
