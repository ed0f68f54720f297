#include "plugins/fastpath/registry.h"

#include <fcntl.h>
#include <stdint.h>
#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

namespace cryo::fastpath {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// Compared in full whatever differs first: the secret is all that guards a legacy IPC export.
bool SameSecret(const uint64_t a[2], const uint64_t b[2]) {
  return ((a[0] ^ b[0]) | (a[1] ^ b[1])) == 0;
}

CUmemAccessDesc ReadWrite(int device) {
  CUmemAccessDesc d{};
  d.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  d.location.id = device;
  d.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return d;
}

// Restores the calling thread's current context when it goes.
class CurrentContext {
 public:
  CurrentContext(const Driver& d, CUcontext want) : d_(d) {
    d_.cuCtxGetCurrent(&saved_);
    if (want != nullptr && want != saved_) changed_ = d_.cuCtxSetCurrent(want) == CUDA_SUCCESS;
  }
  ~CurrentContext() {
    if (changed_) d_.cuCtxSetCurrent(saved_);
  }

 private:
  const Driver& d_;
  CUcontext saved_ = nullptr;
  bool changed_ = false;
};

}  // namespace

CUresult Registry::Granularity(const CUmemAllocationProp& prop, size_t* gran) {
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = granularity_.find(prop.location.id);
    if (it != granularity_.end()) {
      *gran = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult r = d_.cuMemGetAllocationGranularity(gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return r;
  if (*gran == 0) return CUDA_ERROR_UNKNOWN;
  std::lock_guard<std::mutex> l(mu_);
  granularity_[prop.location.id] = *gran;
  return CUDA_SUCCESS;
}

CUcontext Registry::ContextFor(const CUmemAllocationProp& prop) {
  CUcontext cur = nullptr;
  CUdevice dev = -1;
  if (d_.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur != nullptr &&
      d_.cuCtxGetDevice(&dev) == CUDA_SUCCESS && dev == prop.location.id) {
    return cur;
  }
  // No context of that device is current: its primary context (retained for good; the job's
  // runtime holds it anyway).
  CUdevice want = 0;
  CUcontext primary = nullptr;
  if (d_.cuDeviceGet(&want, prop.location.id) == CUDA_SUCCESS &&
      d_.cuDevicePrimaryCtxRetain(&primary, want) == CUDA_SUCCESS) {
    return primary;
  }
  return cur;
}

CUresult Registry::MemAlloc(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr || bytes < min_bytes_ || bytes == 0) return d_.cuMemAlloc_v2(dptr, bytes);
  CUcontext ctx = nullptr;
  CUdevice dev = 0;
  if (d_.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr ||
      d_.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
    return d_.cuMemAlloc_v2(dptr, bytes);  // the driver says what is wrong
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  // Exportable, for legacy IPC of it (IpcExport), as the driver's cuMemAlloc memory is.
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  if (Granularity(prop, &gran) != CUDA_SUCCESS) return d_.cuMemAlloc_v2(dptr, bytes);
  const size_t padded = RoundUp(bytes, gran);

  std::vector<CUmemAccessDesc> access{ReadWrite(dev)};
  {
    std::lock_guard<std::mutex> l(mu_);
    for (int peer : peers_[ctx]) access.push_back(ReadWrite(peer));
  }
  CUdeviceptr va = 0;
  CUmemGenericAllocationHandle h = 0;
  // Any step that fails leaves the allocation to the driver, whose answer the job then gets
  // (out of memory above all: the same answer either way).
  if (d_.cuMemAddressReserve(&va, padded, 0, 0, 0) != CUDA_SUCCESS) {
    return d_.cuMemAlloc_v2(dptr, bytes);
  }
  if (d_.cuMemCreate(&h, padded, &prop, 0) != CUDA_SUCCESS) {
    d_.cuMemAddressFree(va, padded);
    return d_.cuMemAlloc_v2(dptr, bytes);
  }
  if (d_.cuMemMap(va, padded, 0, h, 0) != CUDA_SUCCESS) {
    d_.cuMemRelease(h);
    d_.cuMemAddressFree(va, padded);
    return d_.cuMemAlloc_v2(dptr, bytes);
  }
  if (d_.cuMemSetAccess(va, padded, access.data(), access.size()) != CUDA_SUCCESS) {
    d_.cuMemUnmap(va, padded);
    d_.cuMemRelease(h);
    d_.cuMemAddressFree(va, padded);
    return d_.cuMemAlloc_v2(dptr, bytes);
  }
  std::lock_guard<std::mutex> l(mu_);
  auto p = std::make_unique<Phys>();
  p->id = next_id_++;
  p->real = h;
  p->size = padded;
  p->prop = prop;
  p->ctx = ctx;
  p->ours = true;
  p->mappings = 1;
  Phys* raw = p.get();
  phys_[p->id] = std::move(p);
  Mapping m;
  m.va = va;
  m.size = padded;
  m.phys = raw;
  m.access.push_back(access);
  mappings_[va] = std::move(m);
  owned_[va] = Owned{va, bytes, padded, raw};
  contexts_.insert(ctx);
  *dptr = va;
  return CUDA_SUCCESS;
}

CUresult Registry::MemFree(CUdeviceptr dptr) {
  Owned o;
  CUmemGenericAllocationHandle real = 0;
  CUcontext ctx = nullptr;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = owned_.find(dptr);
    if (it == owned_.end()) return d_.cuMemFree_v2(dptr);
    o = it->second;
    real = o.phys->real;
    ctx = o.phys->ctx;
    owned_.erase(it);
    mappings_.erase(dptr);
    CloseShares(o.phys);  // its legacy IPC export, if any
    phys_.erase(o.phys->id);
  }
  // cuMemFree waits for the work that may still use the memory; so do we.
  {
    CurrentContext cur(d_, ctx);
    d_.cuCtxSynchronize();
  }
  CUresult r = d_.cuMemUnmap(o.va, o.padded);
  if (real != 0) d_.cuMemRelease(real);
  d_.cuMemAddressFree(o.va, o.padded);
  return r;
}

CUresult Registry::MemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  CUmemGenericAllocationHandle real = 0;
  CUresult r = d_.cuMemCreate(&real, size, prop, flags);
  if (r != CUDA_SUCCESS || handle == nullptr || prop == nullptr) {
    if (handle != nullptr) *handle = real;
    return r;
  }
  // Device memory, and host memory the driver made (NCCL's SHM buffers, which the library moves
  // once they are shared); anything else stays the driver's.
  const bool host = prop->location.type == CU_MEM_LOCATION_TYPE_HOST ||
                    prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
                    prop->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
  CUcontext ctx = nullptr;
  if (host) {
    d_.cuCtxGetCurrent(&ctx);  // its copies run on the context that made it
  } else if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    ctx = ContextFor(*prop);
  }
  if (ctx == nullptr && prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    *handle = real;
    return r;
  }
  std::lock_guard<std::mutex> l(mu_);
  auto p = std::make_unique<Phys>();
  p->id = next_id_++;
  p->real = real;
  p->size = size;
  p->prop = *prop;
  p->ctx = ctx;
  p->job_refs = 1;
  p->host_mem = host;
  *handle = kHandleTag | p->id;
  phys_[p->id] = std::move(p);
  if (ctx != nullptr) contexts_.insert(ctx);
  return CUDA_SUCCESS;
}

Phys* Registry::FindByJobHandle(CUmemGenericAllocationHandle h) {
  if ((h & kHandleMask) != kHandleTag) return nullptr;
  auto it = phys_.find(h & ~kHandleMask);
  return it == phys_.end() || it->second->ours ? nullptr : it->second.get();
}

Mapping* Registry::FindMapping(CUdeviceptr addr) {
  auto it = mappings_.upper_bound(addr);
  if (it == mappings_.begin()) return nullptr;
  --it;
  return addr < it->second.va + it->second.size ? &it->second : nullptr;
}

void Registry::CloseShares(Phys* p) {
  for (Share& e : p->exports) {
    if (e.fd >= 0) ::close(e.fd);
    e.fd = -1;
  }
  if (p->import.fd >= 0) ::close(p->import.fd);
  p->import.fd = -1;
}

void Registry::DropIfUnused(Phys* p) {
  if (p->ours || p->job_refs > 0 || p->mappings > 0) return;
  // The job let it go: so does the library, that the memory is freed as without it.
  CloseShares(p);
  phys_.erase(p->id);
}

CUresult Registry::MemRelease(CUmemGenericAllocationHandle handle) {
  if ((handle & kHandleMask) != kHandleTag) return d_.cuMemRelease(handle);
  std::lock_guard<std::mutex> l(mu_);
  Phys* p = FindByJobHandle(handle);
  if (p == nullptr || p->job_refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = CUDA_SUCCESS;
  // The library keeps one driver reference while the job holds any: the last one goes now.
  if (--p->job_refs == 0 && p->real != 0) r = d_.cuMemRelease(p->real);
  DropIfUnused(p);
  return r;
}

CUresult Registry::MemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if ((handle & kHandleMask) != kHandleTag) return d_.cuMemMap(ptr, size, offset, handle, flags);
  std::lock_guard<std::mutex> l(mu_);
  Phys* p = FindByJobHandle(handle);
  if (p == nullptr || p->job_refs <= 0) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = d_.cuMemMap(ptr, size, offset, p->real, flags);
  if (r != CUDA_SUCCESS) return r;
  Mapping m;
  m.va = ptr;
  m.size = size;
  m.offset = offset;
  m.phys = p;
  mappings_[ptr] = std::move(m);
  p->mappings++;
  // An import's size is what the job maps of it.
  if (p->imported) p->size = std::max(p->size, offset + size);
  return r;
}

CUresult Registry::MemUnmap(CUdeviceptr ptr, size_t size) {
  std::lock_guard<std::mutex> l(mu_);
  // cudaMalloc memory cannot be unmapped through this API; the library's backing of it must
  // not change that.
  for (auto it = mappings_.lower_bound(ptr); it != mappings_.end() && it->first < ptr + size;
       ++it) {
    if (it->second.phys->ours) return CUDA_ERROR_INVALID_VALUE;
  }
  if (Mapping* m = FindMapping(ptr); m != nullptr && m->phys->ours) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = d_.cuMemUnmap(ptr, size);
  if (r != CUDA_SUCCESS) return r;
  for (auto it = mappings_.lower_bound(ptr); it != mappings_.end() && it->first < ptr + size;) {
    Phys* p = it->second.phys;
    it = mappings_.erase(it);
    p->mappings--;
    DropIfUnused(p);
  }
  return r;
}

CUresult Registry::MemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  CUresult r = d_.cuMemSetAccess(ptr, size, desc, count);
  if (r != CUDA_SUCCESS || desc == nullptr) return r;
  std::lock_guard<std::mutex> l(mu_);
  Mapping* first = FindMapping(ptr);
  auto it = first != nullptr ? mappings_.find(first->va) : mappings_.lower_bound(ptr);
  for (; it != mappings_.end() && it->first < ptr + size; ++it) {
    it->second.access.emplace_back(desc, desc + count);
  }
  return r;
}

CUresult Registry::MemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  std::lock_guard<std::mutex> l(mu_);
  Mapping* m = FindMapping(reinterpret_cast<CUdeviceptr>(addr));
  if (m == nullptr) return d_.cuMemRetainAllocationHandle(handle, addr);
  Phys* p = m->phys;
  // cudaMalloc memory has no allocation handle for the job, as with the driver.
  if (p->ours || handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (p->job_refs == 0) {
    // The job had let its handle go (the mapping kept the memory): take a driver reference again.
    CUmemGenericAllocationHandle again = 0;
    CUresult r = d_.cuMemRetainAllocationHandle(&again, addr);
    if (r != CUDA_SUCCESS) return r;
  }
  p->job_refs++;
  *handle = kHandleTag | p->id;
  return CUDA_SUCCESS;
}

CUmemGenericAllocationHandle Registry::Translate(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> l(mu_);
  Phys* p = FindByJobHandle(handle);
  return p != nullptr ? p->real : handle;
}

void Registry::Exported(CUmemGenericAllocationHandle job_handle, CUmemAllocationHandleType type,
                        const void* out) {
  std::lock_guard<std::mutex> l(mu_);
  Phys* p = FindByJobHandle(job_handle);
  if (p == nullptr) {
    // Memory the library does not track (host memory, say) left the process: it cannot carry
    // it, and says so (cryod refuses such a job up front).
    foreign_shares_++;
    return;
  }
  int kept = -1;
  if (type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR && out != nullptr) {
    kept = ::fcntl(*static_cast<const int*>(out), F_DUPFD_CLOEXEC, 3);
  }
  // Shared another way (a fabric handle, say), or not kept: the driver's to move, as before.
  if (kept < 0) {
    p->exported = true;
    return;
  }
  p->exports.push_back({next_id_++, kept});
}

CUresult Registry::MemImport(CUmemGenericAllocationHandle* handle, void* os_handle,
                             CUmemAllocationHandleType type) {
  CUmemGenericAllocationHandle real = 0;
  CUresult r = d_.cuMemImportFromShareableHandle(&real, os_handle, type);
  if (r != CUDA_SUCCESS || handle == nullptr) {
    if (handle != nullptr) *handle = real;
    return r;
  }
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(os_handle));
  const int kept =
      type == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ? ::fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
  CUmemAllocationProp prop{};
  if (kept < 0 || d_.cuMemGetAllocationPropertiesFromHandle(&prop, real) != CUDA_SUCCESS) {
    if (kept >= 0) ::close(kept);
    std::lock_guard<std::mutex> l(mu_);
    foreign_shares_++;
    *handle = real;
    return r;
  }
  std::lock_guard<std::mutex> l(mu_);
  auto p = std::make_unique<Phys>();
  p->id = next_id_++;
  p->real = real;
  p->prop = prop;
  p->job_refs = 1;
  p->imported = true;
  p->import = {p->id, kept};
  *handle = kHandleTag | p->id;
  phys_[p->id] = std::move(p);
  return CUDA_SUCCESS;
}

Shares Registry::CurrentShares() {
  std::lock_guard<std::mutex> l(mu_);
  Shares s;
  for (const auto& [id, p] : phys_) {
    for (const Share& e : p->exports) s.exports.push_back(e);
    if (p->imported) s.imports.push_back(p->import);
  }
  return s;
}

bool Registry::IpcExport(CUdeviceptr dptr, int32_t self, IpcHandle* h, CUresult* r) {
  std::lock_guard<std::mutex> l(mu_);
  const Owned* o = OwnedAt(dptr);
  if (o == nullptr || dptr >= o->va + o->requested) return false;
  Phys* p = o->phys;
  *r = CUDA_SUCCESS;
  if (p->ipc_id == 0) {
    if (p->real == 0) {
      *r = CUDA_ERROR_ILLEGAL_STATE;  // out of the GPU (callers hold the gate)
      return true;
    }
    int fd = -1;
    *r = d_.cuMemExportToShareableHandle(&fd, p->real, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (*r != CUDA_SUCCESS) return true;
    uint64_t secret[2] = {0, 0};
    if (::getrandom(secret, sizeof(secret), 0) != static_cast<ssize_t>(sizeof(secret))) {
      ::close(fd);
      *r = CUDA_ERROR_OPERATING_SYSTEM;
      return true;
    }
    p->ipc_id = next_id_++;
    memcpy(p->ipc_secret, secret, sizeof(secret));
    p->exports.push_back({p->ipc_id, fd});
  }
  h->pid = self;
  h->id = p->ipc_id;
  h->size = p->size;
  memcpy(h->secret, p->ipc_secret, sizeof(h->secret));
  return true;
}

Registry::IpcLookup Registry::IpcShare(uint64_t id, const uint64_t secret[2], int* fd,
                                       uint64_t* size) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& [pid, p] : phys_) {
    if (p->ipc_id != id || id == 0) continue;
    if (!SameSecret(p->ipc_secret, secret)) return IpcLookup::kUnknown;
    for (const Share& e : p->exports) {
      if (e.id != id) continue;
      if (e.fd < 0) return IpcLookup::kBusy;  // drained: exported again at the refill
      *fd = ::fcntl(e.fd, F_DUPFD_CLOEXEC, 3);
      *size = p->size;
      return *fd >= 0 ? IpcLookup::kFound : IpcLookup::kBusy;
    }
  }
  return IpcLookup::kUnknown;
}

bool Registry::IpcOpened(const IpcHandle& h, CUdeviceptr* dptr) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [va, o] : ipc_opened_) {
    if (o.pid == h.pid && o.id == h.id && SameSecret(o.secret, h.secret)) {
      o.refs++;
      *dptr = va;
      return true;
    }
  }
  return false;
}

CUresult Registry::IpcOpen(const IpcHandle& h, int fd, CUdeviceptr* dptr) {
  CUdevice dev = 0;
  if (d_.cuCtxGetDevice(&dev) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_CONTEXT;
  size_t gran = 0;
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  if (h.size == 0 || Granularity(prop, &gran) != CUDA_SUCCESS || h.size % gran != 0) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // Imported as NCCL imports a descriptor: the library then carries it like NCCL's.
  CUmemGenericAllocationHandle job = 0;
  CUresult r = MemImport(&job, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr va = 0;
  r = d_.cuMemAddressReserve(&va, h.size, 0, 0, 0);
  if (r == CUDA_SUCCESS) {
    r = MemMap(va, h.size, 0, job, 0);
    const CUmemAccessDesc access = ReadWrite(dev);
    if (r == CUDA_SUCCESS) r = MemSetAccess(va, h.size, &access, 1);
    if (r != CUDA_SUCCESS) {
      MemUnmap(va, h.size);
      d_.cuMemAddressFree(va, h.size);
    }
  }
  MemRelease(job);  // its mapping holds it, as the driver's IPC mapping holds the memory
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> l(mu_);
  ipc_opened_[va] = IpcOpening{h.pid, h.id, {h.secret[0], h.secret[1]}, h.size, 1};
  *dptr = va;
  return CUDA_SUCCESS;
}

bool Registry::IpcClose(CUdeviceptr dptr, CUresult* r) {
  size_t size = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = ipc_opened_.find(dptr);
    if (it == ipc_opened_.end()) return false;
    *r = CUDA_SUCCESS;
    if (--it->second.refs > 0) return true;
    size = it->second.size;
    ipc_opened_.erase(it);
  }
  *r = MemUnmap(dptr, size);  // the last reference: the import goes with it
  d_.cuMemAddressFree(dptr, size);
  return true;
}

void Registry::ForeignShare(int delta) {
  std::lock_guard<std::mutex> l(mu_);
  if (delta > 0 || foreign_shares_ > 0) foreign_shares_ += delta;
}

const Owned* Registry::OwnedAt(CUdeviceptr ptr) const {
  auto it = owned_.upper_bound(ptr);
  if (it == owned_.begin()) return nullptr;
  --it;
  return ptr < it->second.va + it->second.padded ? &it->second : nullptr;
}

bool Registry::OwnedRange(CUdeviceptr ptr, CUdeviceptr* base, size_t* size) {
  std::lock_guard<std::mutex> l(mu_);
  const Owned* o = OwnedAt(ptr);
  if (o == nullptr || ptr >= o->va + o->requested) return false;
  if (base != nullptr) *base = o->va;
  if (size != nullptr) *size = o->requested;
  return true;
}

bool Registry::InOwnedPadding(CUdeviceptr ptr) {
  std::lock_guard<std::mutex> l(mu_);
  const Owned* o = OwnedAt(ptr);
  return o != nullptr && ptr >= o->va + o->requested;
}

void Registry::PeerAccessEnabled(CUcontext peer, CUdevice accessor) {
  std::lock_guard<std::mutex> l(mu_);
  if (!peers_[peer].insert(accessor).second) return;
  const CUmemAccessDesc desc = ReadWrite(accessor);
  for (auto& [va, o] : owned_) {
    if (o.phys->ctx != peer) continue;
    if (d_.cuMemSetAccess(va, o.padded, &desc, 1) == CUDA_SUCCESS) {
      mappings_[va].access.push_back({desc});
    }
  }
}

RegistryStats Registry::Stats() {
  std::lock_guard<std::mutex> l(mu_);
  RegistryStats s;
  s.foreign_allocations = foreign_shares_;
  for (const auto& [id, p] : phys_) {
    if (p->exported) {
      s.foreign_allocations++;
      continue;
    }
    s.exports += p->exports.size();
    if (p->imported) {
      s.imports++;
      continue;
    }
    if (!Moved(*p)) continue;
    s.owned_bytes += p->size;
    s.owned_allocations++;
    if (p->ours) s.owned_cumemalloc++;
  }
  return s;
}

std::set<CUcontext> Registry::contexts() {
  std::lock_guard<std::mutex> l(mu_);
  return contexts_;
}

}  // namespace cryo::fastpath
