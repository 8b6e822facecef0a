// A GPU timeline without Nsight Systems (not on the device machines): a CUPTI injection library
// that records every kernel, memcpy and memset on the GPU clock, and every driver API call on
// the host clock (CUPTI puts both on one timebase), and writes them as CSV when the process
// exits. The driver loads it at cuInit through CUDA_INJECTION64_PATH, so any CUDA program is
// traced unchanged:
//
//   nvcc -O2 -shared -Xcompiler -fPIC -I$CUPTI/include -DKREC=CUpti_ActivityKernel9 ... \
//        tools/device/kernel_timeline.cu -o libtimeline.so -L$CUPTI/lib64 -lcupti
//   CUDA_INJECTION64_PATH=$PWD/libtimeline.so HYPATIA_TIMELINE=t.csv ./bench_train ...
//   python3 tools/device/timeline.py t.csv
//
// (tools/device/device_timeline.sh does both, choosing the record versions the installed CUPTI
// header defines.) Rows: kind,start_ns,end_ns,correlation,name. Kinds: K (kernel), C (memcpy),
// S (memset) on the GPU; A (driver API call, name = the call) on the host.

#include <cupti.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef KREC
#error "define KREC (the newest CUpti_ActivityKernelN) and friends, see device_timeline.sh"
#endif

static FILE* out = nullptr;

#define CHECK(call)                                                                      \
    do {                                                                                 \
        CUptiResult r_ = (call);                                                         \
        if (r_ != CUPTI_SUCCESS) {                                                       \
            const char* s_;                                                              \
            cuptiGetResultString(r_, &s_);                                               \
            fprintf(stderr, "kernel_timeline: %s failed: %s\n", #call, s_);              \
        }                                                                                \
    } while (0)

static void CUPTIAPI requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *size = 16u << 20;
    *buffer = static_cast<uint8_t*>(aligned_alloc(8, *size));
    *max_records = 0;
}

static void CUPTIAPI completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
    CUpti_Activity* record = nullptr;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        case CUPTI_ACTIVITY_KIND_KERNEL: {
            const KREC* k = reinterpret_cast<const KREC*>(record);
            fprintf(out, "K,%llu,%llu,%u,%s\n", (unsigned long long)k->start,
                    (unsigned long long)k->end, k->correlationId, k->name);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const MREC* m = reinterpret_cast<const MREC*>(record);
            fprintf(out, "C,%llu,%llu,%u,memcpy%u/%llu\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->correlationId, (unsigned)m->copyKind,
                    (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const SREC* m = reinterpret_cast<const SREC*>(record);
            fprintf(out, "S,%llu,%llu,%u,memset/%llu\n", (unsigned long long)m->start,
                    (unsigned long long)m->end, m->correlationId, (unsigned long long)m->bytes);
            break;
        }
        case CUPTI_ACTIVITY_KIND_DRIVER: {
            const CUpti_ActivityAPI* a = reinterpret_cast<const CUpti_ActivityAPI*>(record);
            const char* name = "?";
            cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, a->cbid, &name);
            // The calling thread after the name: tools/device/timeline.py matches names by substring.
            fprintf(out, "A,%llu,%llu,%u,%s@%u\n", (unsigned long long)a->start,
                    (unsigned long long)a->end, a->correlationId, name, a->threadId);
            break;
        }
        default:
            break;
        }
    }
    free(buffer);
}

static void finish() {
    CHECK(cuptiActivityFlushAll(1));
    if (out) {
        fclose(out);
        out = nullptr;
    }
}

extern "C" int InitializeInjection(void) {
    const char* path = getenv("HYPATIA_TIMELINE");
    out = fopen(path ? path : "timeline.csv", "w");
    if (!out) {
        perror("kernel_timeline: fopen");
        return 0;
    }
    CHECK(cuptiActivityRegisterCallbacks(requested, completed));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
    CHECK(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER));
    atexit(finish);
    return 1;
}
