#pragma once

// What the fast-path library knows of a job's device memory, and the bodies of the CUDA calls
// that change it. Two kinds of memory are owned, i.e. moved by the library instead of the driver:
//  - cuMemAlloc (cudaMalloc) allocations of at least min_bytes: the library backs them with the
//    virtual memory management API (a reserved address range, a physical allocation mapped on
//    it), so that the physical memory can be released and created again at the same address;
//  - memory the job itself created with cuMemCreate and mapped with cuMemMap (PyTorch's
//    expandable segments, NCCL's cuMem path). The job gets a handle of the library's making
//    for each such allocation, so the driver's handle may change under it. Host memory made so
//    (NCCL's SHM transport) is tracked the same way, and moved only while exported.
// Memory shared between processes as POSIX descriptors (NCCL's P2P over cuMem) is owned too
// (docs/proposals/nccl-shared-memory.md): an exported allocation is moved by its exporter like
// any other, and each export keeps a duplicate of the descriptor the job got, by which cryod
// finds its importers; an import is an allocation of the library's making whose data is the
// exporter's: the importer only unmaps and releases it, and imports it again from the new
// descriptor its exporter makes after a refill.
// Everything else (smaller cuMemAlloc, stream-ordered pools, managed memory, memory shared
// another way) is left to the driver's checkpoint, exactly as without the library.
//
// Thread-safe: one mutex over the tables. The callers hold the gate (gate.h) around the calls
// that change the tables, so nothing changes while memory is moved.

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "plugins/fastpath/driver.h"

namespace cryo::fastpath {

// A descriptor that shares an allocation with another process: the library's duplicate of it.
struct Share {
  uint64_t id = 0;
  int fd = -1;  // -1 while the allocation is out of the GPU
};

// One physical allocation the library tracks.
struct Phys {
  uint64_t id = 0;
  CUmemGenericAllocationHandle real = 0;  // the driver's handle; 0 while moved out
  size_t size = 0;
  CUmemAllocationProp prop{};
  CUcontext ctx = nullptr;  // for copies; the device's primary context when none was current
  bool ours = false;        // made by the library for an owned cuMemAlloc
  // Host memory of the job's cuMemCreate (NCCL's SHM buffers): moved by the library only while
  // exported (shared with another process, which the driver cannot restore); else the driver's.
  bool host_mem = false;
  int job_refs = 0;            // the job's references to its handle (not for ours)
  bool exported = false;       // shared another way than a POSIX descriptor: the driver's to move
  std::vector<Share> exports;  // its exports as POSIX descriptors (moved by the library)
  bool imported = false;       // another process's allocation, imported: its data is theirs
  Share import;                // imported: the descriptor it came from
  // Legacy IPC (an owned cuMemAlloc given to cuIpcGetMemHandle): the id of its export among
  // `exports`, and the secret the handle carries; 0 while never asked.
  uint64_t ipc_id = 0;
  uint64_t ipc_secret[2] = {0, 0};
  int mappings = 0;  // how many Mapping entries name it
  // Where its bytes are while it is moved out.
  char* host = nullptr;        // a host copy (mmap), or null when only in files
  uint64_t stream_offset = 0;  // its place in the drain's byte stream
};

// One mapping of (part of) a physical allocation at a virtual address.
struct Mapping {
  CUdeviceptr va = 0;
  size_t size = 0;
  size_t offset = 0;  // into the physical allocation
  Phys* phys = nullptr;
  // cuMemSetAccess calls that covered this mapping, in order, replayed after a refill.
  std::vector<std::vector<CUmemAccessDesc>> access;
};

// A cuMemAlloc the library serves.
struct Owned {
  CUdeviceptr va = 0;
  size_t requested = 0;
  size_t padded = 0;
  Phys* phys = nullptr;
};

// What a legacy IPC handle of the library's making carries (legacy_ipc.h).
struct IpcHandle {
  int32_t pid = 0;    // the exporter, as the job's processes see it
  uint64_t id = 0;    // its export's id in the exporter's library
  uint64_t size = 0;  // the allocation's bytes as mapped (rounded to the granularity)
  uint64_t secret[2] = {0, 0};
};

struct RegistryStats {
  uint64_t owned_bytes = 0;           // physical bytes the library would move
  uint64_t owned_allocations = 0;     // physical allocations the library would move
  uint64_t owned_cumemalloc = 0;      // of those, cuMemAlloc served by the library
  uint64_t foreign_allocations = 0;   // tracked but the driver's to move (shared another way)
  uint64_t exports = 0, imports = 0;  // shared as POSIX descriptors, owned
};

// What a process shares now, for cryod to match importers to exporters.
struct Shares {
  std::vector<Share> exports, imports;
};

class Registry {
 public:
  // Handles the library gives the job for its own cuMemCreate: never a real handle's value
  // (those are small numbers or user-space addresses), so untranslated handles pass through.
  static constexpr uint64_t kHandleTag = 0xcf00000000000000ull;
  static constexpr uint64_t kHandleMask = 0xff00000000000000ull;

  Registry(const Driver& d, size_t min_bytes) : d_(d), min_bytes_(min_bytes) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The job's calls, with the driver's semantics.
  CUresult MemAlloc(CUdeviceptr* dptr, size_t bytes);
  CUresult MemFree(CUdeviceptr dptr);
  CUresult MemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                     const CUmemAllocationProp* prop, unsigned long long flags);
  CUresult MemRelease(CUmemGenericAllocationHandle handle);
  CUresult MemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags);
  CUresult MemUnmap(CUdeviceptr ptr, size_t size);
  CUresult MemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count);
  CUresult MemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr);
  // The driver's handle for one the job holds (itself when not the library's).
  CUmemGenericAllocationHandle Translate(CUmemGenericAllocationHandle handle);
  // After the job's successful export of `job_handle` as `type`; `out` is what it got.
  void Exported(CUmemGenericAllocationHandle job_handle, CUmemAllocationHandleType type,
                const void* out);
  // cuMemImportFromShareableHandle, with the driver's semantics.
  CUresult MemImport(CUmemGenericAllocationHandle* handle, void* os_handle,
                     CUmemAllocationHandleType type);
  Shares CurrentShares();
  // An owned cuMemAlloc containing ptr (its requested range): base and size.
  bool OwnedRange(CUdeviceptr ptr, CUdeviceptr* base, size_t* size);
  // Whether ptr lies in an owned cuMemAlloc's padding (not valid memory for the job).
  bool InOwnedPadding(CUdeviceptr ptr);
  // Legacy IPC of owned memory (legacy_ipc.h). cuIpcGetMemHandle on an owned cuMemAlloc
  // containing dptr: exported once as a POSIX descriptor the library keeps, and described in *h
  // (the same for every call on that allocation), *r the call's result. False when dptr is not
  // in an owned cuMemAlloc (the driver's to answer).
  bool IpcExport(CUdeviceptr dptr, int32_t self, IpcHandle* h, CUresult* r);
  // For the channel's "share": a duplicate of export `id`'s descriptor when `secret` is its own.
  enum class IpcLookup { kFound, kBusy, kUnknown };
  IpcLookup IpcShare(uint64_t id, const uint64_t secret[2], int* fd, uint64_t* size);
  // An earlier open of `h` in this process: its address, one more reference taken.
  bool IpcOpened(const IpcHandle& h, CUdeviceptr* dptr);
  // cuIpcOpenMemHandle with the exporter's descriptor `fd` (the caller's to close): imported,
  // mapped at a new address and made accessible to the current context's device.
  CUresult IpcOpen(const IpcHandle& h, int fd, CUdeviceptr* dptr);
  // cuIpcCloseMemHandle: false when dptr is not an address IpcOpen gave.
  bool IpcClose(CUdeviceptr dptr, CUresult* r);
  // Memory the job shares in a way the library cannot carry (a driver's own legacy IPC handle
  // opened: +1, closed again: -1): counted, so that cryod refuses the job up front.
  void ForeignShare(int delta);

  // After cuCtxEnablePeerAccess(peer) from a context on `accessor`: owned memory of `peer`
  // becomes accessible from `accessor`, as the driver does for cuMemAlloc memory.
  void PeerAccessEnabled(CUcontext peer, CUdevice accessor);

  RegistryStats Stats();
  size_t min_bytes() const { return min_bytes_; }

  // For the mover. Hold lock() while using the tables.
  std::mutex& mu() { return mu_; }
  std::map<uint64_t, std::unique_ptr<Phys>>& phys() { return phys_; }
  std::map<CUdeviceptr, Mapping>& mappings() { return mappings_; }
  // Contexts seen, for synchronizing before a drain.
  std::set<CUcontext> contexts();
  // Whether the job holds a reference through its handle (then the library holds a driver
  // reference for it, which a refill must take again).
  static bool HoldsReference(const Phys& p) { return p.ours || p.job_refs > 0; }
  // Whether the library moves it (else: the driver's checkpoint, or its exporter's).
  static bool Moved(const Phys& p) {
    return !p.exported && !p.imported && (!p.host_mem || !p.exports.empty());
  }

 private:
  Phys* FindByJobHandle(CUmemGenericAllocationHandle h);
  Mapping* FindMapping(CUdeviceptr addr);
  // The owned cuMemAlloc whose padded range holds ptr, or null. Hold mu_.
  const Owned* OwnedAt(CUdeviceptr ptr) const;
  void DropIfUnused(Phys* p);
  static void CloseShares(Phys* p);
  CUcontext ContextFor(const CUmemAllocationProp& prop);
  CUresult Granularity(const CUmemAllocationProp& prop, size_t* gran);

  const Driver& d_;
  const size_t min_bytes_;
  std::mutex mu_;
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::unique_ptr<Phys>> phys_;
  std::map<CUdeviceptr, Mapping> mappings_;
  std::map<CUdeviceptr, Owned> owned_;
  std::map<int, size_t> granularity_;         // per device
  std::map<CUcontext, std::set<int>> peers_;  // owner context -> devices that may access it
  std::set<CUcontext> contexts_;
  uint64_t foreign_shares_ = 0;  // shared untracked memory, or imported another way
  // Addresses IpcOpen gave: (exporter pid, export id) and the references the job holds.
  struct IpcOpening {
    int32_t pid = 0;
    uint64_t id = 0;
    uint64_t secret[2] = {0, 0};
    size_t size = 0;
    int refs = 0;
  };
  std::map<CUdeviceptr, IpcOpening> ipc_opened_;
};

}  // namespace cryo::fastpath
