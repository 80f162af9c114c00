/* liboeq_cuda_dispatch.so: the CUDA runtime, NVRTC and cuBLAS functions OpenEquivariance's stable extension calls,
 * bound at run time to the libraries of the CUDA major that the process's torch already loaded.
 *
 * OEq's kernels are compiled at run time by NVRTC, so its host code needs only this small, stable slice of CUDA.
 * The modules link against this library instead of libcudart.so.N, libnvrtc.so.N and libcublas.so.N: every function
 * here carries the version node OEQ_CUDA_DISPATCH_1 (cuda_dispatch.map), so the modules' references bind to it and
 * never to a CUDA runtime that torch put in the global scope. At the first call (the module's import calls
 * oeq_cuda_dispatch_bind, import_guard.cpp) it finds the libcudart.so.12 or .13 mapped in the process, takes NVRTC
 * and cuBLAS of the same major from beside it (torch's NVIDIA wheels, either layout, or a toolkit's lib directory)
 * and binds each function with dlsym. Where the two majors differ for a caller compiled with the other major's
 * headers, the binding adapts (cudaDeviceProp, below). Its own imports are libc's and libdl's only.
 *
 * Hand-rolled rather than generated (Implib.so and the like make lazy trampolines per library, in assembly per
 * architecture): one C file over the pinned headers keeps every prototype checked by the compiler against NVIDIA's
 * declarations, serves both architectures, and lets one library pick the major at run time. */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wformat-truncation" /* a path past PATH_MAX opens nothing anyway */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <sched.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nvrtc.h>
#include <cublas_v2.h>

/* glibc 2.34 moved dlopen and friends into libc under a new version; bind them to the version every glibc of the
 * architecture has, so that the library runs on glibc 2.28 (manylinux_2_28), as shim/pthread_keys.h does. */
#if defined(__x86_64__)
#define OEQ_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define OEQ_GLIBC_BASE "GLIBC_2.17"
#else
#error "oeq-wheels: no glibc base version known for this architecture"
#endif
__asm__(".symver dlopen,dlopen@" OEQ_GLIBC_BASE);
__asm__(".symver dlsym,dlsym@" OEQ_GLIBC_BASE);
__asm__(".symver dlerror,dlerror@" OEQ_GLIBC_BASE);
__asm__(".symver dlclose,dlclose@" OEQ_GLIBC_BASE);

#define OEQ_EXPORT __attribute__((visibility("default")))
#define OEQ_STR(x) #x
#define OEQ_STRINGIFY(x) OEQ_STR(x)

/* The headers' major: what the callers were compiled against. */
#define OEQ_HEADERS_MAJOR (CUDART_VERSION / 1000)
#if OEQ_HEADERS_MAJOR >= 13
#define OEQ_PROPS cudaGetDeviceProperties
#define OEQ_PROPS_OTHER "cudaGetDeviceProperties_v2" /* CUDA 12's name for the same call, with 12's struct */
#else
#define OEQ_PROPS cudaGetDeviceProperties_v2
#define OEQ_PROPS_OTHER "cudaGetDeviceProperties" /* CUDA 13's name, with 13's struct */
#endif

/* X(library, return type, name, parameters, arguments, value returned when nothing could be bound) */
#define OEQ_FUNCTIONS(X)                                                                                            \
    X(CUDART, cudaError_t, cudaMalloc, (void **p, size_t n), (p, n), cudaErrorInitializationError)                \
    X(CUDART, cudaError_t, cudaFree, (void *p), (p), cudaErrorInitializationError)                                \
    X(CUDART, cudaError_t, cudaMemset, (void *p, int v, size_t n), (p, v, n), cudaErrorInitializationError)       \
    X(CUDART, cudaError_t, cudaEventCreate, (cudaEvent_t * e), (e), cudaErrorInitializationError)                 \
    X(CUDART, cudaError_t, cudaEventRecord, (cudaEvent_t e, cudaStream_t s), (e, s), cudaErrorInitializationError) \
    X(CUDART, cudaError_t, cudaEventSynchronize, (cudaEvent_t e), (e), cudaErrorInitializationError)              \
    X(CUDART, cudaError_t, cudaEventElapsedTime, (float *ms, cudaEvent_t a, cudaEvent_t b), (ms, a, b),           \
      cudaErrorInitializationError)                                                                                 \
    X(CUDART, cudaError_t, cudaEventDestroy, (cudaEvent_t e), (e), cudaErrorInitializationError)                  \
    X(CUDART, cudaError_t, cudaDeviceSynchronize, (void), (), cudaErrorInitializationError)                       \
    X(CUDART, cudaError_t, cudaGetDevice, (int *d), (d), cudaErrorInitializationError)                            \
    X(CUDART, cudaError_t, cudaDeviceGetAttribute, (int *v, enum cudaDeviceAttr a, int d), (v, a, d),             \
      cudaErrorInitializationError)                                                                                 \
    X(NVRTC, nvrtcResult, nvrtcVersion, (int *major, int *minor), (major, minor), NVRTC_ERROR_INTERNAL_ERROR)      \
    X(NVRTC, nvrtcResult, nvrtcGetNumSupportedArchs, (int *n), (n), NVRTC_ERROR_INTERNAL_ERROR)                    \
    X(NVRTC, nvrtcResult, nvrtcGetSupportedArchs, (int *a), (a), NVRTC_ERROR_INTERNAL_ERROR)                       \
    X(NVRTC, nvrtcResult, nvrtcCreateProgram,                                                                      \
      (nvrtcProgram * p, const char *src, const char *name, int n, const char *const *headers,                     \
       const char *const *names),                                                                                   \
      (p, src, name, n, headers, names), NVRTC_ERROR_INTERNAL_ERROR)                                                \
    X(NVRTC, nvrtcResult, nvrtcDestroyProgram, (nvrtcProgram * p), (p), NVRTC_ERROR_INTERNAL_ERROR)                \
    X(NVRTC, nvrtcResult, nvrtcCompileProgram, (nvrtcProgram p, int n, const char *const *options),                \
      (p, n, options), NVRTC_ERROR_INTERNAL_ERROR)                                                                  \
    X(NVRTC, nvrtcResult, nvrtcGetCUBINSize, (nvrtcProgram p, size_t *n), (p, n), NVRTC_ERROR_INTERNAL_ERROR)      \
    X(NVRTC, nvrtcResult, nvrtcGetCUBIN, (nvrtcProgram p, char *cubin), (p, cubin), NVRTC_ERROR_INTERNAL_ERROR)    \
    X(NVRTC, nvrtcResult, nvrtcGetProgramLogSize, (nvrtcProgram p, size_t *n), (p, n), NVRTC_ERROR_INTERNAL_ERROR) \
    X(NVRTC, nvrtcResult, nvrtcGetProgramLog, (nvrtcProgram p, char *log), (p, log), NVRTC_ERROR_INTERNAL_ERROR)   \
    X(NVRTC, nvrtcResult, nvrtcAddNameExpression, (nvrtcProgram p, const char *const expr), (p, expr),             \
      NVRTC_ERROR_INTERNAL_ERROR)                                                                                   \
    X(NVRTC, nvrtcResult, nvrtcGetLoweredName, (nvrtcProgram p, const char *const expr, const char **lowered),     \
      (p, expr, lowered), NVRTC_ERROR_INTERNAL_ERROR)                                                               \
    X(CUBLAS, cublasStatus_t, cublasCreate_v2, (cublasHandle_t * h), (h), CUBLAS_STATUS_NOT_INITIALIZED)          \
    X(CUBLAS, cublasStatus_t, cublasDestroy_v2, (cublasHandle_t h), (h), CUBLAS_STATUS_NOT_INITIALIZED)           \
    X(CUBLAS, cublasStatus_t, cublasSgemmStridedBatched,                                                           \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float *alpha,       \
       const float *a, int lda, long long int sa, const float *b, int ldb, long long int sb, const float *beta,     \
       float *c, int ldc, long long int sc, int count),                                                             \
      (h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count), CUBLAS_STATUS_NOT_INITIALIZED)  \
    X(CUBLAS, cublasStatus_t, cublasDgemmStridedBatched,                                                           \
      (cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const double *alpha,      \
       const double *a, int lda, long long int sa, const double *b, int ldb, long long int sb, const double *beta,  \
       double *c, int ldc, long long int sc, int count),                                                            \
      (h, ta, tb, m, n, k, alpha, a, lda, sa, b, ldb, sb, beta, c, ldc, sc, count), CUBLAS_STATUS_NOT_INITIALIZED)

enum { CUDART, NVRTC, CUBLAS, LIBRARIES };
static const char *const library_stem[LIBRARIES] = {"libcudart.so.", "libnvrtc.so.", "libcublas.so."};
/* Where each NVIDIA wheel of CUDA 12 puts its library (nvidia/<dir>/lib); CUDA 13's wheels share nvidia/cu13/lib. */
static const char *const wheel_dir[LIBRARIES] = {"cuda_runtime", "cuda_nvrtc", "cublas"};

#define OEQ_SLOT(lib, ret, name, params, args, fail) static __typeof__(&name) p_##name;
OEQ_FUNCTIONS(OEQ_SLOT)
static cudaError_t (*p_props)(struct cudaDeviceProp *, int);       /* the headers' own call, same major */
static cudaError_t (*p_props_other)(void *, int);                  /* the other major's, adapted below */
static const char *(*p_cudaGetErrorString)(cudaError_t);
static const char *(*p_nvrtcGetErrorString)(nvrtcResult);

static int bind_state;   /* 0: not yet, 1: binding, 2: done (bind_error says whether it failed) */
static char bind_error[3 * PATH_MAX];
static int bound_major;
static char bound_path[LIBRARIES][PATH_MAX];

struct found {
    const char *stem;
    char path[PATH_MAX];
    int major;
};

/* The first loaded object named <stem><major> with a supported major (12 or 13). */
static int find_loaded(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    struct found *f = data;
    const char *name = info->dlpi_name, *base = name ? strrchr(name, '/') : NULL;
    base = base ? base + 1 : name;
    size_t n = strlen(f->stem);
    if (!base || strncmp(base, f->stem, n) != 0)
        return 0;
    int major = atoi(base + n);
    if (f->major ? major != f->major : (major != 12 && major != 13))
        return 0;
    f->major = major;
    snprintf(f->path, sizeof f->path, "%s", name);
    return 1;
}

static void *open_library(int lib, int major, const char *cudart_dir, char *looked, size_t looked_size) {
    struct found f = {library_stem[lib], "", major};
    if (dl_iterate_phdr(find_loaded, &f)) { /* already loaded (torch's own): take that one */
        snprintf(bound_path[lib], sizeof bound_path[lib], "%s", f.path);
        return dlopen(f.path, RTLD_NOW | RTLD_LOCAL);
    }
    /* beside libcudart (CUDA 13's wheel, a toolkit), then CUDA 12's wheel of that library beside libcudart's */
    char candidates[2][PATH_MAX];
    snprintf(candidates[0], sizeof candidates[0], "%s/%s%d", cudart_dir, library_stem[lib], major);
    snprintf(candidates[1], sizeof candidates[1], "%s/../../%s/lib/%s%d", cudart_dir, wheel_dir[lib],
             library_stem[lib], major);
    for (int i = 0; i < 2; i++) {
        void *h = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
        if (h) {
            snprintf(bound_path[lib], sizeof bound_path[lib], "%s", candidates[i]);
            return h;
        }
    }
    snprintf(looked, looked_size, "%s%d in %s and %s/../../%s/lib", library_stem[lib], major, cudart_dir,
             cudart_dir, wheel_dir[lib]);
    return NULL;
}

#define OEQ_FAIL(...) (snprintf(bind_error, sizeof bind_error, "openequivariance: " __VA_ARGS__), (void)0)

static void bind_all(void) {
    struct found rt = {library_stem[CUDART], "", 0};
    if (!dl_iterate_phdr(find_loaded, &rt)) {
        OEQ_FAIL("no CUDA runtime to bind: neither libcudart.so.12 nor libcudart.so.13 is loaded in this process "
                 "(import a CUDA 12 or CUDA 13 build of torch first; torch.version.cuda says which it is)");
        return;
    }
    bound_major = rt.major;
    char dir[PATH_MAX], looked[2 * PATH_MAX + 64];
    snprintf(dir, sizeof dir, "%s", rt.path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof dir, ".");
    void *handle[LIBRARIES];
    for (int lib = 0; lib < LIBRARIES; lib++) {
        handle[lib] = open_library(lib, rt.major, dir, looked, sizeof looked);
        if (!handle[lib]) {
            OEQ_FAIL("CUDA %d's %s%d not found: looked for %s (torch's NVIDIA wheels of CUDA %d)", rt.major,
                     library_stem[lib], rt.major, looked, rt.major);
            return;
        }
    }
#define OEQ_BIND(lib, ret, name, params, args, fail)                                                               \
    if (!(p_##name = (__typeof__(p_##name))dlsym(handle[lib], #name))) {                                          \
        OEQ_FAIL("%s in %s lacks %s (CUDA %d)", library_stem[lib], bound_path[lib], #name, rt.major);              \
        return;                                                                                                     \
    }
    OEQ_FUNCTIONS(OEQ_BIND)
    p_cudaGetErrorString = (__typeof__(p_cudaGetErrorString))dlsym(handle[CUDART], "cudaGetErrorString");
    p_nvrtcGetErrorString = (__typeof__(p_nvrtcGetErrorString))dlsym(handle[NVRTC], "nvrtcGetErrorString");
    if (rt.major == OEQ_HEADERS_MAJOR)
        p_props = (__typeof__(p_props))dlsym(handle[CUDART], OEQ_STRINGIFY(OEQ_PROPS));
    else
        p_props_other = (__typeof__(p_props_other))dlsym(handle[CUDART], OEQ_PROPS_OTHER);
    if (!p_cudaGetErrorString || !p_nvrtcGetErrorString || !(p_props || p_props_other))
        OEQ_FAIL("%s lacks cudaGetErrorString, nvrtcGetErrorString or cudaGetDeviceProperties (CUDA %d)", rt.path,
                 rt.major);
}

/* Binds once, whichever thread comes first (a free-threaded CPython has no GIL); the others wait for it. */
static int bound(void) {
    int state = __atomic_load_n(&bind_state, __ATOMIC_ACQUIRE);
    if (state != 2) {
        int expected = 0;
        if (__atomic_compare_exchange_n(&bind_state, &expected, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
            bind_all();
            __atomic_store_n(&bind_state, 2, __ATOMIC_RELEASE);
        } else {
            while (__atomic_load_n(&bind_state, __ATOMIC_ACQUIRE) != 2)
                sched_yield();
        }
    }
    return bind_error[0] == '\0';
}

/* NULL once every function is bound; else the one line that says what was looked for and where. */
OEQ_EXPORT const char *oeq_cuda_dispatch_bind(void) { return bound() ? NULL : bind_error; }

/* The major bound (12 or 13; 0 if none) and where each library came from (0: cudart, 1: nvrtc, 2: cublas). */
OEQ_EXPORT int oeq_cuda_dispatch_major(void) { return bound() ? bound_major : 0; }
OEQ_EXPORT const char *oeq_cuda_dispatch_path(int lib) {
    return bound() && lib >= 0 && lib < LIBRARIES ? bound_path[lib] : NULL;
}

#define OEQ_WRAP(lib, ret, name, params, args, fail)                                                               \
    OEQ_EXPORT ret name params {                                                                                    \
        if (!bound())                                                                                               \
            return fail;                                                                                            \
        return p_##name args;                                                                                       \
    }
OEQ_FUNCTIONS(OEQ_WRAP)

OEQ_EXPORT const char *cudaGetErrorString(cudaError_t e) {
    return bound() ? p_cudaGetErrorString(e) : bind_error;
}

OEQ_EXPORT const char *nvrtcGetErrorString(nvrtcResult r) {
    return bound() ? p_nvrtcGetErrorString(r) : bind_error;
}

/* cudaDeviceProp differs between CUDA 12 and 13 (fields removed, others moved), and so does the call's name. For a
 * runtime of the other major: its own call into a buffer larger than either struct, then the caller's struct
 * zeroed and filled with what is at the same place in both (name, then uuid) and the fields a device attribute
 * gives. OpenEquivariance reads only name (backend_cuda.hpp); its other properties it asks as attributes. */
#define OEQ_ATTRIBUTES(X)                                                                                           \
    X(major, cudaDevAttrComputeCapabilityMajor)                                                                     \
    X(minor, cudaDevAttrComputeCapabilityMinor)                                                                     \
    X(multiProcessorCount, cudaDevAttrMultiProcessorCount)                                                          \
    X(warpSize, cudaDevAttrWarpSize)                                                                                \
    X(maxThreadsPerBlock, cudaDevAttrMaxThreadsPerBlock)                                                            \
    X(maxThreadsPerMultiProcessor, cudaDevAttrMaxThreadsPerMultiProcessor)                                          \
    X(regsPerBlock, cudaDevAttrMaxRegistersPerBlock)                                                                \
    X(l2CacheSize, cudaDevAttrL2CacheSize)                                                                          \
    X(pciBusID, cudaDevAttrPciBusId)                                                                                \
    X(pciDeviceID, cudaDevAttrPciDeviceId)                                                                          \
    X(pciDomainID, cudaDevAttrPciDomainId)

OEQ_EXPORT cudaError_t OEQ_PROPS(struct cudaDeviceProp *prop, int device) {
    if (!bound())
        return cudaErrorInitializationError;
    if (p_props)
        return p_props(prop, device);
    union {
        char bytes[8192];
        long double align;
    } other;
    memset(&other, 0, sizeof other);
    cudaError_t err = p_props_other(&other, device);
    if (err != cudaSuccess)
        return err;
    memset(prop, 0, sizeof *prop);
    memcpy(prop->name, other.bytes, sizeof prop->name);
    prop->name[sizeof prop->name - 1] = '\0';
    memcpy(&prop->uuid, other.bytes + sizeof prop->name, sizeof prop->uuid);
#define OEQ_ATTR(field, attr)                                                                                       \
    if ((err = p_cudaDeviceGetAttribute(&prop->field, attr, device)) != cudaSuccess)                               \
        return err;
    OEQ_ATTRIBUTES(OEQ_ATTR)
    return cudaSuccess;
}
