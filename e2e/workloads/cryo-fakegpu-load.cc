// cryo-fakegpu-load: a "GPU" job for tests of the GPU fast path on machines without a GPU. It
// runs over the fake CUDA driver (test/fakes/cuda, loaded as libcuda.so.1), whose device memory
// the job's "kernels" (host functions run by cuLaunchKernel) read and write directly.
//
// With --static-mib N it first allocates N MiB of "weights" (--chunk-mib cudaMalloc chunks) that
// its kernels check every step and never write, as an inference server's: what an incremental
// checkpoint need not write again.
// It holds --mib of memory in --chunk-mib cudaMalloc chunks (owned by the fast path), --vmm-mib
// mapped the way PyTorch's expandable segments map memory (one reserved range, a cuMemCreate +
// cuMemMap per chunk), and --small 64 KiB allocations (below the fast path's threshold: the
// driver's). Every step one kernel checks a chunk against the pattern of its generation and
// writes the next (--kernel-ms makes each kernel take that long). Like the CUDA runtime it finds
// the driver through dlopen + cuGetProcAddress; the build named cryo-fakegpu-load-direct calls the
// driver's exported symbols instead.
//
// With --share-mib N it also maps N MiB the way NCCL's P2P transport shares memory: created with
// a POSIX descriptor handle type, exported (cuMemExportToShareableHandle), and imported by a
// second process of the job (this program again, started with --import-fd, inheriting the
// descriptor), which maps it too (holding --peer-mib of its own, default none). --share-count K
// makes that K such allocations of N MiB side by side, each exported and imported on its own (as
// NCCL's buffers, one per peer and channel). Word 0 of that memory is the peer's step counter, word
// 1 its count of wrong words, the rest a fixed pattern both check every step; "peer_steps" and
// "peer_mismatches" in the status are read from there (so they advance only while the two processes
// map the same memory). With --share-ipc the shared memory is one cudaMalloc of N MiB passed by
// legacy CUDA IPC instead (cuIpcGetMemHandle; the second process gets --import-ipc with the handle
// in hex and opens it with cuIpcOpenMemHandle), as PyTorch shares CUDA tensors and NCCL's P2P
// transport shares buffers with NCCL_CUMEM_ENABLE=0. With --share-host the shared allocations are
// host memory (CU_MEM_LOCATION_TYPE_HOST_NUMA), as NCCL's SHM transport makes them when P2P is
// unavailable.
//
// With --host-mib N it also holds N MiB of private host memory it rewrites as it runs, a few pages
// every step, each page filled from its index and a stamp (the step that wrote it); the stamps
// are kept apart in shared anonymous memory. Every page is checked against its stamp before it is
// rewritten: a restore that brought back a page older than its stamp (a copy taken ahead of a
// checkpoint's freeze and wrongly thought unchanged) counts as "host_mismatches";
// "host_cycles" counts the passes over the whole region.
//
// With --io-uring it first sets up an io_uring as libuv's loop does (through syscall(2), keeping
// the descriptor and the mapped ring) and goes on without one when the kernel or the fast-path
// library refuses it; "io_uring" in the status says which ("ring" or "none").
//
// Every --interval-ms it rewrites one JSON record at offset 0 of --status (held open across a
// checkpoint): pid, ready, steps (and "main", the same), mismatches, verified, api (the checks of
// what queries on an
// allocation answer), device_used (bytes the fake GPU holds). SIGTERM ends it (exit 0, or 3 if
// any word was wrong).

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Api {
  decltype(&cuInit) Init;
  decltype(&cuDeviceGet) DeviceGet;
  decltype(&cuDevicePrimaryCtxRetain) PrimaryCtxRetain;
  decltype(&cuCtxSetCurrent) CtxSetCurrent;
  decltype(&cuMemAlloc_v2) MemAlloc;
  decltype(&cuMemFree_v2) MemFree;
  decltype(&cuMemGetInfo_v2) MemGetInfo;
  decltype(&cuMemGetAddressRange_v2) MemGetAddressRange;
  decltype(&cuPointerGetAttribute) PointerGetAttribute;
  decltype(&cuMemAddressReserve) MemAddressReserve;
  decltype(&cuMemCreate) MemCreate;
  decltype(&cuMemMap) MemMap;
  decltype(&cuMemSetAccess) MemSetAccess;
  decltype(&cuMemcpyHtoD_v2) MemcpyHtoD;
  decltype(&cuMemcpyDtoH_v2) MemcpyDtoH;
  decltype(&cuLaunchKernel) LaunchKernel;
  decltype(&cuMemExportToShareableHandle) MemExport;
  decltype(&cuMemImportFromShareableHandle) MemImport;
  decltype(&cuIpcGetMemHandle) IpcGetMemHandle;
  decltype(&cuIpcOpenMemHandle_v2) IpcOpenMemHandle;
};

#ifdef CRYO_FAKEGPU_DIRECT
bool LoadApi(Api* a, std::string* err) {
  *a = Api{&cuInit,
           &cuDeviceGet,
           &cuDevicePrimaryCtxRetain,
           &cuCtxSetCurrent,
           &cuMemAlloc_v2,
           &cuMemFree_v2,
           &cuMemGetInfo_v2,
           &cuMemGetAddressRange_v2,
           &cuPointerGetAttribute,
           &cuMemAddressReserve,
           &cuMemCreate,
           &cuMemMap,
           &cuMemSetAccess,
           &cuMemcpyHtoD_v2,
           &cuMemcpyDtoH_v2,
           &cuLaunchKernel,
           &cuMemExportToShareableHandle,
           &cuMemImportFromShareableHandle,
           &cuIpcGetMemHandle,
           &cuIpcOpenMemHandle_v2};
  (void)err;
  return true;
}
#else
// As libcudart does it: the driver's library by name, then every entry point through it.
bool LoadApi(Api* a, std::string* err) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *err = dlerror();
    return false;
  }
  auto gpa = reinterpret_cast<decltype(&cuGetProcAddress_v2)>(dlsym(h, "cuGetProcAddress_v2"));
  if (gpa == nullptr) {
    *err = "no cuGetProcAddress_v2";
    return false;
  }
  bool ok = true;
  auto get = [&](const char* name, auto** out, cuuint64_t flags = CU_GET_PROC_ADDRESS_DEFAULT) {
    void* p = nullptr;
    CUdriverProcAddressQueryResult st;
    if (gpa(name, &p, 13000, flags, &st) != CUDA_SUCCESS || p == nullptr) {
      ok = false;
      *err = std::string("no ") + name;
    }
    *out = reinterpret_cast<std::remove_pointer_t<decltype(out)> >(p);
  };
  get("cuInit", &a->Init);
  get("cuDeviceGet", &a->DeviceGet);
  get("cuDevicePrimaryCtxRetain", &a->PrimaryCtxRetain);
  get("cuCtxSetCurrent", &a->CtxSetCurrent);
  get("cuMemAlloc", &a->MemAlloc);
  get("cuMemFree", &a->MemFree);
  get("cuMemGetInfo", &a->MemGetInfo);
  get("cuMemGetAddressRange", &a->MemGetAddressRange);
  get("cuPointerGetAttribute", &a->PointerGetAttribute);
  get("cuMemAddressReserve", &a->MemAddressReserve);
  get("cuMemCreate", &a->MemCreate);
  get("cuMemMap", &a->MemMap);
  get("cuMemSetAccess", &a->MemSetAccess);
  get("cuMemcpyHtoD", &a->MemcpyHtoD);
  get("cuMemcpyDtoH", &a->MemcpyDtoH);
  // The per-thread default stream variant, as a runtime built that way asks for it.
  get("cuLaunchKernel", &a->LaunchKernel, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  get("cuMemExportToShareableHandle", &a->MemExport);
  get("cuMemImportFromShareableHandle", &a->MemImport);
  get("cuIpcGetMemHandle", &a->IpcGetMemHandle);
  get("cuIpcOpenMemHandle", &a->IpcOpenMemHandle);
  return ok;
}
#endif

volatile sig_atomic_t g_stop = 0;
long g_kernel_ms = 0;  // how long each kernel runs (a kernel the drain must wait for)

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}
uint64_t Pattern(uint64_t chunk, uint64_t i, uint64_t gen) {
  return Mix((chunk << 40) ^ i) ^ (gen * 0x9E3779B97F4A7C15ULL);
}

// The "kernel": params = {uint64_t** words, size_t* n, uint64_t* chunk, uint64_t* gen,
// uint64_t** bad}.
void VerifyAdvance(void** params) {
  uint64_t* w = *static_cast<uint64_t**>(params[0]);
  const size_t n = *static_cast<size_t*>(params[1]);
  const uint64_t chunk = *static_cast<uint64_t*>(params[2]);
  const uint64_t gen = *static_cast<uint64_t*>(params[3]);
  uint64_t* bad = *static_cast<uint64_t**>(params[4]);
  if (g_kernel_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(g_kernel_ms));
  for (size_t i = 0; i < n; ++i) {
    if (w[i] != Pattern(chunk, i, gen)) ++*bad;
    w[i] = Pattern(chunk, i, gen + 1);
  }
}

// The "kernel" over a static chunk: params = {uint64_t** words, size_t* n, uint64_t* chunk,
// uint64_t** bad}; checks, writes nothing.
void VerifyStatic(void** params) {
  const uint64_t* w = *static_cast<uint64_t**>(params[0]);
  const size_t n = *static_cast<size_t*>(params[1]);
  const uint64_t chunk = *static_cast<uint64_t*>(params[2]);
  uint64_t* bad = *static_cast<uint64_t**>(params[3]);
  for (size_t i = 0; i < n; ++i) {
    if (w[i] != Pattern(chunk, i, 0)) ++*bad;
  }
}

// The shared region's fixed words (from word 2 on): wrong ones counted.
uint64_t CheckShared(const uint64_t* w, size_t n) {
  uint64_t wrong = 0;
  for (size_t i = 2; i < n; ++i) wrong += w[i] != Pattern(1000, i, 0);
  return wrong;
}

// The "kernel" over the shared region: params = {uint64_t** words, size_t* n, int* importer,
// uint64_t** bad, uint64_t** peer}. The importer counts its steps and wrong words into words 0
// and 1; the exporter reads them back (into peer[0], peer[1]) and counts its own wrong words.
void SharedStep(void** params) {
  uint64_t* w = *static_cast<uint64_t**>(params[0]);
  const size_t n = *static_cast<size_t*>(params[1]);
  const bool importer = *static_cast<int*>(params[2]) != 0;
  uint64_t* bad = *static_cast<uint64_t**>(params[3]);
  uint64_t* peer = *static_cast<uint64_t**>(params[4]);
  if (importer) {
    w[1] += CheckShared(w, n);
    ++w[0];
  } else {
    *bad += CheckShared(w, n);
    peer[0] = w[0];
    peer[1] = w[1];
  }
}

struct Chunk {
  CUdeviceptr p;
  size_t bytes;
  uint64_t gen = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string status_path;
  long mib = 24, chunk_mib = 4, vmm_mib = 8, small = 2, interval_ms = 20, share_mib = 0;
  long static_mib = 0;
  long host_mib = 0;
  long share_count = 1;
  long peer_mib = 0;  // --peer-mib: the importer's own cudaMalloc memory (--share-mib's process)
  std::vector<int> import_fds;
  bool share_ipc = false, share_host = false;
  std::string import_ipc;  // the exporter's legacy IPC handle, hex
  bool want_io_uring = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : "0";
    if (a == "--status")
      status_path = v, ++i;
    else if (a == "--mib")
      mib = atol(v), ++i;
    else if (a == "--chunk-mib")
      chunk_mib = atol(v), ++i;
    else if (a == "--static-mib")
      static_mib = atol(v), ++i;
    else if (a == "--host-mib")
      host_mib = atol(v), ++i;
    else if (a == "--vmm-mib")
      vmm_mib = atol(v), ++i;
    else if (a == "--small")
      small = atol(v), ++i;
    else if (a == "--interval-ms")
      interval_ms = atol(v), ++i;
    else if (a == "--kernel-ms")
      g_kernel_ms = atol(v), ++i;
    else if (a == "--share-mib")
      share_mib = atol(v), ++i;
    else if (a == "--peer-mib")
      peer_mib = atol(v), ++i;
    else if (a == "--share-count")
      share_count = atol(v), ++i;
    else if (a == "--import-fd") {
      // "a,b,c": one descriptor per shared allocation.
      const std::string list = v;
      for (size_t at = 0;;) {
        const size_t comma = list.find(',', at);
        import_fds.push_back(atoi(list.substr(at, comma - at).c_str()));
        if (comma == std::string::npos) break;
        at = comma + 1;
      }
      ++i;
    } else if (a == "--share-host") {
      share_host = true;
    } else if (a == "--share-ipc") {
      share_ipc = true;
    } else if (a == "--import-ipc") {
      import_ipc = v, ++i;
      share_ipc = true;
    } else if (a == "--io-uring")
      want_io_uring = true;
    else {
      fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (chunk_mib <= 0 || chunk_mib % 2 != 0) {
    fprintf(stderr, "--chunk-mib must be a positive even number\n");
    return 2;
  }
  signal(SIGTERM, [](int) { g_stop = 1; });
  int status_fd =
      status_path.empty() ? -1 : open(status_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);

  Api api{};
  std::string api_result = "ok";
  std::atomic<uint64_t> steps{0};
  uint64_t bad = 0;
  std::atomic<bool> ready{false};
  std::atomic<uint64_t> peer_steps{0}, peer_bad{0};
  std::atomic<uint64_t> host_bad{0}, host_cycles{0};
  const char* io_uring = "none";
  if (want_io_uring) {
    // struct io_uring_params is 120 bytes; the ring is mapped at offset 0 (the submission ring).
    uint32_t params[30] = {0};
    long fd = syscall(SYS_io_uring_setup, 4, params);
    if (fd >= 0 && mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                        static_cast<int>(fd), 0) != MAP_FAILED)
      io_uring = "ring";
  }
  auto write_status = [&](size_t used) {
    if (status_fd < 0) return;
    char rec[512];
    int n = snprintf(rec, sizeof(rec),
                     "{\"pid\": %d, \"ready\": %s, \"steps\": %llu, \"main\": %llu, "
                     "\"mismatches\": %llu, "
                     "\"verified\": %s, \"api\": \"%s\", \"device_used\": %zu, "
                     "\"peer_steps\": %llu, \"peer_mismatches\": %llu, \"io_uring\": \"%s\", "
                     "\"host_mismatches\": %llu, \"host_cycles\": %llu}",
                     getpid(), ready ? "true" : "false", (unsigned long long)steps.load(),
                     (unsigned long long)steps.load(), (unsigned long long)bad,
                     ready && bad == 0 ? "true" : "false", api_result.c_str(), used,
                     (unsigned long long)peer_steps.load(), (unsigned long long)peer_bad.load(),
                     io_uring, (unsigned long long)host_bad.load(),
                     (unsigned long long)host_cycles.load());
    std::string out(rec, n);
    out.resize(sizeof(rec) - 1, ' ');
    out.push_back('\n');
    (void)!pwrite(status_fd, out.data(), out.size(), 0);
  };

  std::string err;
  if (!LoadApi(&api, &err)) {
    api_result = "no driver: " + err;
    write_status(0);
    fprintf(stderr, "%s\n", api_result.c_str());
    return 1;
  }
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (api.Init(0) != CUDA_SUCCESS || api.DeviceGet(&dev, 0) != CUDA_SUCCESS ||
      api.PrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || api.CtxSetCurrent(ctx) != CUDA_SUCCESS) {
    fprintf(stderr, "driver init failed\n");
    return 1;
  }

  // What a job may ask of an allocation must answer as without the fast path.
  {
    const size_t asked = (3u << 20) + 40;
    CUdeviceptr p = 0, base = 0;
    size_t size = 0, attr = 0;
    uint64_t in = 0x1234567890abcdefULL, out = 0;
    if (api.MemAlloc(&p, asked) != CUDA_SUCCESS) {
      api_result = "cuMemAlloc failed";
    } else if (api.MemGetAddressRange(&base, &size, p + 100) != CUDA_SUCCESS || base != p ||
               size != asked) {
      api_result = "cuMemGetAddressRange: size " + std::to_string(size);
    } else if (api.PointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_RANGE_SIZE, p) != CUDA_SUCCESS ||
               attr != asked) {
      api_result = "CU_POINTER_ATTRIBUTE_RANGE_SIZE: " + std::to_string(attr);
    } else if (api.MemcpyHtoD(p + 8, &in, 8) != CUDA_SUCCESS ||
               api.MemcpyDtoH(&out, p + 8, 8) != CUDA_SUCCESS || out != in) {
      api_result = "copies do not round-trip";
    }
    if (p != 0) api.MemFree(p);
  }

  const size_t cb = size_t(chunk_mib) << 20;
  // The weights first: they lead the fast path's stream, whole units of it.
  std::vector<Chunk> weights;
  constexpr uint64_t kWeightsId = 3000;
  for (long m = 0; m < static_mib; m += chunk_mib) {
    CUdeviceptr p = 0;
    if (api.MemAlloc(&p, cb) != CUDA_SUCCESS) return fprintf(stderr, "cuMemAlloc\n"), 1;
    auto* w = reinterpret_cast<uint64_t*>(p);
    for (size_t i = 0; i < cb / 8; ++i) w[i] = Pattern(kWeightsId + weights.size(), i, 0);
    weights.push_back({p, cb});
  }
  std::vector<Chunk> chunks;
  for (long m = 0; m < mib; m += chunk_mib) {
    CUdeviceptr p = 0;
    if (api.MemAlloc(&p, cb) != CUDA_SUCCESS) return fprintf(stderr, "cuMemAlloc\n"), 1;
    chunks.push_back({p, cb});
  }
  if (vmm_mib > 0) {
    CUdeviceptr range = 0;
    const size_t total = size_t(vmm_mib) << 20;
    if (api.MemAddressReserve(&range, total, 0, 0, 0) != CUDA_SUCCESS) {
      return fprintf(stderr, "cuMemAddressReserve\n"), 1;
    }
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemAccessDesc acc{};
    acc.location = prop.location;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    for (size_t off = 0; off < total; off += cb) {
      CUmemGenericAllocationHandle h = 0;
      if (api.MemCreate(&h, cb, &prop, 0) != CUDA_SUCCESS ||
          api.MemMap(range + off, cb, 0, h, 0) != CUDA_SUCCESS ||
          api.MemSetAccess(range + off, cb, &acc, 1) != CUDA_SUCCESS) {
        return fprintf(stderr, "mapping a segment\n"), 1;
      }
      chunks.push_back({range + off, cb});
    }
  }
  // Memory shared with a second process of the job, as NCCL's P2P transport shares it.
  uint64_t* shared = nullptr;
  size_t shared_words = 0;
  pid_t peer = -1;
  const bool importer = !import_fds.empty() || !import_ipc.empty();
  if (share_mib > 0 && share_ipc) {
    if (share_count != 1) return fprintf(stderr, "--share-ipc shares one allocation\n"), 1;
    const size_t bytes = size_t(share_mib) << 20;
    CUdeviceptr p = 0;
    if (importer) {
      CUipcMemHandle h{};
      if (import_ipc.size() != 2 * sizeof(h.reserved)) {
        return fprintf(stderr, "--import-ipc: %zu hex digits\n", import_ipc.size()), 1;
      }
      for (size_t k = 0; k < sizeof(h.reserved); ++k) {
        h.reserved[k] =
            static_cast<char>(strtoul(import_ipc.substr(2 * k, 2).c_str(), nullptr, 16));
      }
      CUresult r = api.IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      if (r != CUDA_SUCCESS) return fprintf(stderr, "cuIpcOpenMemHandle: %d\n", r), 1;
    } else {
      CUipcMemHandle h{};
      if (api.MemAlloc(&p, bytes) != CUDA_SUCCESS) return fprintf(stderr, "shared alloc\n"), 1;
      auto* w = reinterpret_cast<uint64_t*>(p);
      for (size_t i = 0; i < bytes / 8; ++i) w[i] = i < 2 ? 0 : Pattern(1000, i, 0);
      CUresult r = api.IpcGetMemHandle(&h, p);
      if (r != CUDA_SUCCESS) return fprintf(stderr, "cuIpcGetMemHandle: %d\n", r), 1;
      std::string hex;
      for (char c : h.reserved) {
        char b[3];
        snprintf(b, sizeof(b), "%02x", static_cast<unsigned char>(c));
        hex += b;
      }
      peer = fork();
      if (peer == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        std::string mibs = std::to_string(share_mib), st = status_path + ".peer";
        execl("/proc/self/exe", argv[0], "--import-ipc", hex.c_str(), "--share-mib", mibs.c_str(),
              "--mib", "0", "--vmm-mib", "0", "--small", "0", "--status", st.c_str(),
              static_cast<char*>(nullptr));
        _exit(127);
      }
    }
    shared = reinterpret_cast<uint64_t*>(p);
    shared_words = bytes / 8;
  } else if (share_mib > 0) {
    // share_count physical allocations side by side in one reserved range, each exported on
    // its own (NCCL exports one per buffer): the importer maps them in the same order.
    const size_t bytes = size_t(share_mib) << 20;
    const size_t total = bytes * share_count;
    CUdeviceptr range = 0;
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = share_host ? CU_MEM_LOCATION_TYPE_HOST_NUMA : CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = share_host ? 0 : dev;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemAccessDesc acc{};
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;  // the GPU's access (NCCL adds the CPU's)
    acc.location.id = dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    if (importer && import_fds.size() != static_cast<size_t>(share_count)) {
      return fprintf(stderr, "--import-fd needs --share-count descriptors\n"), 1;
    }
    std::vector<CUmemGenericAllocationHandle> handles(share_count);
    CUresult r = api.MemAddressReserve(&range, total, 0, 0, 0);
    for (long k = 0; k < share_count && r == CUDA_SUCCESS; ++k) {
      r = importer ? api.MemImport(&handles[k],
                                   reinterpret_cast<void*>(static_cast<intptr_t>(import_fds[k])),
                                   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
                   : api.MemCreate(&handles[k], bytes, &prop, 0);
      if (r == CUDA_SUCCESS) r = api.MemMap(range + k * bytes, bytes, 0, handles[k], 0);
    }
    if (r == CUDA_SUCCESS) r = api.MemSetAccess(range, total, &acc, 1);
    if (r != CUDA_SUCCESS) return fprintf(stderr, "shared memory: %d\n", r), 1;
    shared = reinterpret_cast<uint64_t*>(range);
    shared_words = total / 8;
    if (importer) {
      for (int fd : import_fds) close(fd);  // imported: NCCL closes them too
    } else {
      for (size_t i = 0; i < shared_words; ++i) shared[i] = i < 2 ? 0 : Pattern(1000, i, 0);
      std::string fds;
      std::vector<int> exported;
      for (long k = 0; k < share_count; ++k) {
        int fd = -1;
        if (api.MemExport(&fd, handles[k], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) !=
            CUDA_SUCCESS) {
          return fprintf(stderr, "export\n"), 1;
        }
        exported.push_back(fd);
        fds += (k > 0 ? "," : "") + std::to_string(fd);
      }
      // The importer: this program again, in the same process tree, given the descriptors.
      peer = fork();
      if (peer == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        std::string mibs = std::to_string(share_mib), count = std::to_string(share_count);
        std::string st = status_path + ".peer", own = std::to_string(peer_mib);
        execl("/proc/self/exe", argv[0], "--import-fd", fds.c_str(), "--share-mib", mibs.c_str(),
              "--share-count", count.c_str(), "--mib", own.c_str(), "--vmm-mib", "0", "--small",
              "0", "--status", st.c_str(), static_cast<char*>(nullptr));
        _exit(127);
      }
      for (int fd : exported) close(fd);  // passed on: NCCL closes its copies too
    }
  }
  for (long i = 0; i < small; ++i) {
    CUdeviceptr p = 0;
    if (api.MemAlloc(&p, 64 << 10) != CUDA_SUCCESS) return fprintf(stderr, "small\n"), 1;
    chunks.push_back({p, size_t(64) << 10});
  }
  for (size_t c = 0; c < chunks.size(); ++c) {
    auto* w = reinterpret_cast<uint64_t*>(chunks[c].p);
    for (size_t i = 0; i < chunks[c].bytes / 8; ++i) w[i] = Pattern(c, i, 0);
  }
  // Host memory: private pages, their stamps in shared memory (as pinned host memory is).
  constexpr size_t kHostPage = 4096, kHostWords = kHostPage / 8, kHostPerStep = 64;
  const size_t host_pages = size_t(host_mib) << 8;
  uint64_t* host = nullptr;
  uint64_t* stamps = nullptr;
  size_t host_at = 0;
  auto host_word = [](size_t page, uint64_t stamp, size_t j) {
    return (page * 0x9E3779B97F4A7C15ull) ^ (stamp * 0xC2B2AE3D27D4EB4Full) ^ j;
  };
  if (host_pages > 0) {
    host = static_cast<uint64_t*>(mmap(nullptr, host_pages * kHostPage, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    stamps = static_cast<uint64_t*>(
        mmap(nullptr, host_pages * 8, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
    if (host == MAP_FAILED || stamps == MAP_FAILED) return fprintf(stderr, "host memory\n"), 1;
    for (size_t p = 0; p < host_pages; ++p) {
      for (size_t j = 0; j < kHostWords; ++j) host[p * kHostWords + j] = host_word(p, 1, j);
      stamps[p] = 1;
    }
  }

  ready = true;
  auto used = [&] {
    size_t free_b = 0, total = 0;
    api.MemGetInfo(&free_b, &total);
    return total - free_b;
  };
  write_status(used());
  std::thread reporter([&] {
    while (!g_stop) {
      std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
      api.CtxSetCurrent(ctx);
      write_status(used());
    }
  });

  uint64_t* bad_p = &bad;
  // The importer lives only as long as the process that started it (a test kills that one).
  const pid_t parent = getppid();
  while (!g_stop) {
    if (importer && getppid() != parent) break;
    for (size_t k = 0; k < kHostPerStep && host_pages > 0; ++k) {
      const size_t p = host_at;
      uint64_t* w = host + p * kHostWords;
      // Stamp 0: frozen in the middle of this page's rewrite (a checkpoint): nothing to check.
      for (size_t j = 0; j < kHostWords && stamps[p] != 0; ++j) {
        if (w[j] != host_word(p, stamps[p], j)) {
          ++host_bad;
          break;
        }
      }
      const uint64_t stamp = steps.load() + 2;
      stamps[p] = 0;
      for (size_t j = 0; j < kHostWords; ++j) w[j] = host_word(p, stamp, j);
      stamps[p] = stamp;
      if (++host_at == host_pages) {
        host_at = 0;
        ++host_cycles;
      }
    }
    if (shared != nullptr) {
      // Device memory is touched only by kernels (the fast path moves it between them).
      int as_importer = importer;
      uint64_t peer[2] = {0, 0};
      uint64_t* peer_p = peer;
      void* params[] = {&shared, &shared_words, &as_importer, &bad_p, &peer_p};
      if (api.LaunchKernel(reinterpret_cast<CUfunction>(&SharedStep), 1, 1, 1, 1, 1, 1, 0, nullptr,
                           params, nullptr) != CUDA_SUCCESS) {
        fprintf(stderr, "launch failed\n");
        break;
      }
      if (!as_importer) {
        peer_steps = peer[0];
        peer_bad = peer[1];
      }
    }
    if (!weights.empty()) {
      const size_t c = steps % weights.size();
      uint64_t* words = reinterpret_cast<uint64_t*>(weights[c].p);
      size_t n = weights[c].bytes / 8;
      uint64_t id = kWeightsId + c;
      void* params[] = {&words, &n, &id, &bad_p};
      if (api.LaunchKernel(reinterpret_cast<CUfunction>(&VerifyStatic), 1, 1, 1, 1, 1, 1, 0,
                           nullptr, params, nullptr) != CUDA_SUCCESS) {
        fprintf(stderr, "launch failed\n");
        break;
      }
    }
    if (chunks.empty()) {
      ++steps;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    const size_t c = steps % chunks.size();
    uint64_t* words = reinterpret_cast<uint64_t*>(chunks[c].p);
    size_t n = chunks[c].bytes / 8;
    uint64_t chunk_id = c;
    uint64_t gen = chunks[c].gen;
    void* params[] = {&words, &n, &chunk_id, &gen, &bad_p};
    if (api.LaunchKernel(reinterpret_cast<CUfunction>(&VerifyAdvance), 1, 1, 1, 1, 1, 1, 0, nullptr,
                         params, nullptr) != CUDA_SUCCESS) {
      fprintf(stderr, "launch failed\n");
      break;
    }
    ++chunks[c].gen;
    ++steps;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  reporter.join();
  write_status(used());
  if (peer > 0) kill(peer, SIGTERM);
  return bad == 0 ? 0 : 3;
}
