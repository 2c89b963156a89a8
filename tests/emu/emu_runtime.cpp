/*
 * tests/emu/emu_runtime.cpp - the CUDA runtime of the emulator (tests/emu/emu_cuda.h
 * says what it is for): device memory, streams, events, errors, device queries.
 *
 * Calls act at once (the "device" is host memory, streams and events are
 * tokens, checked for validity), except on a stream being captured into a
 * graph (below). cudaMalloc'd blocks carry guard zones from
 * their exact end (checked after every launch, at cudaFree, and against
 * runtime copies); a build with -fsanitize=address allocates exact sizes
 * instead, for the sanitizer to see. The allocations also bound the kernels'
 * global loads (__ldg, cp.async: emu_check_global). The launches themselves
 * are emu_sched.cpp's; they record their errors here (last_error).
 *
 * Stream capture and graphs (cudaStreamBeginCapture .. cudaStreamEndCapture,
 * cudaGraphInstantiate, cudaGraphLaunch), for real: what is queued on the
 * capturing stream - kernel launches (their arguments copied when queued, as
 * a kernel node's parameters are), cudaMemcpyAsync / cudaMemcpy2DAsync /
 * cudaMemsetAsync, cublasLtMatmul (its descriptors and scalars copied) - is
 * recorded instead of run, and every launch of the instantiated graph runs
 * the nodes in order; a copy reads its source when the node runs, so a host
 * buffer rewritten between launches is read anew, as on a GPU. What the
 * runtime refuses during a capture is refused here too, with its error, and
 * invalidates the capture (cudaStreamEndCapture then fails): allocating or
 * freeing memory, synchronous copies and sets, waiting for a stream, an
 * event or the device, queueing on the legacy stream, and a captured copy
 * from or to pageable host memory (it would have to wait for the stream).
 * Streams forked into the capture by an event are captured too, and must be
 * joined back (the capture section below). One capture at a time; graphs
 * inside graphs are not emulated.
 */
#include "tests/emu/emu_cuda.h" /* first: it defines the CUDA keywords before the CUDA headers do */

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <set>
#include <vector>

#include "tests/emu/emu_internal.h"

using namespace emu;

/* ---- device allocations --------------------------------------------------------------- */
namespace {

/* Each block: [guard][bytes][guard from the exact end to the 256-byte rounding + GUARD] */
enum { GUARD = 256 };
const unsigned char GUARD_BYTE = 0xC3, FRESH_BYTE = 0xA5;
struct Alloc {
    size_t bytes, padded;
    bool host;
    int ipc_fd;     /* >= 0: exported (cudaIpcGetMemHandle): the block's pages are this memfd's */
    size_t total;   /* the block's pages from its guard: [user - GUARD, + total) */
    bool mapped;    /* a peer's block mapped by cudaIpcOpenMemHandle (munmap, not free) */
};
std::map<uintptr_t, Alloc> g_allocs; /* by start address */
std::set<cudaStream_t> g_streams;
std::set<cudaEvent_t> g_events;
std::map<const void*, int> g_smem_limit; /* dynamic shared memory per kernel, as cudaFuncSetAttribute raised it */

/* Streams and events are opaque handles here (everything runs in order): a
 * distinct address each, registered so that a stale or foreign one is caught. */
template <typename H>
static H handle_new(std::set<H>& live) {
    H h = (H) new char[16];
    live.insert(h);
    return h;
}
template <typename H>
static void handle_free(std::set<H>& live, H h, const char* what) {
    if (!live.erase(h)) emu_fail("%s of a handle that its create call did not return", what);
    delete[] (char*)h;
}

#ifdef __SANITIZE_ADDRESS__
const bool kGuards = false; /* exact-size blocks: AddressSanitizer sees every stray access */
#else
const bool kGuards = true;
#endif

bool guards_intact(uintptr_t p, const Alloc& a) {
    if (!kGuards) return true;
    const unsigned char* q = (const unsigned char*)p;
    for (size_t i = 0; i < GUARD; i++)
        if (q[-(ptrdiff_t)GUARD + (ptrdiff_t)i] != GUARD_BYTE) return false;
    for (size_t i = a.bytes; i < a.padded + GUARD; i++)
        if (q[i] != GUARD_BYTE) return false;
    return true;
}

/* the allocation holding [p, p + n), or null when p is in none (host memory) */
const Alloc* find_alloc(const void* p, uintptr_t* start) {
    const uintptr_t q = (uintptr_t)p;
    auto it = g_allocs.upper_bound(q);
    if (it == g_allocs.begin()) return nullptr;
    --it;
    if (q >= it->first + it->second.padded + (kGuards ? GUARD : 0)) return nullptr;
    *start = it->first;
    return &it->second;
}

/* runtime copies and sets: a range that starts in a device block must end in it */
void check_runtime_range(const void* p, size_t n, const char* what) {
    uintptr_t s;
    const Alloc* a = find_alloc(p, &s);
    if (a && (uintptr_t)p + n > s + a->bytes)
        emu_fail("%s of %zu bytes at offset %zu overruns its %zu-byte block", what, n, (size_t)((uintptr_t)p - s),
                 a->bytes);
}

/* Blocks start on a page and span whole pages (with guards), so that an
 * exported block's pages can be replaced in place by shared ones. */
const size_t PAGE = 4096;

cudaError_t emu_alloc(void** p, size_t bytes, bool host) {
    const size_t padded = (bytes + 255) / 256 * 256;
    size_t total = padded + (kGuards ? 2 * GUARD : 0);
    if (kGuards) total = (total + PAGE - 1) / PAGE * PAGE;
    unsigned char* base = nullptr;
    if (posix_memalign((void**)&base, kGuards ? PAGE : 256, total ? total : 1) != 0) return cudaErrorMemoryAllocation;
    unsigned char* user = base + (kGuards ? GUARD : 0);
    if (kGuards) memset(base, GUARD_BYTE, total);
    memset(user, FRESH_BYTE, bytes); /* fresh memory is not zero: whoever needs zeros must set them */
    *p = user;
    g_allocs[(uintptr_t)user] = Alloc{bytes, kGuards ? padded : bytes, host, -1, total, false};
    return cudaSuccess;
}

/* an exported block goes back to private pages before the allocator gets it */
void unshare(uintptr_t user, Alloc& a) {
    if (a.ipc_fd < 0) return;
    void* base = (void*)(user - GUARD);
    void* keep = malloc(a.total);
    if (!keep) emu_fail("out of memory un-sharing an exported block");
    memcpy(keep, base, a.total);
    if (mmap(base, a.total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
        emu_fail("cudaFree: cannot remap an exported block (%s)", strerror(errno));
    memcpy(base, keep, a.total);
    free(keep);
    close(a.ipc_fd);
    a.ipc_fd = -1;
}

cudaError_t emu_free(void* p, bool host) {
    if (!p) return cudaSuccess;
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end() || it->second.host != host)
        emu_fail(host ? "cudaFreeHost of a pointer cudaMallocHost did not return"
                      : "cudaFree of a pointer cudaMalloc did not return");
    if (it->second.mapped) emu_fail("cudaFree of a peer's block (cudaIpcOpenMemHandle): close it with cudaIpcCloseMemHandle");
    if (!guards_intact(it->first, it->second))
        emu_fail("cudaFree: a write outside the %zu-byte block at %p (guard zone damaged)", it->second.bytes, p);
    unshare(it->first, it->second);
    g_allocs.erase(it);
    free((unsigned char*)p - (kGuards ? GUARD : 0));
    return cudaSuccess;
}

void check_event(cudaEvent_t e, const char* what) {
    if (!g_events.count(e)) emu_fail("%s of an event that cudaEventCreate did not return (or that was destroyed)", what);
}

/* ---- stream capture ----
 * The capture starts on one stream (g_capture, the origin) and, as in CUDA,
 * takes in every stream that waits for an event recorded in it (a fork);
 * each such stream must be joined back (an event recorded after its last
 * operation, waited for by a stream of the capture) before the capture ends,
 * or cudaStreamEndCapture fails with cudaErrorStreamCaptureUnjoined. A stream
 * of the capture may wait for an event recorded outside it only with
 * cudaEventWaitExternal (cudaErrorStreamCaptureIsolation otherwise). The
 * emulator runs everything in the order it is queued, so the graph's nodes
 * are the capture's operations in that order: one valid order of the DAG. */
struct CapStream {
    long ops = 0;    /* operations queued on it in the capture (nodes and waits) */
    long joined = 0; /* how many of them a wait of another captured stream covers */
};
struct CapEvent {
    cudaStream_t stream; /* the captured stream it was recorded on */
    long ops;            /* that stream's operations then */
};
cudaStream_t g_capture = nullptr;   /* the stream the capture began on, or none */
bool g_capture_bad = false;         /* a refused call invalidated the capture */
cudaGraph_t g_recording = nullptr;  /* what the capture has recorded so far */
std::map<cudaStream_t, CapStream> g_cap_streams; /* the streams in the capture, the origin too */
std::map<cudaEvent_t, CapEvent> g_cap_events;    /* events whose last record was in the capture */
std::set<cudaEvent_t> g_graph_only;              /* ... and not cudaEventRecordExternal: no record outside a graph */

bool is_legacy(cudaStream_t s) { return s == 0 || s == cudaStreamLegacy; }
bool in_capture(cudaStream_t s) { return g_capture && g_cap_streams.count(s); }

/* a call the runtime refuses while this thread captures (it could allocate or wait for the device) */
cudaError_t refused_in_capture(const char* what) {
    if (!g_capture) return cudaSuccess;
    fprintf(stderr, "emu: %s during a stream capture: refused (cudaErrorStreamCaptureUnsupported), the capture is "
            "invalidated\n", what);
    g_capture_bad = true;
    return cudaErrorStreamCaptureUnsupported;
}

/* host memory that is neither a device block nor pinned (cudaMallocHost) */
bool pageable(const void* p) {
    uintptr_t s;
    return find_alloc(p, &s) == nullptr;
}

} /* namespace */

/* the graph objects of the runtime's opaque handles: nodes in queue order */
struct CUgraph_st {
    std::vector<std::function<void()>> nodes;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> nodes;
};
namespace {
std::set<cudaGraph_t> g_graphs;
std::set<cudaGraphExec_t> g_execs;
} /* namespace */

cudaError_t emu_enqueue(cudaStream_t stream, const char* what, std::function<void()> node) {
    if (in_capture(stream)) {
        g_recording->nodes.push_back(std::move(node));
        g_cap_streams[stream].ops++;
        return cudaSuccess;
    }
    if (g_capture && is_legacy(stream)) { /* the capturing stream is a blocking one: an implicit dependency */
        fprintf(stderr, "emu: %s on the legacy stream during a stream capture: refused, the capture is invalidated\n",
                what);
        g_capture_bad = true;
        return cudaErrorStreamCaptureImplicit;
    }
    node();
    return cudaSuccess;
}

/* the same for C callers (tests/emu/nccl_emu.c): fn(arg) as the node */
extern "C" cudaError_t emu_enqueue_host(cudaStream_t stream, const char* what, void (*fn)(void*), void* arg) {
    return emu_enqueue(stream, what, [fn, arg]() { fn(arg); });
}

namespace emu {

cudaError_t last_error = cudaSuccess;

void check_all_guards(const char* when) {
    for (const auto& kv : g_allocs)
        if (!guards_intact(kv.first, kv.second))
            emu_fail("%s: a write outside the %zu-byte block at %p (guard zone damaged)", when, kv.second.bytes,
                     (void*)kv.first);
}

void check_stream(cudaStream_t s, const char* what) {
    if (s == 0 || s == cudaStreamLegacy || s == cudaStreamPerThread || g_streams.count(s)) return;
    emu_fail("%s on a stream that cudaStreamCreate did not return (or that was destroyed)", what);
}

int kernel_smem_limit(const void* fn) {
    auto it = g_smem_limit.find(fn);
    return it != g_smem_limit.end() ? it->second : 48 * 1024; /* 48 KiB unless cudaFuncSetAttribute raised it */
}

} /* namespace emu */

/* a kernel's global load (__ldg, a cp.async source): aligned, and inside one device block */
void emu_check_global(const void* p, size_t bytes, size_t align, const char* what) {
    if ((uintptr_t)p % align) emu_fail("%s of %zu bytes at %p: not %zu-byte aligned", what, bytes, p, align);
    uintptr_t s;
    const Alloc* a = find_alloc(p, &s);
    if (!a) emu_fail("%s of %zu bytes at %p: not in any cudaMalloc'd block", what, bytes, p);
    if ((uintptr_t)p + bytes > s + a->bytes)
        emu_fail("%s of %zu bytes at offset %zu of a %zu-byte block: out of bounds", what, bytes,
                 (size_t)((uintptr_t)p - s), a->bytes);
}

/* ---- CUDA runtime ---------------------------------------------------------------------------- */
extern "C" {

cudaError_t CUDARTAPI cudaGetDeviceCount(int* count) {
    *count = 1;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t CUDARTAPI cudaGetDevice(int* device) {
    *device = 0;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    memset(prop, 0, sizeof(*prop));
    strcpy(prop->name, "CPU emulator (tests/emu)");
    prop->major = 9;
    prop->minor = 0;
    prop->multiProcessorCount = EMU_SMS;
    prop->warpSize = 32;
    prop->maxThreadsPerBlock = MAX_THREADS;
    prop->sharedMemPerBlock = 48 * 1024;
    prop->sharedMemPerBlockOptin = 227 * 1024;
    return cudaSuccess;
}
/* the driver's entry points: only the tensor-map encoder (common/cuda_tma.cuh) */
cudaError_t CUDARTAPI cudaGetDriverEntryPointByVersion(const char* symbol, void** funcPtr, unsigned int cudaVersion,
                                                       unsigned long long flags,
                                                       cudaDriverEntryPointQueryResult* status) {
    (void)cudaVersion, (void)flags;
    const bool known = symbol && strcmp(symbol, "cuTensorMapEncodeTiled") == 0;
    *funcPtr = known ? tma_encode_entry() : nullptr;
    if (status) *status = known ? cudaDriverEntryPointSuccess : cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    switch (attr) {
        case cudaDevAttrMultiProcessorCount: *value = EMU_SMS; break;
        case cudaDevAttrMaxThreadsPerBlock: *value = MAX_THREADS; break;
        case cudaDevAttrWarpSize: *value = 32; break;
        case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = 227 * 1024; break;
        default: emu_fail("cudaDeviceGetAttribute: attribute %d not emulated", (int)attr);
    }
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, const void* func,
                                                                             int blockSize, size_t dynamicSMemSize,
                                                                             unsigned int flags) {
    (void)flags;
    if (!func || blockSize < 1 || blockSize > MAX_THREADS || dynamicSMemSize > SMEM_BYTES) return cudaErrorInvalidValue;
    *numBlocks = EMU_OCC;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, const void* func, int blockSize,
                                                                    size_t dynamicSMemSize) {
    return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}
cudaError_t CUDARTAPI cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || value > 227 * 1024) return cudaErrorInvalidValue;
        g_smem_limit[func] = value;
    }
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGetLastError(void) {
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}
cudaError_t CUDARTAPI cudaPeekAtLastError(void) { return last_error; }
const char* CUDARTAPI cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
        case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
        case cudaErrorStreamCaptureUnjoined: return "capture sequence contains a fork that was not joined to the primary stream";
        case cudaErrorStreamCaptureIsolation: return "dependency created on uncaptured work in another stream";
        default: return "emulated CUDA error";
    }
}
const char* CUDARTAPI cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
        case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
        case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
        case cudaErrorStreamCaptureIsolation: return "cudaErrorStreamCaptureIsolation";
        default: return "cudaErrorUnknown";
    }
}

cudaError_t CUDARTAPI cudaMalloc(void** p, size_t bytes) {
    if (cudaError_t e = refused_in_capture("cudaMalloc")) return e;
    return emu_alloc(p, bytes, false);
}
cudaError_t CUDARTAPI cudaFree(void* p) {
    if (cudaError_t e = refused_in_capture("cudaFree")) return e;
    return emu_free(p, false);
}
cudaError_t CUDARTAPI cudaMallocHost(void** p, size_t bytes) {
    if (cudaError_t e = refused_in_capture("cudaMallocHost")) return e;
    return emu_alloc(p, bytes, true);
}
cudaError_t CUDARTAPI cudaFreeHost(void* p) {
    if (cudaError_t e = refused_in_capture("cudaFreeHost")) return e;
    return emu_free(p, true);
}
cudaError_t CUDARTAPI cudaMemGetInfo(size_t* free_b, size_t* total_b) {
    *free_b = *total_b = (size_t)1 << 34;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemset(void* p, int v, size_t n) {
    if (cudaError_t e = refused_in_capture("cudaMemset")) return e;
    check_runtime_range(p, n, "cudaMemset");
    memset(p, v, n);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t s) {
    check_stream(s, "cudaMemsetAsync");
    check_runtime_range(p, n, "cudaMemsetAsync");
    return emu_enqueue(s, "cudaMemsetAsync", [p, v, n]() { memset(p, v, n); });
}
cudaError_t CUDARTAPI cudaMemcpy(void* d, const void* s, size_t n, enum cudaMemcpyKind k) {
    (void)k;
    if (cudaError_t e = refused_in_capture("cudaMemcpy")) return e;
    check_runtime_range(d, n, "cudaMemcpy destination");
    check_runtime_range(s, n, "cudaMemcpy source");
    memmove(d, s, n);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaMemcpyAsync(void* d, const void* s, size_t n, enum cudaMemcpyKind k, cudaStream_t st) {
    (void)k;
    check_stream(st, "cudaMemcpyAsync");
    check_runtime_range(d, n, "cudaMemcpyAsync destination");
    check_runtime_range(s, n, "cudaMemcpyAsync source");
    if (g_capture && st == g_capture && n && (pageable(d) || pageable(s)))
        return refused_in_capture("cudaMemcpyAsync from or to pageable host memory");
    return emu_enqueue(st, "cudaMemcpyAsync", [d, s, n]() { memmove(d, s, n); });
}
cudaError_t CUDARTAPI cudaMemcpy2DAsync(void* d, size_t dpitch, const void* s, size_t spitch, size_t width,
                                        size_t height, enum cudaMemcpyKind k, cudaStream_t st) {
    (void)k;
    check_stream(st, "cudaMemcpy2DAsync");
    if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
    if (height) {
        check_runtime_range(d, dpitch * (height - 1) + width, "cudaMemcpy2DAsync destination");
        check_runtime_range(s, spitch * (height - 1) + width, "cudaMemcpy2DAsync source");
    }
    if (g_capture && st == g_capture && height && (pageable(d) || pageable(s)))
        return refused_in_capture("cudaMemcpy2DAsync from or to pageable host memory");
    return emu_enqueue(st, "cudaMemcpy2DAsync", [=]() {
        for (size_t r = 0; r < height; r++) memmove((char*)d + r * dpitch, (const char*)s + r * spitch, width);
    });
}

cudaError_t CUDARTAPI cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
    (void)flags;
    *s = handle_new(g_streams);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, 0); }
cudaError_t CUDARTAPI cudaStreamDestroy(cudaStream_t s) {
    handle_free(g_streams, s, "cudaStreamDestroy");
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamSynchronize(cudaStream_t s) {
    check_stream(s, "cudaStreamSynchronize");
    return refused_in_capture("cudaStreamSynchronize");
}
cudaError_t CUDARTAPI cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags) {
    check_stream(s, "cudaStreamWaitEvent");
    check_event(e, "cudaStreamWaitEvent");
    if (!g_capture) return cudaSuccess;
    auto ev = g_cap_events.find(e);
    if (ev == g_cap_events.end()) { /* recorded outside the capture (or never) */
        if (!in_capture(s) || (flags & cudaEventWaitExternal)) return cudaSuccess;
        fprintf(stderr, "emu: cudaStreamWaitEvent of a captured stream on an event recorded outside the capture, "
                "without cudaEventWaitExternal: refused (cudaErrorStreamCaptureIsolation), the capture is invalidated\n");
        g_capture_bad = true;
        return cudaErrorStreamCaptureIsolation;
    }
    CapStream& from = g_cap_streams[ev->second.stream];
    if (ev->second.ops > from.joined) from.joined = ev->second.ops;
    g_cap_streams[s].ops++; /* joins s to the capture if it was not in it: a fork */
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceSynchronize(void) { return refused_in_capture("cudaDeviceSynchronize"); }

cudaError_t CUDARTAPI cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
    (void)flags;
    *e = handle_new(g_events);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }
cudaError_t CUDARTAPI cudaEventDestroy(cudaEvent_t e) {
    handle_free(g_events, e, "cudaEventDestroy");
    g_cap_events.erase(e);
    g_graph_only.erase(e);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned int flags) {
    check_event(e, "cudaEventRecord");
    check_stream(s, "cudaEventRecord");
    if (!in_capture(s)) {
        if (flags & cudaEventRecordExternal) return cudaErrorInvalidValue; /* only inside a capture */
        g_cap_events.erase(e);
        g_graph_only.erase(e);
        return cudaSuccess;
    }
    CapStream& cs = g_cap_streams[s];
    if (flags & cudaEventRecordExternal) { /* a node: the replay records it */
        g_recording->nodes.push_back([]() {});
        cs.ops++;
        g_graph_only.erase(e);
    } else {
        g_graph_only.insert(e);
    }
    g_cap_events[e] = CapEvent{s, cs.ops};
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventRecord(cudaEvent_t e, cudaStream_t s) { return cudaEventRecordWithFlags(e, s, 0); }
/* an event recorded in a capture without cudaEventRecordExternal stands for
 * no work outside it: asking it for completion or time is a bug here */
static void check_recorded_outside(cudaEvent_t e, const char* what) {
    if (g_graph_only.count(e))
        emu_fail("%s of an event last recorded inside a stream capture (a dependency of the graph, not a record "
                 "of the device's progress; cudaEventRecordWithFlags(..., cudaEventRecordExternal) makes one)", what);
}
cudaError_t CUDARTAPI cudaEventQuery(cudaEvent_t e) {
    check_event(e, "cudaEventQuery");
    if (cudaError_t r = refused_in_capture("cudaEventQuery")) return r;
    check_recorded_outside(e, "cudaEventQuery");
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaEventSynchronize(cudaEvent_t e) {
    check_event(e, "cudaEventSynchronize");
    if (cudaError_t r = refused_in_capture("cudaEventSynchronize")) return r;
    check_recorded_outside(e, "cudaEventSynchronize");
    return cudaSuccess;
}

/* ---- stream capture and graphs (the header comment says what is emulated) ---- */
cudaError_t CUDARTAPI cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    (void)mode; /* one thread: every mode refuses the same calls of it */
    check_stream(s, "cudaStreamBeginCapture");
    if (is_legacy(s)) return cudaErrorStreamCaptureUnsupported;
    if (g_capture) emu_fail("cudaStreamBeginCapture while another capture is active: not emulated");
    g_capture = s;
    g_capture_bad = false;
    g_recording = new CUgraph_st();
    g_cap_streams.clear();
    g_cap_streams[s] = CapStream();
    g_cap_events.clear();
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph) {
    check_stream(s, "cudaStreamEndCapture");
    if (!g_capture || s != g_capture) return cudaErrorIllegalState;
    g_capture = nullptr;
    bool unjoined = false;
    for (const auto& kv : g_cap_streams)
        if (kv.first != s && kv.second.joined < kv.second.ops) {
            fprintf(stderr, "emu: cudaStreamEndCapture: a stream forked into the capture was not joined back (%ld of "
                    "its %ld operations waited for by the capture's other streams): cudaErrorStreamCaptureUnjoined\n",
                    kv.second.joined, kv.second.ops);
            unjoined = true;
        }
    g_cap_streams.clear();
    g_cap_events.clear(); /* (g_graph_only keeps its events: they still have no record outside the graph) */
    if (unjoined) {
        delete g_recording;
        g_recording = nullptr;
        *graph = nullptr;
        return cudaErrorStreamCaptureUnjoined;
    }
    if (g_capture_bad) {
        delete g_recording;
        g_recording = nullptr;
        *graph = nullptr;
        return cudaErrorStreamCaptureInvalidated;
    }
    *graph = g_recording;
    g_graphs.insert(g_recording);
    g_recording = nullptr;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus* status) {
    check_stream(s, "cudaStreamIsCapturing");
    *status = !in_capture(s)               ? cudaStreamCaptureStatusNone
              : g_capture_bad              ? cudaStreamCaptureStatusInvalidated
                                           : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* numNodes) {
    if (!g_graphs.count(graph)) emu_fail("cudaGraphGetNodes of a graph that cudaStreamEndCapture did not return");
    if (nodes) emu_fail("cudaGraphGetNodes: only the count (nodes = NULL) is emulated");
    *numNodes = graph->nodes.size();
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
    (void)flags;
    if (!g_graphs.count(graph)) emu_fail("cudaGraphInstantiate of a graph that cudaStreamEndCapture did not return");
    if (cudaError_t e = refused_in_capture("cudaGraphInstantiate")) return e;
    *exec = new CUgraphExec_st{graph->nodes};
    g_execs.insert(*exec);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s) {
    if (!g_execs.count(exec)) emu_fail("cudaGraphLaunch of a graph that cudaGraphInstantiate did not return");
    check_stream(s, "cudaGraphLaunch");
    if (in_capture(s)) emu_fail("cudaGraphLaunch into a stream being captured (a child graph) is not emulated");
    return emu_enqueue(s, "cudaGraphLaunch", [exec]() {
        for (auto& node : exec->nodes) node();
    });
}
cudaError_t CUDARTAPI cudaGraphExecDestroy(cudaGraphExec_t exec) {
    if (!g_execs.erase(exec)) emu_fail("cudaGraphExecDestroy of a graph that cudaGraphInstantiate did not return");
    delete exec;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaGraphDestroy(cudaGraph_t graph) {
    if (!g_graphs.erase(graph)) emu_fail("cudaGraphDestroy of a graph that cudaStreamEndCapture did not return");
    delete graph;
    return cudaSuccess;
}
/* ---- CUDA IPC between the MPI ranks of one machine --------------------------------------
 * Exporting a block moves its pages into a memfd (in place: MAP_FIXED over
 * the same addresses, contents kept); the handle names the exporter's pid and
 * descriptor, and a peer maps the same pages through /proc/<pid>/fd/<fd>. So
 * the peers' kernels read the very bytes the exporter's kernels wrote, as on
 * a GPU. Everything runs when it is queued, so IPC events need no state: a
 * peer that has seen the exporter's host token sees its work done. */
struct EmuIpcHandle {
    unsigned magic;
    int pid, fd;
    size_t total, bytes;
};
static_assert(sizeof(EmuIpcHandle) <= sizeof(cudaIpcMemHandle_t), "the handle fits CUDA's");
const unsigned IPC_MAGIC = 0x1bc0e3a1u;

cudaError_t CUDARTAPI cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* devPtr) {
    if (!kGuards) emu_fail("cudaIpcGetMemHandle is not emulated in the sanitizer build (exact-size blocks)");
    auto it = g_allocs.find((uintptr_t)devPtr);
    if (it == g_allocs.end() || it->second.host || it->second.mapped)
        emu_fail("cudaIpcGetMemHandle of a pointer that is not the start of a cudaMalloc'd block");
    Alloc& a = it->second;
    if (a.ipc_fd < 0) {
        void* base = (void*)(it->first - GUARD);
        const int fd = memfd_create("emu-cuda-ipc", 0);
        if (fd < 0 || ftruncate(fd, (off_t)a.total) != 0) emu_fail("cudaIpcGetMemHandle: memfd (%s)", strerror(errno));
        if (pwrite(fd, base, a.total, 0) != (ssize_t)a.total) emu_fail("cudaIpcGetMemHandle: writing the memfd");
        if (mmap(base, a.total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED)
            emu_fail("cudaIpcGetMemHandle: mapping the memfd (%s)", strerror(errno));
        a.ipc_fd = fd;
    }
    EmuIpcHandle h = {IPC_MAGIC, (int)getpid(), a.ipc_fd, a.total, a.bytes};
    memset(handle, 0, sizeof(*handle));
    memcpy(handle, &h, sizeof(h));
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaIpcOpenMemHandle(void** devPtr, cudaIpcMemHandle_t handle, unsigned int flags) {
    (void)flags;
    EmuIpcHandle h;
    memcpy(&h, &handle, sizeof(h));
    if (h.magic != IPC_MAGIC) emu_fail("cudaIpcOpenMemHandle of a handle cudaIpcGetMemHandle did not make");
    if (h.pid == (int)getpid()) return cudaErrorInvalidValue; /* as CUDA: not in the exporting process */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", h.pid, h.fd);
    const int fd = open(path, O_RDWR);
    if (fd < 0) emu_fail("cudaIpcOpenMemHandle: cannot open %s (%s)", path, strerror(errno));
    void* base = mmap(nullptr, h.total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (base == MAP_FAILED) emu_fail("cudaIpcOpenMemHandle: cannot map %s (%s)", path, strerror(errno));
    unsigned char* user = (unsigned char*)base + GUARD;
    g_allocs[(uintptr_t)user] = Alloc{h.bytes, (h.bytes + 255) / 256 * 256, false, -1, h.total, true};
    *devPtr = user;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaIpcCloseMemHandle(void* devPtr) {
    auto it = g_allocs.find((uintptr_t)devPtr);
    if (it == g_allocs.end() || !it->second.mapped) emu_fail("cudaIpcCloseMemHandle of a pointer cudaIpcOpenMemHandle did not return");
    munmap((void*)(it->first - GUARD), it->second.total);
    g_allocs.erase(it);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaIpcGetEventHandle(cudaIpcEventHandle_t* handle, cudaEvent_t e) {
    check_event(e, "cudaIpcGetEventHandle");
    memset(handle, 0, sizeof(*handle));
    memcpy(handle, &IPC_MAGIC, sizeof(IPC_MAGIC));
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaIpcOpenEventHandle(cudaEvent_t* e, cudaIpcEventHandle_t handle) {
    if (memcmp(&handle, &IPC_MAGIC, sizeof(IPC_MAGIC))) emu_fail("cudaIpcOpenEventHandle of a handle cudaIpcGetEventHandle did not make");
    *e = handle_new(g_events);
    return cudaSuccess;
}
/* One emulated GPU per process, on the same "bus" for all: the ranks share it
 * (and IPC works). The sanitizer build cannot export blocks, so there each
 * process has a GPU of its own, which the others cannot see: IPC is then
 * found unusable (comm/ipc_cuda.c, coll_ipc_usable) and not tried. So has
 * each process with EMU_OWN_GPU=1 in its environment: the runs that need
 * one GPU per rank (comm.backend "nccl") set it. */
static void bus_id(char* id, size_t len) {
    const char* own = getenv("EMU_OWN_GPU");
    if (kGuards && !(own && strcmp(own, "1") == 0)) snprintf(id, len, "0000:00:00.0");
    else snprintf(id, len, "%04x:%02x:00.0", ((unsigned)getpid() >> 8) & 0xFFFFu, (unsigned)getpid() & 0xFFu);
}
cudaError_t CUDARTAPI cudaDeviceGetPCIBusId(char* id, int len, int device) {
    if (device != 0) return cudaErrorInvalidDevice;
    bus_id(id, (size_t)len);
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceGetByPCIBusId(int* device, const char* id) {
    char mine[32];
    bus_id(mine, sizeof(mine));
    if (strcmp(id, mine)) return cudaErrorInvalidDevice;
    *device = 0;
    return cudaSuccess;
}
cudaError_t CUDARTAPI cudaDeviceCanAccessPeer(int* can, int device, int peer) {
    *can = device == 0 && peer == 0;
    return cudaSuccess;
}

cudaError_t CUDARTAPI cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    check_event(a, "cudaEventElapsedTime");
    check_event(b, "cudaEventElapsedTime");
    check_recorded_outside(a, "cudaEventElapsedTime");
    check_recorded_outside(b, "cudaEventElapsedTime");
    *ms = 0.0f;
    return cudaSuccess;
}

} /* extern "C" */
