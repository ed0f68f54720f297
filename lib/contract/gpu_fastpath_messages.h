#pragma once

// The GPU fast-path channel's messages as types (gpu_fastpath.h describes the channel and each
// exchange). cryod and the library in the job both encode and decode them here and nowhere else:
// neither side spells an op, a field or an error code. Plain C++ (no abseil): the library links
// it too. Decoding takes untrusted text (a job's reply, or a request from any root process): a
// wrong type, a value out of range or nesting deeper than kMaxDepth is an error, never a throw.
//
// Versions: each request carries the oldest version that has what it uses (1, or kVersionCut for
// a held drain and its "go"), and the library answers one outside
// [kMinVersion, kVersion] with ErrorCode::kVersion. cryod reads the library's version from its
// status reply first and refuses a job whose library it does not speak, naming both.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lib/base/file_digest.h"
#include "lib/contract/gpu_fastpath.h"

namespace cryo::contract::gpu_fastpath {

inline constexpr int kMinVersion = 1;  // the oldest library version this side still speaks
inline constexpr int kMaxDepth = 8;
// Exports or imports of one process in one message (a list of them stays within kMaxMessage).
inline constexpr size_t kMaxShares = 1024;
// The first version with the cut across processes (a drain's "hold_ms", then "go").
inline constexpr int kVersionCut = 2;
// The first version that drains into host memory cryod gives it (a drain's and a refill's
// "memory"), for a leave-running checkpoint that stalls the job only for the copy.
inline constexpr int kVersionMemory = 3;
// The first version that takes a held refill's imports in several "go" messages ("more"), for a
// process that imported more allocations than one message carries descriptors (kMaxFiles).
inline constexpr int kVersionBatchedGo = 4;
// The first version that serves legacy IPC of owned memory to the job's other processes ("share").
inline constexpr int kVersionLegacyIpc = 5;
// The first version that asks its peer to prove it may read the process's memory before it
// answers anything but "share" (gpu_fastpath.h, "Who may drive it").
inline constexpr int kVersionProve = 6;
// The first version that follows cryod's read of a refill's memory (a refill's "follow").
inline constexpr int kVersionFollow = 7;
// The first version that gives cryod a userfaultfd of the process to track its writes ("track").
inline constexpr int kVersionTrack = 8;
// The first version that parks a leave-running drain in GPU memory cryod holds (a drain's and a
// refill's "park", the status's "device").
inline constexpr int kVersionPark = 9;
// The first version that refills from a park cryod filled from the store (a refill's "filled").
inline constexpr int kVersionFill = 10;
// The bytes of a challenge (at most what a "prove" may send back).
inline constexpr uint32_t kChallengeBytes = 16;
// The longest a held drain waits for its "go".
inline constexpr int64_t kMaxHoldMs = 600000;

enum class Op { kStatus, kDrain, kRefill, kGo, kAlign, kShare, kProve, kTrack };
enum class State { kRunning, kDrained, kSaved, kImporting };
enum class ErrorCode {
  kNone,
  kDeadline,    // the job's GPU work did not stop within the drain's timeout
  kDataLoss,    // a refill's file does not match what was saved; the job stays held
  kVersion,     // the request's version is one the library does not speak
  kBadRequest,  // the request does not decode
  kBusy,        // share: the memory is out of the GPU just now; ask again
  kProve,       // the peer must first prove it may read this process's memory (Challenge)
  kDenied,      // the peer's proof was wrong or did not come: nothing was done
};

const char* OpName(Op op);
const char* StateName(State s);

// A file the library wrote or read: the store's own {size, checksum}.
using FileSum = ::cryo::FileDigest;

// A descriptor by which a process shares GPU memory with another (gpu_fastpath.h, "Shared
// memory"): its id in the library, and its number in that process (cryod reaches it there).
struct ShareRef {
  uint64_t id = 0;
  int64_t fd = -1;
};

struct Request {
  Op op = Op::kStatus;
  int version = kVersion;
  int threads = 8;                // drain, refill: copy threads
  int64_t timeout_ms = 10000;     // drain: how long the job's GPU work may take to stop
  uint64_t stripe_bytes = 0;      // drain: unit of the striping over files (0: the default)
  int files = 0;                  // drain, refill: descriptors attached to the request
  int64_t hold_ms = 0;            // drain, refill: > 0 holds the job for a "go" (version 2)
  std::vector<uint64_t> imports;  // go after a held refill: import ids of the attached files
  bool more = false;              // go after a held refill: another "go" follows (version 4)
  bool align = false;             // held drain: shut the gates, answer "gated", wait for "align"
  uint64_t to = 0;                // align: the collectives to have launched before the cut
  std::vector<FileSum> expected;  // refill: what each file must hold (empty: unchecked)
  // drain, refill: the one attached descriptor is a memfd of cryod's that holds the data in
  // host memory (version kVersionMemory), not a file.
  bool memory = false;
  // refill with memory: a second descriptor, cryod's progress page, follows its read of the
  // memfd (version kVersionFollow).
  bool follow = false;
  // drain, refill with memory: the last descriptor is device memory of this many bytes that cryod
  // parks the data in (version kVersionPark), on the GPU of this PCI bus id (drain).
  uint64_t park = 0;
  std::string park_device;
  // refill, not with memory: the one descriptor is such a park that cryod read the data into from
  // the store, checked (version kVersionFill), on the GPU of `park_device`.
  bool filled = false;
  uint64_t id = 0;     // share: the export asked for
  std::string secret;  // share: the secret its legacy IPC handle carries; prove: the bytes (hex)
};

// The library's first answer to a request other than "share" (version kVersionProve): the peer
// reads `length` bytes at `address` of the process's memory, which only a peer that may ptrace
// the process can (process_vm_readv), and sends them back in a "prove". The request is then
// served on the same connection. Sent as a failure with ErrorCode::kProve, so that a cryod that
// does not know it refuses the job with the library's words.
struct Challenge {
  uint64_t address = 0;
  uint32_t length = 0;
};

// Any reply that failed: what happened, and whether the job's memory is back on its GPU.
struct Error {
  std::string message;
  bool rolled_back = false;
  ErrorCode code = ErrorCode::kNone;
};

struct StatusReply {
  int version = 0;
  int64_t pid = 0;  // as the process sees itself
  State state = State::kRunning;
  uint64_t owned_bytes = 0, owned_allocations = 0, owned_cumemalloc = 0;
  uint64_t foreign_allocations = 0, min_bytes = 0, wrapped_entry_points = 0;
  std::map<std::string, uint64_t> calls;  // calls seen per entry point
  std::string disabled;                   // why the library passes everything through, if it does
  std::vector<ShareRef> exports;          // its exports as POSIX descriptors now
  uint64_t imports = 0;                   // allocations it imported as POSIX descriptors
  // The PCI bus id of the one GPU that holds all the memory it moves; "" when none or several
  // (version kVersionPark).
  std::string device;
};

// An aligned held drain's first reply: the gates are shut (nothing synchronized yet), and how many
// NCCL kernels the job launched so far (counting: whether the library tells them apart).
struct GatedReply {
  uint64_t collectives = 0;
  bool counting = false;
};

// A held drain's first reply: the job's GPU work is stopped and synchronized, nothing moved yet.
struct QuiescedReply {
  int64_t quiesce_ms = 0;
  std::vector<ShareRef> exports, imports;  // what the process shares as POSIX descriptors
  uint64_t foreign_shares = 0;             // shared another way: the library cannot carry it
};

// A held refill's last reply, after its "go": what it imported again, the gates open.
struct ImportedReply {
  uint64_t imports = 0;
  int64_t import_ms = 0;
};

// The drain's first reply (after "go" when held): the memory is out of the GPU.
struct DrainedReply {
  uint64_t bytes = 0, allocations = 0;
  int64_t quiesce_ms = 0, copy_ms = 0, release_ms = 0, total_ms = 0;
  bool parked = false;  // into cryod's park on the GPU, not into its memfd (version kVersionPark)
};

// The drain's second reply, with files: the data is in them and out of the job's memory.
struct SavedReply {
  std::vector<FileSum> files;
  int64_t write_ms = 0;
};

struct RefillReply {
  uint64_t bytes = 0;
  int64_t allocate_ms = 0, copy_ms = 0, total_ms = 0;
  std::vector<FileSum> files;     // what was read, file by file
  std::vector<ShareRef> exports;  // held: its exports' new descriptors
  bool importing = false;         // held: imports wait for the "go"
};

// A share's reply: the export's descriptor is attached.
struct ShareReply {
  uint64_t size = 0;
};

// A track's reply: a userfaultfd of the process is attached, its API handshake done with
// `features` (write-protect resolved by the kernel itself: UFFD_FEATURE_WP_ASYNC).
struct TrackReply {
  uint64_t features = 0;
  // Where the process counts its forks (a 64-bit word; 0: an older library, which does not).
  uint64_t fork_counter = 0;
};

// A reply as received: the body, or the error (ok false).
template <typename T>
struct Reply {
  bool ok = false;
  T body{};
  Error error;
};

std::string Encode(const Request& r);
std::string Encode(const Error& e);
std::string Encode(const StatusReply& r);
std::string Encode(const GatedReply& r);
std::string Encode(const QuiescedReply& r);
std::string Encode(const ImportedReply& r);
std::string Encode(const DrainedReply& r);
std::string Encode(const SavedReply& r);
std::string Encode(const RefillReply& r);
std::string Encode(const ShareReply& r);
std::string Encode(const TrackReply& r);
std::string Encode(const Challenge& c);

// false, with *why, for text that is not such a message.
bool Decode(const std::string& text, Request* out, std::string* why);
bool Decode(const std::string& text, Reply<StatusReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<GatedReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<QuiescedReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<ImportedReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<DrainedReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<SavedReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<RefillReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<ShareReply>* out, std::string* why);
bool Decode(const std::string& text, Reply<TrackReply>* out, std::string* why);
// Whether `text` is a challenge (then *out holds it; a length over kChallengeBytes is not one).
bool DecodeChallenge(const std::string& text, Challenge* out);

}  // namespace cryo::contract::gpu_fastpath
