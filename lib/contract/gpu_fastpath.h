#pragma once

// What cryod and the GPU fast-path library (libcryo_gpu_fastpath.so, loaded into a job with
// LD_PRELOAD) agree on. The library moves the job's device memory itself, at PCIe speed, before
// the driver's checkpoint, and back after the driver's restore (docs/gpu.md, "Fast path").
//
// Channel: a SOCK_SEQPACKET unix socket in the abstract namespace of the job's network
// namespace, named kSocketPrefix + the process's pid as the process itself sees it (its pid
// namespace). The library creates it when the process first uses CUDA; cryod connects from the
// job's network namespace. Only root and the job's own user may connect.
//
// Who may drive it (version 6): before it answers a status, drain or refill, the library sends
//   {"ok": false, "code": "prove", "error", "address": A, "length": L}
// (L fresh random bytes at address A of its memory) and waits up to 2 s for
//   {"op": "prove", "version": 6, "secret": "the L bytes in hex"}
// which only a peer that may ptrace the process can send (process_vm_readv): cryod, with
// CAP_SYS_PTRACE, or the job's own user with no fewer capabilities. Then it serves the request
// on the same connection; a wrong or missing proof is answered with "code": "denied". A root
// process without capabilities (a sidecar, a debug container) can thus connect but not drive
// the job's memory. "share" carries its own secret instead: the job's other processes may not be
// allowed to ptrace the exporter.
//
// One connection carries one request (JSON, at most kMaxMessage bytes, file descriptors attached
// with SCM_RIGHTS) and its replies (a held drain's "go" too); then the library closes it, so that
// no connected socket is left for CRIU to dump. Both sides read and write these messages only
// through the types of gpu_fastpath_messages.h. Every request carries "version": the oldest version
// that has all the request uses (absent means 1), so that a job started under an older library is
// still spoken to in its version. The library answers a version outside what it speaks with "code":
// "version", and cryod refuses a library whose status "version" it does not speak, before asking it
// anything else. A request that does not decode is answered with "code": "bad_request".
//
//   {"op": "status", "version": V}
//     -> {"ok", "pid", "version", "state", "owned_bytes", "owned_allocations",
//         "foreign_allocations", "calls": {...}, "exports": [{"id", "fd"}], "imports"}
//   {"op": "drain", "version": V, "threads": N, "timeout_ms": T, "stripe_bytes": U, "files": W}
//     (+ W descriptors of empty files opened for writing; W = 0 keeps the data in the process)
//     Shuts the gate on the job's GPU work, waits for calls in flight, synchronizes, copies every
//     owned allocation into host memory, releases the device memory.
//     -> {"ok", "event": "drained", "bytes", "allocations", "quiesce_ms", "copy_ms",
//         "release_ms", "total_ms"}
//     with W > 0, then, once the data is in the files and out of the process's memory:
//     -> {"ok", "event": "saved", "files": [{"size", "checksum"}], "write_ms"}
//     A failure answers {"ok": false, "error", "rolled_back", "code"}: the memory is back on the
//     GPU and the job runs on, unless "rolled_back" is false (then cryod rolls back with
//     "refill"). "code" is "deadline" when the job's GPU work did not stop within timeout_ms.
//     Version 2, the cut across the processes of one job: with "hold_ms": H > 0 the library
//     answers, once the gate is shut and the work synchronized and before anything moves,
//     -> {"ok", "event": "quiesced", "quiesce_ms", "exports": [{"id", "fd"}],
//         "imports": [{"id", "fd"}], "foreign_shares"}
//     (what it shares with other processes, by the numbers of the descriptors the library keeps,
//     see "Shared memory") and waits up to H ms on the same connection for
//     {"op": "go", "version": 2}, after which the drain goes on as above. Anything else (the
//     connection closed, another message, H passed) opens the gate again and, where it can,
//     answers a failure with "rolled_back". With "align": true as well, the library first only
//     shuts the gate and answers
//     -> {"ok", "event": "gated", "collectives": C, "counting"}
//     (C: the NCCL kernels it launched so far), waits for {"op": "align", "to": T,
//     "timeout_ms"}, lets the job run on until it has launched T of them (the next one held),
//     shuts the gate again, synchronizes, and answers "quiesced" as above. cryod holds every
//     process of a job this way before it lets any of them drain (docs/gpu.md, "The cut across
//     ranks").
//   {"op": "refill", "version": V, "threads": N, "files": W, "expected": [{"size", "checksum"}]}
//     (+ the W descriptors of the drain's files, opened for reading, when the data is in files)
//     Maps device memory back at the same addresses, copies the data in, checks every file
//     against "expected" before the job's GPU work may go on, and opens the gate. A file that
//     does not match fails with "code": "data_loss" and the job stays held.
//     -> {"ok", "bytes", "allocate_ms", "copy_ms", "total_ms", "files": [{"size", "checksum"}],
//         "exports": [{"id", "fd"}], "importing"}
//     Version 2: when the process imported memory from others ("importing": true), its gate
//     stays shut (state "importing") until those are mapped again. With "hold_ms" it then waits
//     on the connection for {"op": "go", "imports": [id...], "files": N} with N descriptors
//     attached (the exporters' new ones, in the order of the ids), imports and maps each where
//     it was, opens the gate, and answers {"ok", "event": "imported", "imports", "import_ms"}.
//     In state "importing" a refill does only that. Version 4: a "go" with "more": true is
//     followed by another on the same connection (each within hold_ms), for more imports than
//     one message carries descriptors (kMaxFiles); the last has no "more".
//
// Legacy IPC (version 5): cuIpcGetMemHandle on memory the library owns exports it as a POSIX
// descriptor the library keeps (one export of the allocation, "exports" above like any other) and
// gives the job a handle of the library's making: kIpcMagic, the exporter's pid, the export's id,
// the allocation's size and a random secret. cuIpcOpenMemHandle of such a handle in another
// process of the job connects to the exporter's channel (the job's own user may) and asks
//   {"op": "share", "version": 5, "id": N, "secret": "32 hex digits"}
//     -> {"ok", "size"} with the export's descriptor attached
//     or {"ok": false, "code": "busy"} while the memory is out of the GPU (a drain): ask again.
// The importer imports and maps that descriptor like one NCCL passed it, so that a checkpoint
// finds, moves and carries it like any other shared allocation. A wrong id or secret is refused.
//
// Memory (version 3): a drain with "memory": true carries one descriptor, a memfd of cryod's,
// instead of files. The library grows it to the drain's size if it is smaller, maps it and
// copies the data into it as into its own host memory, answers "drained", then unmaps it and
// answers "saved" with no files: the data is then only in cryod's memfd, and CRIU finds no copy
// of it in the job. A refill with "memory": true and the same memfd copies it back at host
// memory speed. cryod writes the memfd into the store's files (in the layout below) while the
// job runs on, so that a leave-running checkpoint stalls the job only for the copies; a refill
// from those files later names them as usual (any number of them).
//
// Following (version 7): a refill with "memory": true and "follow": true carries a second
// descriptor, a progress page of cryod's (kProgressBytes, the layout below), because cryod is
// still reading the data into the memfd from the store (a restore's read ahead). The library
// copies each piece to the GPU once "ready" (bytes of the stream, from its start) has passed it,
// and after the last piece waits for "verdict": kVerdictGood opens the gate as any refill does;
// kVerdictBad (a file did not hold what the checkpoint recorded, or cryod could not read it)
// fails the refill with "code": "data_loss" and the job stays held. cryod writes "ready" only
// upwards and the verdict once, after the last byte.
//
// Tracking (version 8): before a leave-running checkpoint freezes the job, cryod asks each
// process of it (after the challenge above)
//   {"op": "track", "version": 8}
//     -> {"ok", "features", "fork_counter"} with a userfaultfd of the process attached
// The library creates it (user-mode faults only, close-on-exec), does its API handshake with
// UFFD_FEATURE_WP_ASYNC (the kernel itself resolves a write to a protected page), and with
// UFFD_FEATURE_WP_HUGETLBFS_SHMEM where the kernel has it (shared memory protected too), and
// closes its own copy once sent: CRIU refuses to dump a process that holds one. A kernel without
// WP_ASYNC (before 6.7) or a process that may not create one answers an error; cryod then copies
// the process's memory only while it is frozen, as before. cryod registers and write-protects the
// process's private anonymous memory through it, copies that memory while the job runs, and at
// the freeze copies again only the pages written since (daemon/criu/pre_copy.h). "fork_counter"
// (absent from older libraries) is the address of a 64-bit word in which the library counts the
// process's forks from then on (pthread_atfork); cryod reads it with process_vm_readv when it
// copies the process's shared memory and again at the freeze, since a child inherits that memory
// and writes it beyond this descriptor.
//
// Parking (version 9): a leave-running drain into cryod's memfd may carry one more descriptor,
// last: device memory of cryod's parking process (a POSIX descriptor of
// cuMemExportToShareableHandle) of "park" bytes on the GPU whose PCI bus id is "park_device". The
// status reply's "device" names the one GPU that holds all the device memory the library moves (""
// when none or several, or when it moves host memory). When that is the park's GPU and the data
// fits, the library imports the park, copies every allocation into it at its place in the stream
// (below) within the GPU, unmaps and releases it, and releases its own memory; "drained" then says
// "parked": true, the memfd and progress page are left alone, and "saved" follows at once.
// Otherwise it drains into the memfd as without the park ("parked": false). The drain closes every
// descriptor before its "saved", so CRIU finds none of the park in the job. A refill with "park": P
// > 0 carries the park as its last descriptor and copies the data back from it within the GPU; a
// refill of a parked drain without one copies it from the memfd, which cryod has filled from the
// park first. cryod's parking process copies the park into the memfd after the thaw, raising the
// progress page as a followed drain does, and cryod writes the files behind it (docs/gpu.md,
// "Parking").
//
// Filled (version 10): for a restore onto the GPU the data was checkpointed on
// (gpu_restore_into_gpu), cryod's parking process reads the drain's files from the store into its
// device memory while CRIU restores the job, and cryod checks each file against what the
// checkpoint recorded. The refill then carries "filled": true, "park": P, "park_device" and that
// park as its one descriptor: the library re-creates its allocations, checks that they are on
// that GPU, and copies the data from the park within the GPU, as a parked drain's refill does.
// A library whose allocations are elsewhere fails the refill and the job stays held.
//
// Shared memory (version 2): an allocation the job exports as a POSIX descriptor
// (cuMemExportToShareableHandle) is moved by the exporting process like its own; the library
// keeps a duplicate of each descriptor it exported ("exports", id and number) and of each it
// imported from ("imports"). Two descriptors of two processes that are the same open file name
// one export; cryod matches them with kcmp, and after a refill carries each exporter's new
// descriptor to its importers with pidfd_getfd (docs/proposals/nccl-shared-memory.md).
//
// Files: the drained allocations, in order, form one stream of bytes that is striped over the W
// files in units of stripe_bytes (unit c goes to file c % W at offset (c / W) * stripe_bytes).
// stripe_bytes is a multiple of the store's checksum chunk, so each file's checksum is the
// store's own (lib/base/chunked_xxh3.h).

#include <chrono>
#include <cstdint>
#include <thread>

namespace cryo::contract::gpu_fastpath {

inline constexpr int kVersion = 10;
inline constexpr char kSocketPrefix[] = "cryo-gpu-fastpath.";
inline constexpr char kLibraryName[] = "libcryo_gpu_fastpath.so";
inline constexpr uint32_t kMaxMessage = 64 << 10;
inline constexpr int kMaxFiles = 64;
// The first 8 bytes of a legacy IPC handle of the library's making ("Legacy IPC" above).
inline constexpr char kIpcMagic[8] = {'c', 'r', 'y', 'o', 'i', 'p', 'c', '1'};

// A following refill's progress page: two 64-bit words, written by cryod with release order and
// read by the library with acquire order.
inline constexpr uint64_t kProgressBytes = 4096;
inline constexpr uint64_t kProgressReadyOffset = 0;    // bytes of the stream in the memfd
inline constexpr uint64_t kProgressVerdictOffset = 8;  // kVerdict*
inline constexpr uint64_t kVerdictPending = 0;
inline constexpr uint64_t kVerdictGood = 1;
inline constexpr uint64_t kVerdictBad = 2;

// A mapped progress page's two words: the one place, for cryod and the library alike, that
// reads and writes them (layout and memory order above).
class ProgressWords {
 public:
  ProgressWords() = default;
  explicit ProgressWords(void* page) : w_(static_cast<uint64_t*>(page)) {}
  void* page() const { return w_; }
  explicit operator bool() const { return w_ != nullptr; }

  uint64_t ready() const {
    return __atomic_load_n(w_ + kProgressReadyOffset / 8, __ATOMIC_ACQUIRE);
  }
  uint64_t verdict() const {
    return __atomic_load_n(w_ + kProgressVerdictOffset / 8, __ATOMIC_ACQUIRE);
  }
  // "ready" up to `bytes`, never down (several writers may race).
  void Raise(uint64_t bytes) {
    uint64_t* word = w_ + kProgressReadyOffset / 8;
    uint64_t cur = __atomic_load_n(word, __ATOMIC_ACQUIRE);
    while (cur < bytes && !__atomic_compare_exchange_n(word, &cur, bytes, false, __ATOMIC_RELEASE,
                                                       __ATOMIC_ACQUIRE)) {
    }
  }
  void SetVerdict(uint64_t v) {
    __atomic_store_n(w_ + kProgressVerdictOffset / 8, v, __ATOMIC_RELEASE);
  }
  // The verdict, unless one was given already.
  void SetVerdictIfPending(uint64_t v) {
    uint64_t pending = kVerdictPending;
    __atomic_compare_exchange_n(w_ + kProgressVerdictOffset / 8, &pending, v, false,
                                __ATOMIC_RELEASE, __ATOMIC_RELAXED);
  }

  enum class Waited { kDone, kBad, kEndedShort, kStopped };
  // Polls until "ready" reaches `end` (with `until_verdict`: until a good verdict): kDone; kBad on
  // a bad verdict first; kEndedShort on another verdict with "ready" short of `end`; kStopped when
  // `stop()` says so.
  template <typename Stop>
  Waited Wait(uint64_t end, bool until_verdict, Stop&& stop) const {
    for (;;) {
      // The verdict before "ready": a good one is given after the last "ready", which is then
      // final.
      const uint64_t v = verdict();
      if (until_verdict ? v == kVerdictGood : ready() >= end) return Waited::kDone;
      if (v == kVerdictBad) return Waited::kBad;
      if (v != kVerdictPending) return Waited::kEndedShort;
      if (stop()) return Waited::kStopped;
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

 private:
  uint64_t* w_ = nullptr;
};

// The library's states, as "state" says them.
inline constexpr char kStateRunning[] = "running";
inline constexpr char kStateDrained[] = "drained";  // data in host memory, GPU memory released
inline constexpr char kStateSaved[] = "saved";      // data only in the drain's files
// Its own memory back, its gate shut: what it imported from other processes of the job is not
// mapped yet (a held refill's "go" brings it).
inline constexpr char kStateImporting[] = "importing";

// Environment of the job (the library reads it at start).
inline constexpr char kEnvDisable[] = "CRYO_GPU_FASTPATH_DISABLE";  // "1": pass everything through
inline constexpr char kEnvMinBytes[] = "CRYO_GPU_FASTPATH_MIN_BYTES";  // smallest owned cuMemAlloc
// "1": cryod's memory is registered with the driver for the copies to and from it, so that the
// DMA goes straight there instead of through the pinned ring. Off by default: on an H100 the
// registration of 32 GiB cost about what it saved, and the driver's lock then took 0.6 s more
// (docs/benchmarks.md, "Stalling only for the copies").
inline constexpr char kEnvHostRegister[] = "CRYO_GPU_FASTPATH_HOST_REGISTER";
// "1": a drain into cryod's memory, and a refill that follows cryod's read (version 7), register
// that memory 256 MiB at a time, ahead of their copies, and the DMA writes or reads each piece
// straight there: no pass through the ring and the CPU. Off by default until it is measured on
// a GPU (docs/benchmarks.md, "Registering instead of copying").
inline constexpr char kEnvRegisterWindows[] = "CRYO_GPU_FASTPATH_REGISTER_WINDOWS";
// "1": io_uring_setup through syscall(2) reaches the kernel. By default the library answers it
// ENOSYS, because CRIU cannot checkpoint an io_uring and libuv (PyTorch's TCPStore, and so every
// torchrun agent) falls back to epoll without one (plugins/fastpath/io_uring_guard.cc).
inline constexpr char kEnvIoUring[] = "CRYO_GPU_FASTPATH_IO_URING";

}  // namespace cryo::contract::gpu_fastpath
