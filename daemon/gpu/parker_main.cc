// cryo-gpu-parker: cryod's parking process for one process of a leave-running checkpoint
// (lib/contract/gpu_fastpath.h, "Parking"; daemon/gpu/parker.h is cryod's side). It holds device
// memory on one GPU that the job's library copies its data into within the GPU while the job is
// held, so that the driver's checkpoint finds the job's context empty without a copy over PCIe;
// after the thaw it copies that memory into cryod's memfd, and cryod writes the files behind it.
//
//   cryo-gpu-parker --device PCI_BUS_ID --bytes N [--ring-files W] [--libcuda PATH]
//
// --ring-files: a restore's fill of W files follows; the pinned ring it reads through is made
// at once, beside the park's own allocation, rather than when the fill is asked for.
//
// Its stdin is a SOCK_SEQPACKET socket to cryod (messages of lib/contract/gpu_fastpath_wire.h):
//   -> {"ok": true, "bytes": M} with the memory's POSIX descriptor attached (M: N rounded up to
//      the GPU's granularity), or {"ok": false, "error"}
//   <- {"op": "copy", "bytes": B} with a memfd and a progress page attached: the first B bytes
//      into the memfd, "ready" raised after each piece, then the verdict (bad on any failure)
//   -> {"ok": true, "copy_ms"} once its memory is freed, or {"ok": false, "error"}
// or, for a restore (docs/proposals/restore-into-gpu.md), instead of the copy:
//   <- {"op": "fill", "bytes": B, "stripe": S} with the W files of the fast path's layout
//      attached (unit c of S bytes of the stream is in file c % W at (c / W) * S): each file read
//      by a thread of its own through two small pinned buffers, each piece hashed as the store
//      checksums (lib/base/chunked_xxh3.h) and copied to the memory at its place in the stream
//   -> {"ok": true, "files": [{"size", "checksum"}, ...], "fill_ms", "setup_ms", "first_ms",
//      "last_ms", "start_ms", "map_ms"} once all of it is there (the times: the whole read, the
//      wait for its ring, the first and the last reader done; before it, the process's start
//      until it offered its memory and the park's mapping);
//      the memory is kept until the socket closes (the job's library copies it within the GPU)
//      cryod compares the files with what the checkpoint recorded: the process only reads.
// It exits when the socket closes (cryod let go of it, or died), at any step: the memory goes
// with it. (Not PR_SET_PDEATHSIG: that follows the cryod thread that started it, which may end
// before the checkpoint does.) libcuda is opened at run time (the node's driver; a fake one in
// tests).

#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "lib/base/chunked_xxh3.h"
#include "lib/base/fd.h"
#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_wire.h"
#include "nlohmann/json.hpp"

namespace {

namespace wire = cryo::contract::gpu_fastpath;
constexpr int kSocket = 0;  // stdin: the socket to cryod
constexpr uint64_t kPiece = 64ull << 20;

#define PARKER_FUNCS(X)            \
  X(cuInit)                        \
  X(cuGetErrorString)              \
  X(cuDeviceGetByPCIBusId)         \
  X(cuDevicePrimaryCtxRetain)      \
  X(cuCtxSetCurrent)               \
  X(cuMemGetAllocationGranularity) \
  X(cuMemCreate)                   \
  X(cuMemRelease)                  \
  X(cuMemExportToShareableHandle)  \
  X(cuMemAddressReserve)           \
  X(cuMemMap)                      \
  X(cuMemSetAccess)                \
  X(cuMemUnmap)                    \
  X(cuMemAddressFree)              \
  X(cuMemcpyDtoH_v2)               \
  X(cuMemHostAlloc)                \
  X(cuMemFreeHost)                 \
  X(cuStreamCreate)                \
  X(cuStreamSynchronize)           \
  X(cuStreamDestroy_v2)            \
  X(cuMemcpyHtoDAsync_v2)

struct Cuda {
#define PARKER_FIELD(name) decltype(&::name) name = nullptr;
  PARKER_FUNCS(PARKER_FIELD)
#undef PARKER_FIELD
};

[[noreturn]] void Fail(const std::string& why) {
  (void)wire::SendMessage(kSocket, nlohmann::json{{"ok", false}, {"error", why}}.dump());
  std::fprintf(stderr, "cryo-gpu-parker: %s\n", why.c_str());
  std::exit(1);
}

std::string Err(const Cuda& c, const char* what, CUresult r) {
  const char* s = nullptr;
  if (c.cuGetErrorString == nullptr || c.cuGetErrorString(r, &s) != CUDA_SUCCESS || !s) s = "?";
  return std::string(what) + ": " + s;
}

// The park mapped into this process, readable and writable by its GPU.
CUresult MapPark(const Cuda& c, CUmemGenericAllocationHandle h, uint64_t bytes, CUdevice dev,
                 CUdeviceptr* va) {
  CUresult r = c.cuMemAddressReserve(va, bytes, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = c.cuMemMap(*va, bytes, 0, h, 0);
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (r == CUDA_SUCCESS) r = c.cuMemSetAccess(*va, bytes, &a, 1);
  return r;
}

constexpr uint64_t kFillPiece = 8ull << 20;
constexpr uint64_t kAlign = 4096;  // direct I/O's reads: whole blocks

struct FileFill {
  uint64_t size = 0;  // the file's, as found
  std::string checksum;
  std::string error;
  double done_ms = 0;  // since the fill was asked for
};

using FillClock = std::chrono::steady_clock;

double MsSince(FillClock::time_point t0) {
  return std::chrono::duration<double, std::milli>(FillClock::now() - t0).count();
}

// One reader's share of the pinned ring: two buffers, each with its own stream, so that a read
// overlaps the last piece's copy.
struct RingSlot {
  char* buf[2] = {nullptr, nullptr};
  CUstream strm[2] = {nullptr, nullptr};
};

// File k of the stream's W files read into the device memory at `va` through its ring slot. The
// checksum is taken only when the file is exactly the size the layout gives it: any other size
// is refused by cryod from the size alone.
FileFill FillOne(const Cuda& c, CUcontext ctx, CUdeviceptr va, int fd, int k, int w,
                 uint64_t stripe, uint64_t total, const RingSlot& ring, FillClock::time_point t0) {
  FileFill out;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    out.error = std::string("fstat of file ") + std::to_string(k) + ": " + std::strerror(errno);
    return out;
  }
  out.size = static_cast<uint64_t>(st.st_size);
  const uint64_t units = (total + stripe - 1) / stripe;
  uint64_t want = 0;
  for (uint64_t u = k; u < units; u += w) want += std::min(stripe, total - u * stripe);
  if (out.size != want) {  // cryod refuses it from the size
    out.done_ms = MsSince(t0);
    return out;
  }
  c.cuCtxSetCurrent(ctx);
  CUresult r = CUDA_SUCCESS;
  cryo::xxh3chunked::Hasher hasher;
  int b = 0;
  for (uint64_t u = k; out.error.empty() && u < units; u += w) {
    const uint64_t len = std::min(stripe, total - u * stripe);
    const uint64_t at = (u / w) * stripe;
    for (uint64_t off = 0; out.error.empty() && off < len; off += kFillPiece, b ^= 1) {
      const uint64_t n = std::min(kFillPiece, len - off);
      r = c.cuStreamSynchronize(ring.strm[b]);  // this buffer's last copy is done
      if (r != CUDA_SUCCESS) {
        out.error = Err(c, "copying to the GPU", r);
        break;
      }
      const size_t ask = static_cast<size_t>((n + kAlign - 1) / kAlign * kAlign);
      uint64_t got = 0;
      while (got < n) {
        const ssize_t m =
            ::pread(fd, ring.buf[b] + got, ask - got, static_cast<off_t>(at + off + got));
        if (m < 0 && errno == EINTR) continue;
        if (m <= 0) break;
        got += static_cast<uint64_t>(m);
      }
      if (got < n) {
        out.error = "file " + std::to_string(k) + " ended or failed at byte " +
                    std::to_string(at + off + got) + ": " + std::strerror(errno);
        break;
      }
      hasher.Update(ring.buf[b], n);
      r = c.cuMemcpyHtoDAsync_v2(va + u * stripe + off, ring.buf[b], n, ring.strm[b]);
      if (r != CUDA_SUCCESS) out.error = Err(c, "copying to the GPU", r);
    }
  }
  for (CUstream s : ring.strm) {
    r = c.cuStreamSynchronize(s);
    if (r != CUDA_SUCCESS && out.error.empty()) out.error = Err(c, "copying to the GPU", r);
  }
  if (out.error.empty()) out.checksum = hasher.Finish().checksum;
  out.done_ms = MsSince(t0);
  return out;
}

// The pinned ring of a fill, made from the start (--ring-files) on a thread of its own.
struct EarlyRing {
  std::thread maker;
  char* mem = nullptr;
  size_t bytes = 0;
  CUresult r = CUDA_SUCCESS;
  ~EarlyRing() {
    if (maker.joinable()) maker.join();  // main may return before a fill is asked for
  }
};

// What came before a fill, for its answer: the process's start until its memory was offered
// (the driver's start, the park's creation), and the park's mapping once the fill was asked for.
struct BeforeFill {
  double start_ms = 0;
  double map_ms = 0;
};

// The "fill" request: the files read into the park, every one at once; the answer names each
// file's size and checksum. The memory stays: the socket closing ends the process.
[[noreturn]] void Fill(const Cuda& c, CUcontext ctx, CUdeviceptr va, uint64_t park_bytes,
                       const nlohmann::json& req, const std::vector<cryo::UniqueFd>& fds,
                       EarlyRing& early, const BeforeFill& before) {
  if (!req.contains("bytes") || !req["bytes"].is_number_unsigned() || !req.contains("stripe") ||
      !req["stripe"].is_number_unsigned() || fds.empty()) {
    Fail("expected a fill with its bytes, its stripe and the files");
  }
  const uint64_t total = req["bytes"].get<uint64_t>();
  const uint64_t stripe = req["stripe"].get<uint64_t>();
  if (total > park_bytes) Fail("asked to fill more than the park holds");
  if (stripe == 0 || stripe % kFillPiece != 0) Fail("the stripe is not a multiple of 8 MiB");
  const auto t0 = FillClock::now();
  const int w = static_cast<int>(fds.size());
  // The whole ring in one pinned allocation (made early when it was asked for at the start)
  // and its streams made here, before any reader starts: one call into the driver instead of two
  // per reader.
  const size_t ring_bytes = static_cast<size_t>(2 * kFillPiece * w);
  if (early.maker.joinable()) early.maker.join();
  char* ring_mem = nullptr;
  CUresult r = CUDA_SUCCESS;
  if (early.mem != nullptr && early.r == CUDA_SUCCESS && early.bytes >= ring_bytes) {
    ring_mem = early.mem;
  } else {
    if (early.mem != nullptr) c.cuMemFreeHost(early.mem);
    r = c.cuMemHostAlloc(reinterpret_cast<void**>(&ring_mem), ring_bytes, CU_MEMHOSTALLOC_PORTABLE);
  }
  early.mem = nullptr;
  if (r != CUDA_SUCCESS) Fail(Err(c, "pinned buffers for the read", r));
  std::vector<RingSlot> ring(fds.size());
  for (int k = 0; k < w && r == CUDA_SUCCESS; ++k) {
    for (int b = 0; b < 2 && r == CUDA_SUCCESS; ++b) {
      ring[k].buf[b] = ring_mem + (2 * k + b) * kFillPiece;
      r = c.cuStreamCreate(&ring[k].strm[b], CU_STREAM_NON_BLOCKING);
    }
  }
  if (r != CUDA_SUCCESS) Fail(Err(c, "streams for the read", r));
  const double setup_ms = MsSince(t0);
  std::vector<FileFill> files(fds.size());
  std::vector<std::thread> ts;
  for (int k = 0; k < w; ++k) {
    ts.emplace_back(
        [&, k] { files[k] = FillOne(c, ctx, va, fds[k].get(), k, w, stripe, total, ring[k], t0); });
  }
  for (auto& t : ts) t.join();
  for (const RingSlot& s : ring) {
    for (CUstream st : s.strm) {
      if (st != nullptr) c.cuStreamDestroy_v2(st);
    }
  }
  c.cuMemFreeHost(ring_mem);
  nlohmann::json list = nlohmann::json::array();
  double first_ms = 0, last_ms = 0;
  for (const FileFill& f : files) {
    if (!f.error.empty()) Fail(f.error);
    list.push_back({{"size", f.size}, {"checksum", f.checksum}});
    first_ms = first_ms == 0 ? f.done_ms : std::min(first_ms, f.done_ms);
    last_ms = std::max(last_ms, f.done_ms);
  }
  // Where the time went, for cryod's log: the ring's making, and when the first and the last
  // reader were done.
  (void)wire::SendMessage(kSocket,
                          nlohmann::json{{"ok", true},
                                         {"files", list},
                                         {"fill_ms", static_cast<int64_t>(MsSince(t0))},
                                         {"setup_ms", static_cast<int64_t>(setup_ms)},
                                         {"first_ms", static_cast<int64_t>(first_ms)},
                                         {"last_ms", static_cast<int64_t>(last_ms)},
                                         {"start_ms", static_cast<int64_t>(before.start_ms)},
                                         {"map_ms", static_cast<int64_t>(before.map_ms)}}
                              .dump());
  // Held until cryod lets go: the job's library copies from it within the GPU.
  std::string text;
  std::vector<cryo::UniqueFd> more;
  while (wire::ReceiveMessage(kSocket, &text, &more)) {
  }
  std::exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const auto started = FillClock::now();
  std::string device, libcuda = "libcuda.so.1";
  uint64_t bytes = 0, ring_files = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--device") device = argv[i + 1];
    if (k == "--bytes") bytes = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--ring-files") ring_files = std::strtoull(argv[i + 1], nullptr, 10);
    if (k == "--libcuda") libcuda = argv[i + 1];
  }
  if (device.empty() || bytes == 0) Fail("usage: cryo-gpu-parker --device PCI_BUS_ID --bytes N");
  void* lib = ::dlopen(libcuda.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) Fail(std::string("cannot open ") + libcuda + ": " + ::dlerror());
  Cuda c;
#define PARKER_LOAD(name)                                           \
  c.name = reinterpret_cast<decltype(c.name)>(::dlsym(lib, #name)); \
  if (c.name == nullptr) Fail(std::string(libcuda) + " lacks " + #name);
  PARKER_FUNCS(PARKER_LOAD)
#undef PARKER_LOAD

  CUresult r = c.cuInit(0);
  if (r != CUDA_SUCCESS) Fail(Err(c, "cuInit", r));
  CUdevice dev = 0;
  r = c.cuDeviceGetByPCIBusId(&dev, device.c_str());
  if (r != CUDA_SUCCESS) Fail(Err(c, ("no GPU " + device).c_str(), r));
  CUcontext ctx = nullptr;
  r = c.cuDevicePrimaryCtxRetain(&ctx, dev);
  if (r == CUDA_SUCCESS) r = c.cuCtxSetCurrent(ctx);
  if (r != CUDA_SUCCESS) Fail(Err(c, "a context on the GPU", r));
  // Pinning the ring's pages takes a while (about 0.1 s for 16 files): beside the park's
  // allocation and cryod's next steps, not after the fill is asked for.
  EarlyRing early;
  if (ring_files > 0 && ring_files <= 1024) {
    early.bytes = static_cast<size_t>(2 * kFillPiece * ring_files);
    early.maker = std::thread([&c, ctx, &early] {
      early.r = c.cuCtxSetCurrent(ctx);
      if (early.r == CUDA_SUCCESS) {
        early.r = c.cuMemHostAlloc(reinterpret_cast<void**>(&early.mem), early.bytes,
                                   CU_MEMHOSTALLOC_PORTABLE);
      }
    });
  }
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gran = 0;
  r = c.cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS || gran == 0) Fail(Err(c, "the allocation granularity", r));
  bytes = (bytes + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  r = c.cuMemCreate(&h, bytes, &prop, 0);
  if (r != CUDA_SUCCESS) {
    Fail(Err(c, ("creating " + std::to_string(bytes) + " bytes on GPU " + device).c_str(), r));
  }
  int raw = -1;
  r = c.cuMemExportToShareableHandle(&raw, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  if (r != CUDA_SUCCESS) Fail(Err(c, "exporting the park", r));
  cryo::UniqueFd exported(raw);
  if (!wire::SendMessage(kSocket, nlohmann::json{{"ok", true}, {"bytes", bytes}}.dump(),
                         {exported.get()})) {
    return 1;
  }
  exported.reset();
  BeforeFill before;
  before.start_ms = MsSince(started);

  std::string text;
  std::vector<cryo::UniqueFd> fds;
  if (!wire::ReceiveMessage(kSocket, &text, &fds)) return 0;  // not wanted: the memory goes
  const nlohmann::json req = nlohmann::json::parse(text, nullptr, false);
  if (req.is_object() && req.value("op", "") == "fill") {
    CUdeviceptr fva = 0;
    const auto asked = FillClock::now();
    r = MapPark(c, h, bytes, dev, &fva);
    if (r != CUDA_SUCCESS) Fail(Err(c, "mapping the park", r));
    before.map_ms = MsSince(asked);
    Fill(c, ctx, fva, bytes, req, fds, early, before);
  }
  if (!req.is_object() || req.value("op", "") != "copy" || fds.size() != 2 ||
      !req.contains("bytes") || !req["bytes"].is_number_unsigned()) {
    Fail("expected a copy with a memfd and a progress page");
  }
  const uint64_t want = req["bytes"].get<uint64_t>();
  void* pg =
      ::mmap(nullptr, wire::kProgressBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[1].get(), 0);
  if (pg == MAP_FAILED) Fail(std::string("mapping the progress page: ") + std::strerror(errno));
  wire::ProgressWords progress(pg);
  auto fail = [&](const std::string& why) {
    progress.SetVerdictIfPending(wire::kVerdictBad);
    Fail(why);
  };
  if (want > bytes) fail("asked to copy more than the park holds");
  const auto t0 = std::chrono::steady_clock::now();
  struct stat st {};
  if (::fstat(fds[0].get(), &st) != 0) fail("fstat of the memfd");
  if (static_cast<uint64_t>(st.st_size) < want && ::ftruncate(fds[0].get(), want) != 0) {
    fail(std::string("growing the memfd: ") + std::strerror(errno));
  }
  char* host = want == 0 ? nullptr
                         : static_cast<char*>(::mmap(nullptr, want, PROT_READ | PROT_WRITE,
                                                     MAP_SHARED, fds[0].get(), 0));
  if (host == MAP_FAILED) fail(std::string("mapping the memfd: ") + std::strerror(errno));
  CUdeviceptr va = 0;
  r = MapPark(c, h, bytes, dev, &va);
  if (r != CUDA_SUCCESS) fail(Err(c, "mapping the park", r));
  for (uint64_t off = 0; off < want; off += kPiece) {
    const uint64_t n = std::min(kPiece, want - off);
    r = c.cuMemcpyDtoH_v2(host + off, va + off, n);
    if (r != CUDA_SUCCESS) fail(Err(c, "copying the park into cryod's memory", r));
    progress.Raise(off + n);
  }
  progress.SetVerdict(wire::kVerdictGood);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
          .count();
  // The GPU memory goes back at once: the job runs on beside it and may want it (cryod's write
  // from the memfd takes as long as the store does).
  c.cuMemUnmap(va, bytes);
  c.cuMemAddressFree(va, bytes);
  c.cuMemRelease(h);
  (void)wire::SendMessage(kSocket, nlohmann::json{{"ok", true}, {"copy_ms", ms}}.dump());
  return 0;
}
