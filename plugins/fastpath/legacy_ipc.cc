#include "plugins/fastpath/legacy_ipc.h"

#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_messages.h"
#include "lib/contract/gpu_fastpath_wire.h"
#include "lib/contract/hex.h"

namespace cryo::fastpath {
namespace wire = contract::gpu_fastpath;

namespace {

// The handle's layout: magic, pid, id, size, secret (56 of its 64 bytes).
constexpr size_t kPidAt = 8, kIdAt = 16, kSizeAt = 24, kSecretAt = 32;

template <typename T>
void Put(CUipcMemHandle* h, size_t at, const T& v) {
  memcpy(h->reserved + at, &v, sizeof(v));
}
template <typename T>
void Get(const CUipcMemHandle& h, size_t at, T* v) {
  memcpy(v, h.reserved + at, sizeof(*v));
}

// How long one answer from the exporter may take: its channel serves one connection at a time
// (a cut's held drain among them), and a slow answer is asked again, outside the gate.
constexpr int kAnswerSeconds = 2;

}  // namespace

void EncodeIpcHandle(const IpcHandle& h, CUipcMemHandle* out) {
  memset(out, 0, sizeof(*out));
  memcpy(out->reserved, wire::kIpcMagic, sizeof(wire::kIpcMagic));
  Put(out, kPidAt, h.pid);
  Put(out, kIdAt, h.id);
  Put(out, kSizeAt, h.size);
  Put(out, kSecretAt, h.secret);
}

bool DecodeIpcHandle(const CUipcMemHandle& in, IpcHandle* out) {
  if (memcmp(in.reserved, wire::kIpcMagic, sizeof(wire::kIpcMagic)) != 0) return false;
  Get(in, kPidAt, &out->pid);
  Get(in, kIdAt, &out->id);
  Get(in, kSizeAt, &out->size);
  Get(in, kSecretAt, &out->secret);
  return out->pid > 0 && out->id != 0;
}

// The two words most significant byte first: the same 32 digits as printing each with %016llx.
std::string SecretHex(const uint64_t secret[2]) {
  unsigned char b[16];
  for (int i = 0; i < 16; ++i)
    b[i] = static_cast<unsigned char>(secret[i / 8] >> (56 - 8 * (i % 8)));
  return contract::HexEncode(b, sizeof(b));
}

bool SecretFromHex(const std::string& hex, uint64_t secret[2]) {
  unsigned char b[16];
  if (!contract::HexDecode(hex, b, sizeof(b))) return false;
  secret[0] = secret[1] = 0;
  for (int i = 0; i < 16; ++i) secret[i / 8] = secret[i / 8] << 8 | b[i];
  return true;
}

int FetchIpcShare(const IpcHandle& h, bool* busy, std::string* why) {
  *busy = false;
  // The exporter is in our pid namespace (a handle names it by its pid there): only that process
  // is asked, never another that took its name on a shared network namespace.
  const int conn = wire::ConnectToProcess(h.pid, h.pid);
  if (conn < 0) {
    *why = "no fast-path library answers in process " + std::to_string(h.pid) + ": " +
           (errno == EPERM ? std::string("its channel's name is held by another process")
                           : std::string(strerror(errno)));
    return -1;
  }
  timeval tv{kAnswerSeconds, 0};
  ::setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  wire::Request req;
  req.op = wire::Op::kShare;
  req.version = wire::kVersionLegacyIpc;
  req.id = h.id;
  req.secret = SecretHex(h.secret);
  std::string text;
  std::vector<int> fds;
  if (!wire::SendMessage(conn, wire::Encode(req)) || !wire::ReceiveMessage(conn, &text, &fds)) {
    const int err = errno;  // before close() may change it
    ::close(conn);
    *busy = err == EAGAIN || err == EWOULDBLOCK;
    *why = std::string("process ") + std::to_string(h.pid) + " did not answer: " + strerror(err);
    return -1;
  }
  ::close(conn);
  wire::Reply<wire::ShareReply> r;
  std::string bad;
  const bool decoded = wire::Decode(text, &r, &bad);
  if (decoded && r.ok && fds.size() == 1 && r.body.size == h.size) return fds[0];
  for (int f : fds) ::close(f);
  if (!decoded) {
    *why = "process " + std::to_string(h.pid) + " answered what is not a share: " + bad;
  } else if (!r.ok) {
    *busy = r.error.code == wire::ErrorCode::kBusy;
    *why = "process " + std::to_string(h.pid) + ": " + r.error.message;
  } else {
    *why = "process " + std::to_string(h.pid) + " shared " + std::to_string(fds.size()) +
           " descriptors of " + std::to_string(r.body.size) + " bytes, not one of " +
           std::to_string(h.size);
  }
  return -1;
}

CUresult OpenIpcHandle(Registry& reg, Mover& mover, Gate& gate, const IpcHandle& h,
                       CUdeviceptr* dptr, std::chrono::milliseconds patience) {
  const auto until = std::chrono::steady_clock::now() + patience;
  for (;;) {
    {
      GateGuard g(gate);
      if (reg.IpcOpened(h, dptr)) return CUDA_SUCCESS;
    }
    const uint64_t drains = mover.drains();
    bool busy = false;
    std::string why;
    const int fd = FetchIpcShare(h, &busy, &why);
    if (fd < 0) {
      if (busy && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      ::fprintf(stderr, "cryo fast path: cuIpcOpenMemHandle: %s\n", why.c_str());
      return busy ? CUDA_ERROR_NOT_READY : CUDA_ERROR_INVALID_HANDLE;
    }
    GateGuard g(gate);
    // The whole job drained while the descriptor travelled: it names memory that is gone.
    if (mover.drains() != drains) {
      ::close(fd);
      continue;
    }
    const CUresult r = reg.IpcOpen(h, fd, dptr);
    ::close(fd);
    return r;
  }
}

}  // namespace cryo::fastpath
