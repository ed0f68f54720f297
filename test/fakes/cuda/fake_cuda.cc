// A fake CUDA driver for the fast path's tests, built twice: linked into unit tests (its cu*
// functions fill a fastpath::Driver) and as a libcuda.so.1 that real processes load, so that
// the library's interposition, its channel and cryod's whole checkpoint can run (with real CRIU)
// on machines without a GPU.
//
// "Device memory" is host memory a test can touch directly: a physical allocation is a memfd,
// mapped MAP_SHARED at an address reserved with PROT_NONE, readable and writable only once
// cuMemSetAccess allows it, and freed (the memfd closed) when released and unmapped, as the
// driver frees device memory. cuMemGetInfo reports what is in use, so a test sees the GPU
// "vacated". A CUfunction is a host function `void (*)(void** params)` that cuLaunchKernel runs
// on the calling thread. Streams and contexts are tokens; every copy is synchronous.
//
// Env: FAKE_CUDA_DEVICES (default 1), FAKE_CUDA_MEM_MIB per device (default 4096);
// FAKE_CUDA_STALL_FILE: while that file exists, cuMemCreate of device memory waits (a refill
// that hangs in the driver, for the tests of cryod's waits).

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>

namespace {

constexpr size_t kGranularity = 2u << 20;

struct Ctx {
  int device;
};

struct Phys {
  int fd = -1;
  size_t size = 0;
  int device = 0;
  int refs = 0;  // the handle's reference plus one per mapping
  CUmemAllocationProp prop{};
  bool imported = false;  // another handle to an exported allocation's memory
};

struct Map {
  size_t size = 0;
  size_t offset = 0;
  CUmemGenericAllocationHandle handle = 0;
};

struct State {
  std::mutex mu;
  int devices = 1;
  uint64_t total = 4096ull << 20;
  Ctx ctx[8];
  uint64_t used[8] = {};
  uint64_t host_used = 0;                // cuMemCreate of host memory (NCCL's SHM buffers)
  std::map<uintptr_t, size_t> reserved;  // va -> size
  std::map<CUmemGenericAllocationHandle, Phys> phys;
  std::map<uintptr_t, Map> maps;       // va -> mapping
  std::map<uintptr_t, size_t> legacy;  // cuMemAlloc: va -> size
  std::map<uintptr_t, int> legacy_dev;
  CUmemGenericAllocationHandle next_handle = 0x1000;
  std::map<const void*, size_t> registered;          // host memory registered: start -> bytes
  std::map<const void*, bool> registered_read_only;  // start -> CU_MEMHOSTREGISTER_READ_ONLY
  uint64_t registered_dma = 0;  // bytes async copies moved to or from registered memory
  State() {
    if (const char* d = getenv("FAKE_CUDA_DEVICES"))
      devices = atoi(d) > 0 && atoi(d) <= 8 ? atoi(d) : 1;
    if (const char* m = getenv("FAKE_CUDA_MEM_MIB")) total = strtoull(m, nullptr, 10) << 20;
    for (int i = 0; i < 8; ++i) ctx[i].device = i;
  }
};

State& S() {
  static State* s = new State();
  return *s;
}

thread_local CUcontext t_current = nullptr;

int CurrentDevice() { return t_current != nullptr ? reinterpret_cast<Ctx*>(t_current)->device : 0; }

void FreePhysLocked(State& s, CUmemGenericAllocationHandle h) {
  auto it = s.phys.find(h);
  if (it == s.phys.end() || it->second.refs > 0) return;
  ::close(it->second.fd);
  if (!it->second.imported) {
    (it->second.device < 0 ? s.host_used : s.used[it->second.device]) -= it->second.size;
  }
  s.phys.erase(it);
}

// The mapping or legacy allocation holding addr: its start and size.
bool RangeOf(State& s, uintptr_t addr, uintptr_t* base, size_t* size, int* device) {
  auto l = s.legacy.upper_bound(addr);
  if (l != s.legacy.begin()) {
    --l;
    if (addr < l->first + l->second) {
      *base = l->first;
      *size = l->second;
      *device = s.legacy_dev[l->first];
      return true;
    }
  }
  auto m = s.maps.upper_bound(addr);
  if (m != s.maps.begin()) {
    --m;
    if (addr < m->first + m->second.size) {
      *base = m->first;
      *size = m->second.size;
      *device = s.phys[m->second.handle].device;
      return true;
    }
  }
  return false;
}

}  // namespace

extern "C" {

// Test hooks (not in the real driver): host memory registered with it, and bytes of device
// memory in use on a device.
uint64_t fake_cuda_registered_bytes() {
  std::lock_guard<std::mutex> l(S().mu);
  uint64_t n = 0;
  for (const auto& [p, b] : S().registered) n += b;
  return n;
}

uint64_t fake_cuda_registered_dma_bytes() {
  std::lock_guard<std::mutex> l(S().mu);
  return S().registered_dma;
}

uint64_t fake_cuda_host_used_bytes() {
  std::lock_guard<std::mutex> l(S().mu);
  return S().host_used;
}

uint64_t fake_cuda_used_bytes(int device) {
  std::lock_guard<std::mutex> l(S().mu);
  return device >= 0 && device < 8 ? S().used[device] : 0;
}

CUresult cuInit(unsigned int) { return CUDA_SUCCESS; }

CUresult cuDriverGetVersion(int* v) {
  *v = 13000;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char** s) {
  switch (r) {
    case CUDA_SUCCESS:
      *s = "no error";
      break;
    case CUDA_ERROR_OUT_OF_MEMORY:
      *s = "out of memory";
      break;
    case CUDA_ERROR_INVALID_VALUE:
      *s = "invalid argument";
      break;
    default:
      *s = "fake driver error";
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int* n) {
  *n = S().devices;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= S().devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

// A device's PCI bus id: "0000:NN:00.0", NN its ordinal + 0x10 in hex.
CUresult cuDeviceGetPCIBusId(char* out, int len, CUdevice d) {
  if (d < 0 || d >= S().devices || out == nullptr || len < 13) return CUDA_ERROR_INVALID_VALUE;
  snprintf(out, static_cast<size_t>(len), "0000:%02x:00.0", d + 0x10);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetByPCIBusId(CUdevice* d, const char* id) {
  unsigned bus = 0;
  if (id == nullptr || sscanf(id, "0000:%x:00.0", &bus) != 1) return CUDA_ERROR_INVALID_VALUE;
  const int ordinal = static_cast<int>(bus) - 0x10;
  if (ordinal < 0 || ordinal >= S().devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext* c, CUdevice d) {
  if (d < 0 || d >= S().devices) return CUDA_ERROR_INVALID_DEVICE;
  *c = reinterpret_cast<CUcontext>(&S().ctx[d]);
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice) { return CUDA_SUCCESS; }

CUresult cuCtxGetCurrent(CUcontext* c) {
  *c = t_current;
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c) {
  t_current = c;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* d) {
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *d = CurrentDevice();
  return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize() { return CUDA_SUCCESS; }

CUresult cuCtxEnablePeerAccess(CUcontext, unsigned int) { return CUDA_SUCCESS; }

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  int d = CurrentDevice();
  *total = s.total;
  *free_bytes = s.total - s.used[d];
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t bytes) {
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  int d = CurrentDevice();
  if (s.used[d] + bytes > s.total) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  s.legacy[reinterpret_cast<uintptr_t>(m)] = bytes;
  s.legacy_dev[reinterpret_cast<uintptr_t>(m)] = d;
  s.used[d] += bytes;
  *p = reinterpret_cast<CUdeviceptr>(m);
  return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.legacy.find(p);
  if (it == s.legacy.end()) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(p), it->second);
  s.used[s.legacy_dev[p]] -= it->second;
  s.legacy_dev.erase(p);
  s.legacy.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  uintptr_t b;
  size_t n;
  int d;
  if (!RangeOf(s, p, &b, &n, &d)) return CUDA_ERROR_NOT_FOUND;
  if (base) *base = b;
  if (size) *size = n;
  return CUDA_SUCCESS;
}

CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  uintptr_t b;
  size_t n;
  int d;
  if (!RangeOf(s, p, &b, &n, &d)) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      *static_cast<CUdeviceptr*>(data) = b;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      *static_cast<size_t*>(data) = n;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      *static_cast<unsigned int*>(data) = CU_MEMORYTYPE_DEVICE;
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      *static_cast<int*>(data) = d;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_NOT_SUPPORTED;
  }
}

CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute* attrs, void** data,
                                CUdeviceptr p) {
  for (unsigned int i = 0; i < n; ++i) {
    CUresult r = cuPointerGetAttribute(data[i], attrs[i], p);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle* h, CUdeviceptr p) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  if (!s.legacy.count(p)) return CUDA_ERROR_INVALID_VALUE;  // legacy memory only, as the driver
  memset(h, 0, sizeof(*h));
  memcpy(h->reserved, &p, sizeof(p));
  return CUDA_SUCCESS;
}

// Legacy memory is private to the fake's process: its handles open nowhere else.
CUresult cuIpcOpenMemHandle_v2(CUdeviceptr*, CUipcMemHandle, unsigned int) {
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuIpcCloseMemHandle(CUdeviceptr) { return CUDA_ERROR_INVALID_VALUE; }

CUresult cuMemGetAllocationGranularity(size_t* g, const CUmemAllocationProp*,
                                       CUmemAllocationGranularity_flags) {
  *g = kGranularity;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressReserve(CUdeviceptr* p, size_t size, size_t, CUdeviceptr, unsigned long long) {
  if (size == 0 || size % kGranularity != 0) return CUDA_ERROR_INVALID_VALUE;
  // Aligned like the driver's ranges (2 MiB), over-reserved then trimmed.
  char* m = static_cast<char*>(mmap(nullptr, size + kGranularity, PROT_NONE,
                                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  uintptr_t a = (reinterpret_cast<uintptr_t>(m) + kGranularity - 1) & ~(kGranularity - 1);
  if (a > reinterpret_cast<uintptr_t>(m)) munmap(m, a - reinterpret_cast<uintptr_t>(m));
  uintptr_t end = reinterpret_cast<uintptr_t>(m) + size + kGranularity;
  if (end > a + size) munmap(reinterpret_cast<void*>(a + size), end - (a + size));
  std::lock_guard<std::mutex> l(S().mu);
  S().reserved[a] = size;
  *p = a;
  return CUDA_SUCCESS;
}

CUresult cuMemAddressFree(CUdeviceptr p, size_t size) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.reserved.find(p);
  if (it == s.reserved.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(p), size);
  s.reserved.erase(it);
  return CUDA_SUCCESS;
}

CUresult cuMemCreate(CUmemGenericAllocationHandle* h, size_t size, const CUmemAllocationProp* prop,
                     unsigned long long) {
  if (size == 0 || size % kGranularity != 0 || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  static const char* stall = getenv("FAKE_CUDA_STALL_FILE");
  struct stat sb;
  while (stall != nullptr && ::stat(stall, &sb) == 0) ::usleep(20 * 1000);
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  // Host memory (NCCL's SHM buffers): device -1, counted apart.
  const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
                    prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                    prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  int d = host ? -1 : prop->location.id;
  if (!host && (d < 0 || d >= s.devices)) return CUDA_ERROR_INVALID_DEVICE;
  if (!host && s.used[d] + size > s.total) return CUDA_ERROR_OUT_OF_MEMORY;
  int fd = memfd_create("fake-gpu-memory", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Phys p;
  p.fd = fd;
  p.size = size;
  p.device = d;
  p.refs = 1;
  p.prop = *prop;
  *h = s.next_handle++;
  s.phys[*h] = p;
  (host ? s.host_used : s.used[d]) += size;
  return CUDA_SUCCESS;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle h) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.phys.find(h);
  if (it == s.phys.end()) return CUDA_ERROR_INVALID_VALUE;
  it->second.refs--;
  FreePhysLocked(s, h);
  return CUDA_SUCCESS;
}

CUresult cuMemMap(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                  unsigned long long) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.phys.find(h);
  if (it == s.phys.end() || offset + size > it->second.size) return CUDA_ERROR_INVALID_VALUE;
  auto r = s.reserved.upper_bound(va);
  if (r == s.reserved.begin()) return CUDA_ERROR_INVALID_VALUE;
  --r;
  if (va + size > r->first + r->second) return CUDA_ERROR_INVALID_VALUE;
  auto m = s.maps.upper_bound(va + size - 1);
  if (m != s.maps.begin()) {
    --m;
    if (m->first + m->second.size > va) return CUDA_ERROR_ALREADY_MAPPED;
  }
  if (mmap(reinterpret_cast<void*>(va), size, PROT_NONE, MAP_SHARED | MAP_FIXED, it->second.fd,
           static_cast<off_t>(offset)) == MAP_FAILED) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  s.maps[va] = Map{size, offset, h};
  it->second.refs++;
  return CUDA_SUCCESS;
}

CUresult cuMemUnmap(CUdeviceptr va, size_t size) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  bool any = false;
  for (auto it = s.maps.lower_bound(va); it != s.maps.end() && it->first < va + size;) {
    mmap(reinterpret_cast<void*>(it->first), it->second.size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    CUmemGenericAllocationHandle h = it->second.handle;
    it = s.maps.erase(it);
    s.phys[h].refs--;
    FreePhysLocked(s, h);
    any = true;
  }
  return any ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuMemSetAccess(CUdeviceptr va, size_t size, const CUmemAccessDesc* desc, size_t count) {
  int prot = PROT_NONE;
  for (size_t i = 0; i < count; ++i) {
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == PROT_NONE) prot = PROT_READ;
  }
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  for (auto it = s.maps.lower_bound(va); it != s.maps.end() && it->first < va + size; ++it) {
    if (mprotect(reinterpret_cast<void*>(it->first), it->second.size, prot) != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* h, void* addr) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto m = s.maps.upper_bound(reinterpret_cast<uintptr_t>(addr));
  if (m == s.maps.begin()) return CUDA_ERROR_INVALID_VALUE;
  --m;
  if (reinterpret_cast<uintptr_t>(addr) >= m->first + m->second.size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *h = m->second.handle;
  s.phys[*h].refs++;
  return CUDA_SUCCESS;
}

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                CUmemGenericAllocationHandle h) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.phys.find(h);
  if (it == s.phys.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = it->second.prop;
  return CUDA_SUCCESS;
}

CUresult cuMemExportToShareableHandle(void* out, CUmemGenericAllocationHandle h,
                                      CUmemAllocationHandleType type, unsigned long long) {
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  auto it = s.phys.find(h);
  if (it == s.phys.end() || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // As the driver: only a handle type asked for when it was created.
  if ((it->second.prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *static_cast<int*>(out) = dup(it->second.fd);
  return CUDA_SUCCESS;
}

// The descriptor is the memfd itself (a duplicate): what it names stays alive while it is open,
// as the real driver keeps memory alive for its shareable handles. An import is another handle to
// the same memory; its bytes count as the exporter's.
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* h, void* os_handle,
                                        CUmemAllocationHandleType type) {
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  if (h == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0) return CUDA_ERROR_INVALID_HANDLE;
  State& s = S();
  std::lock_guard<std::mutex> l(s.mu);
  Phys p;
  for (const auto& [k, o] : s.phys) {
    struct stat ost {};
    if (fstat(o.fd, &ost) == 0 && ost.st_ino == st.st_ino && ost.st_dev == st.st_dev)
      p.prop = o.prop;
  }
  p.fd = dup(fd);
  if (p.fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  p.size = static_cast<size_t>(st.st_size);
  p.device = p.prop.location.id;
  p.refs = 1;
  p.imported = true;
  *h = s.next_handle++;
  s.phys[*h] = p;
  return CUDA_SUCCESS;
}

CUresult cuMemHostAlloc(void** p, size_t bytes, unsigned int) {
  // As the real driver: pinned memory belongs to a context, so the thread needs a current one.
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *p = aligned_alloc(4096, (bytes + 4095) & ~size_t{4095});
  return *p != nullptr ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void* p) {
  free(p);
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t bytes, unsigned int flags) {
  if (t_current == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (p == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> l(S().mu);
  if (!S().registered.emplace(p, bytes).second) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  S().registered_read_only[p] = (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0;
  return CUDA_SUCCESS;
}

CUresult cuMemHostUnregister(void* p) {
  std::lock_guard<std::mutex> l(S().mu);
  S().registered_read_only.erase(p);
  return S().registered.erase(p) == 1 ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

CUresult cuStreamCreate(CUstream* st, unsigned int) {
  static int token;
  *st = reinterpret_cast<CUstream>(&token);
  return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream) { return CUDA_SUCCESS; }
CUresult cuStreamSynchronize(CUstream) { return CUDA_SUCCESS; }

// The copies are done when their call returns, so every event has happened once recorded.
CUresult cuEventCreate(CUevent* e, unsigned int) {
  static int token;
  *e = reinterpret_cast<CUevent>(&token);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent, CUstream) { return CUDA_SUCCESS; }
CUresult cuEventQuery(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventSynchronize(CUevent) { return CUDA_SUCCESS; }
CUresult cuEventDestroy_v2(CUevent) { return CUDA_SUCCESS; }

CUresult cuStreamBeginCapture_v2(CUstream, CUstreamCaptureMode) { return CUDA_SUCCESS; }
CUresult cuStreamEndCapture(CUstream, CUgraph* g) {
  if (g) *g = nullptr;
  return CUDA_SUCCESS;
}

// A copy whose host side lies in one registration is counted (registered_dma); one that would
// write into memory registered read-only is refused, as the device could not write there.
static CUresult CountRegisteredDma(const void* host, size_t n, bool device_writes) {
  std::lock_guard<std::mutex> l(S().mu);
  auto it = S().registered.upper_bound(host);
  if (it == S().registered.begin()) return CUDA_SUCCESS;
  --it;
  const char* start = static_cast<const char*>(it->first);
  const char* h = static_cast<const char*>(host);
  if (h + n > start + it->second) return CUDA_SUCCESS;
  if (device_writes && S().registered_read_only[it->first]) return CUDA_ERROR_INVALID_VALUE;
  S().registered_dma += n;
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream) {
  if (CUresult r = CountRegisteredDma(dst, n, true); r != CUDA_SUCCESS) return r;
  memcpy(dst, reinterpret_cast<void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream) {
  if (CUresult r = CountRegisteredDma(src, n, false); r != CUDA_SUCCESS) return r;
  memcpy(reinterpret_cast<void*>(dst), src, n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream) {
  memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return cuMemcpyDtoHAsync_v2(dst, src, n, nullptr);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return cuMemcpyHtoDAsync_v2(dst, src, n, nullptr);
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  memset(reinterpret_cast<void*>(dst), v, n);
  return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int, unsigned int, unsigned int, unsigned int,
                        unsigned int, unsigned int, unsigned int, CUstream, void** params, void**) {
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  reinterpret_cast<void (*)(void**)>(f)(params);
  return CUDA_SUCCESS;
}

// The per-thread default stream variant, as a real driver exports it.
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int sh,
                             CUstream st, void** params, void** extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, sh, st, params, extra);
}

CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int, cuuint64_t flags,
                             CUdriverProcAddressQueryResult* status) {
  const bool ptds = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) != 0;
  static const std::map<std::string, void*> kTable = {
#define FAKE_ENTRY(base, fn) {base, reinterpret_cast<void*>(&fn)},
      // clang-format off
      FAKE_ENTRY("cuInit", cuInit)
      FAKE_ENTRY("cuDriverGetVersion", cuDriverGetVersion)
      FAKE_ENTRY("cuGetErrorString", cuGetErrorString)
      FAKE_ENTRY("cuDeviceGetCount", cuDeviceGetCount)
      FAKE_ENTRY("cuDeviceGet", cuDeviceGet)
      FAKE_ENTRY("cuDeviceGetPCIBusId", cuDeviceGetPCIBusId)
      FAKE_ENTRY("cuDeviceGetByPCIBusId", cuDeviceGetByPCIBusId)
      FAKE_ENTRY("cuDevicePrimaryCtxRetain", cuDevicePrimaryCtxRetain)
      FAKE_ENTRY("cuDevicePrimaryCtxRelease", cuDevicePrimaryCtxRelease_v2)
      FAKE_ENTRY("cuCtxGetCurrent", cuCtxGetCurrent)
      FAKE_ENTRY("cuCtxSetCurrent", cuCtxSetCurrent)
      FAKE_ENTRY("cuCtxGetDevice", cuCtxGetDevice)
      FAKE_ENTRY("cuCtxSynchronize", cuCtxSynchronize)
      FAKE_ENTRY("cuCtxEnablePeerAccess", cuCtxEnablePeerAccess)
      FAKE_ENTRY("cuMemGetInfo", cuMemGetInfo_v2)
      FAKE_ENTRY("cuMemAlloc", cuMemAlloc_v2)
      FAKE_ENTRY("cuMemFree", cuMemFree_v2)
      FAKE_ENTRY("cuMemGetAddressRange", cuMemGetAddressRange_v2)
      FAKE_ENTRY("cuPointerGetAttribute", cuPointerGetAttribute)
      FAKE_ENTRY("cuPointerGetAttributes", cuPointerGetAttributes)
      FAKE_ENTRY("cuIpcGetMemHandle", cuIpcGetMemHandle)
      FAKE_ENTRY("cuIpcOpenMemHandle", cuIpcOpenMemHandle_v2)
      FAKE_ENTRY("cuIpcCloseMemHandle", cuIpcCloseMemHandle)
      FAKE_ENTRY("cuMemGetAllocationGranularity", cuMemGetAllocationGranularity)
      FAKE_ENTRY("cuMemAddressReserve", cuMemAddressReserve)
      FAKE_ENTRY("cuMemAddressFree", cuMemAddressFree)
      FAKE_ENTRY("cuMemCreate", cuMemCreate)
      FAKE_ENTRY("cuMemRelease", cuMemRelease)
      FAKE_ENTRY("cuMemMap", cuMemMap)
      FAKE_ENTRY("cuMemUnmap", cuMemUnmap)
      FAKE_ENTRY("cuMemSetAccess", cuMemSetAccess)
      FAKE_ENTRY("cuMemRetainAllocationHandle", cuMemRetainAllocationHandle)
      FAKE_ENTRY("cuMemGetAllocationPropertiesFromHandle", cuMemGetAllocationPropertiesFromHandle)
      FAKE_ENTRY("cuMemExportToShareableHandle", cuMemExportToShareableHandle)
      FAKE_ENTRY("cuMemImportFromShareableHandle", cuMemImportFromShareableHandle)
      FAKE_ENTRY("cuMemHostAlloc", cuMemHostAlloc)
      FAKE_ENTRY("cuMemFreeHost", cuMemFreeHost)
      FAKE_ENTRY("cuMemHostRegister", cuMemHostRegister_v2)
      FAKE_ENTRY("cuMemHostUnregister", cuMemHostUnregister)
      FAKE_ENTRY("cuStreamCreate", cuStreamCreate)
      FAKE_ENTRY("cuStreamDestroy", cuStreamDestroy_v2)
      FAKE_ENTRY("cuStreamSynchronize", cuStreamSynchronize)
      FAKE_ENTRY("cuStreamBeginCapture", cuStreamBeginCapture_v2)
      FAKE_ENTRY("cuStreamEndCapture", cuStreamEndCapture)
      FAKE_ENTRY("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync_v2)
      FAKE_ENTRY("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync_v2)
      FAKE_ENTRY("cuMemcpyDtoH", cuMemcpyDtoH_v2)
      FAKE_ENTRY("cuMemcpyDtoDAsync", cuMemcpyDtoDAsync_v2)
      FAKE_ENTRY("cuMemcpyHtoD", cuMemcpyHtoD_v2)
      FAKE_ENTRY("cuMemsetD8", cuMemsetD8_v2)
      FAKE_ENTRY("cuLaunchKernel", cuLaunchKernel)
      FAKE_ENTRY("cuGetProcAddress", cuGetProcAddress_v2)
  // clang-format on
#undef FAKE_ENTRY
  };
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::string name = symbol;
  if (ptds && name == "cuLaunchKernel") {
    *pfn = reinterpret_cast<void*>(&cuLaunchKernel_ptsz);
  } else {
    auto it = kTable.find(name);
    *pfn = it == kTable.end() ? nullptr : it->second;
  }
  if (status) *status = *pfn ? CU_GET_PROC_ADDRESS_SUCCESS : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return *pfn ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
