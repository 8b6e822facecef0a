// Hopper's asynchronous machinery as inline PTX, for wgmma_linear.cu: shared-memory addresses,
// mbarriers, TMA loads and stores, 2-element shared-memory accesses, wgmma descriptors and
// fences. The preamble (`WgmmaSource`) puts it after the configuration's #defines (ELEM2, ESIZE)
// and before the kernel.

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

__device__ __forceinline__ void tma_store_2d(const CUtensorMap* map, u32 src, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
        :: "l"((u64)map), "r"(src), "r"(c0), "r"(c1) : "memory");
}

// Two adjacent elements to / from shared memory (4 bytes of 16-bit pairs, 8 of f32 pairs).
__device__ __forceinline__ void st_pair(u32 addr, ELEM2 v) {
#if ESIZE == 2
    asm volatile("st.shared.b32 [%0], %1;" :: "r"(addr), "r"(*reinterpret_cast<u32*>(&v))
                 : "memory");
#else
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(v.x), "f"(v.y)
                 : "memory");
#endif
}

__device__ __forceinline__ ELEM2 ld_pair(u32 addr) {
#if ESIZE == 2
    u32 bits;
    asm volatile("ld.shared.b32 %0, [%1];" : "=r"(bits) : "r"(addr) : "memory");
    return *reinterpret_cast<ELEM2*>(&bits);
#else
    float2 v;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr)
                 : "memory");
    return v;
#endif
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
