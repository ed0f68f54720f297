// cryo-gpu-park: can a leave-running checkpoint park a job's GPU data in GPU memory another
// process holds, instead of draining it to the host and refilling it (issue 41)?
//
// A periodic checkpoint holds the job for the drain (device to host) and the refill (host to
// device) because the driver's checkpoint must not find the job's allocations: 0.6-0.7 s each
// for 10 GB per rank. A copy within the GPU runs at HBM speed. This probe forks: the parent
// (cryod's stand-in) allocates N GiB it can export as a file descriptor and sends it to the child
// (the job). The child fills N GiB of its own (cuMemCreate, a pattern per 64 MiB chunk), then on
// the parent's word: imports the parent's memory, copies its data into it device to device,
// unmaps the import and releases its own memory (the address range kept). The parent locks,
// checkpoints, restores and unlocks the child through the driver's checkpoint API; the child
// re-creates its memory at the same address, copies the data back from the parked copy and
// checks every chunk. For comparison the child also times the same bytes device to host through
// a 256 MiB pinned buffer (the ring's shape). Two rounds. Prints one JSON object per round:
//   park_ms, unpark_ms (the copies and the maps around them), d2h_ms, lock_ms, checkpoint_ms,
//   restore_ms, unlock_ms, verified (every word as filled), gpu_free_after_checkpoint.
//
//   cryo-gpu-park --gib 8 [--rounds 2]
// Exits 0 when every round verified, 1 otherwise (and says why).

#include <cuda.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double Ms(Clock::time_point a) {
  return std::chrono::duration<double, std::milli>(Clock::now() - a).count();
}

constexpr size_t kChunk = 64ull << 20;

#define CK(call)                                                              \
  do {                                                                        \
    CUresult r_ = (call);                                                     \
    if (r_ != CUDA_SUCCESS) {                                                 \
      const char* s_ = nullptr;                                               \
      cuGetErrorString(r_, &s_);                                              \
      std::fprintf(stderr, "%s: %s failed: %s\n", who, #call, s_ ? s_ : "?"); \
      std::exit(3);                                                           \
    }                                                                         \
  } while (0)

const char* who = "park";

// One line of the protocol between the two processes: a word and a number.
struct Msg {
  char word[16];
  double a, b;
};
void Send(int s, const char* w, double a = 0, double b = 0, int fd = -1) {
  Msg m{};
  std::snprintf(m.word, sizeof m.word, "%s", w);
  m.a = a;
  m.b = b;
  iovec iov{&m, sizeof m};
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  if (fd >= 0) {
    h.msg_control = ctl;
    h.msg_controllen = sizeof ctl;
    cmsghdr* c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  }
  if (sendmsg(s, &h, 0) != sizeof m) std::exit(4);
}
Msg Recv(int s, int* fd = nullptr) {
  Msg m{};
  iovec iov{&m, sizeof m};
  char ctl[CMSG_SPACE(sizeof(int))] = {};
  msghdr h{};
  h.msg_iov = &iov;
  h.msg_iovlen = 1;
  h.msg_control = ctl;
  h.msg_controllen = sizeof ctl;
  if (recvmsg(s, &h, 0) != sizeof m) std::exit(4);
  if (fd) {
    *fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c)) {
      if (c->cmsg_type == SCM_RIGHTS) std::memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
  }
  return m;
}

CUmemAllocationProp DeviceProp(bool exportable) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  if (exportable) p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

void MapAt(CUdeviceptr va, size_t size, CUmemGenericAllocationHandle h) {
  CK(cuMemMap(va, size, 0, h, 0));
  CUmemAccessDesc a{};
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = 0;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CK(cuMemSetAccess(va, size, &a, 1));
}

uint32_t Pattern(size_t chunk, int round) {
  return static_cast<uint32_t>(chunk * 2654435761u) ^ (0x9e3779b9u * (round + 1));
}

// The job: its data, parked and brought back on the parent's word.
int Child(int s, size_t size, int rounds) {
  who = "job";
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUdeviceptr va = 0, parked = 0;
  CK(cuMemAddressReserve(&va, size, 0, 0, 0));
  CK(cuMemAddressReserve(&parked, size, 0, 0, 0));
  CUmemAllocationProp prop = DeviceProp(false);
  CUmemGenericAllocationHandle own = 0;
  CK(cuMemCreate(&own, size, &prop, 0));
  MapAt(va, size, own);
  void* pinned = nullptr;
  CK(cuMemAllocHost(&pinned, kChunk));
  CUstream st;
  CK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
  int fd = -1;
  Recv(s, &fd);  // the parent's memory
  if (fd < 0) return 5;
  Send(s, "ready");
  // The parent's memory imported and mapped at `parked`, `size` bytes copied from `src` to `dst`
  // (one of them `parked`), the import undone: the job holds none of it afterwards. The copy's ms.
  auto through_parked = [&](CUdeviceptr dst, CUdeviceptr src) {
    CUmemGenericAllocationHandle imp = 0;
    CK(cuMemImportFromShareableHandle(&imp, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    MapAt(parked, size, imp);
    const auto c0 = Clock::now();
    CK(cuMemcpyDtoDAsync(dst, src, size, st));
    CK(cuStreamSynchronize(st));
    const double ms = Ms(c0);
    CK(cuMemUnmap(parked, size));
    CK(cuMemRelease(imp));
    return ms;
  };
  for (int round = 0; round < rounds; ++round) {
    for (size_t c = 0; c * kChunk < size; ++c) {
      CK(cuMemsetD32(va + c * kChunk, Pattern(c, round), kChunk / 4));
    }
    CK(cuCtxSynchronize());
    // The drain's shape for comparison: the same bytes device to host through one pinned buffer.
    auto t = Clock::now();
    for (size_t off = 0; off < size; off += kChunk) {
      CK(cuMemcpyDtoHAsync(pinned, va + off, kChunk, st));
    }
    CK(cuStreamSynchronize(st));
    const double d2h_ms = Ms(t);
    Recv(s);  // "park"
    t = Clock::now();
    const double copy_ms = through_parked(parked, va);
    CK(cuMemUnmap(va, size));
    CK(cuMemRelease(own));
    const double park_ms = Ms(t);
    Send(s, "parked", park_ms, copy_ms);
    Recv(s);  // "unpark": the driver restored this process
    t = Clock::now();
    CK(cuMemCreate(&own, size, &prop, 0));
    MapAt(va, size, own);
    const double back_ms = through_parked(va, parked);
    const double unpark_ms = Ms(t);
    // Every chunk as it was filled.
    uint64_t bad = 0;
    for (size_t c = 0; c * kChunk < size; ++c) {
      CK(cuMemcpyDtoH(pinned, va + c * kChunk, kChunk));
      const uint32_t want = Pattern(c, round);
      const uint32_t* w = static_cast<const uint32_t*>(pinned);
      for (size_t i = 0; i < kChunk / 4; ++i) bad += w[i] != want;
    }
    Send(s, "back", unpark_ms, back_ms);
    Send(s, "checked", static_cast<double>(bad), d2h_ms);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  double gib = 8;
  int rounds = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--gib") gib = std::atof(argv[i + 1]);
    if (a == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  int sp[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp) != 0) return 2;
  // Whole chunks, and a multiple of the allocation granularity (2 MiB on these GPUs).
  const size_t size = ((static_cast<size_t>(gib * (1ull << 30)) + kChunk - 1) / kChunk) * kChunk;
  const pid_t child = fork();  // before either process touches CUDA
  if (child == 0) {
    close(sp[0]);
    return Child(sp[1], size, rounds);
  }
  close(sp[1]);
  const int s = sp[0];
  CUdevice dev;
  CUcontext ctx;
  CK(cuInit(0));
  CK(cuDeviceGet(&dev, 0));
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmemAllocationProp prop = DeviceProp(true);
  CUmemGenericAllocationHandle held = 0;
  CK(cuMemCreate(&held, size, &prop, 0));
  int fd = -1;
  CK(cuMemExportToShareableHandle(&fd, held, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  Send(s, "memory", 0, 0, fd);
  Recv(s);  // "ready"
  int failed = 0;
  for (int round = 0; round < rounds; ++round) {
    Send(s, "park");
    const Msg parked = Recv(s);
    CUcheckpointLockArgs la{};
    la.timeoutMs = 10000;
    CUcheckpointCheckpointArgs ca{};
    CUcheckpointRestoreArgs ra{};
    CUcheckpointUnlockArgs ua{};
    auto t = Clock::now();
    CK(cuCheckpointProcessLock(child, &la));
    const double lock_ms = Ms(t);
    t = Clock::now();
    CK(cuCheckpointProcessCheckpoint(child, &ca));
    const double ckpt_ms = Ms(t);
    size_t free_b = 0, total_b = 0;
    CK(cuMemGetInfo(&free_b, &total_b));
    t = Clock::now();
    CK(cuCheckpointProcessRestore(child, &ra));
    const double restore_ms = Ms(t);
    t = Clock::now();
    CK(cuCheckpointProcessUnlock(child, &ua));
    const double unlock_ms = Ms(t);
    Send(s, "unpark");
    const Msg back = Recv(s);
    const Msg checked = Recv(s);
    const bool ok = checked.a == 0;
    failed |= !ok;
    std::printf(
        "{\"round\": %d, \"bytes\": %zu, \"park_ms\": %.1f, \"park_copy_ms\": %.1f, "
        "\"unpark_ms\": %.1f, \"unpark_copy_ms\": %.1f, \"d2h_ms\": %.1f, \"lock_ms\": %.1f, "
        "\"checkpoint_ms\": %.1f, \"restore_ms\": %.1f, \"unlock_ms\": %.1f, "
        "\"gpu_free_after_checkpoint\": %zu, \"bad_words\": %.0f, \"verified\": %s}\n",
        round + 1, size, parked.a, parked.b, back.a, back.b, checked.b, lock_ms, ckpt_ms,
        restore_ms, unlock_ms, free_b, checked.a, ok ? "true" : "false");
    std::fflush(stdout);
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "park: the job exited with %d\n", status);
    return 1;
  }
  return failed;
}
