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

Result FetchIpcShare(const IpcHandle& h, int* fd) {
  *fd = -1;
  // The exporter is in our pid namespace (a handle names it by its pid there): only that process
  // is asked, never another that took its name on a shared network namespace.
  UniqueFd conn = wire::ConnectToProcess(h.pid, h.pid);
  const std::string who = "process " + std::to_string(h.pid);
  if (!conn.ok()) {
    return Result::Failed("no fast-path library answers in " + who + ": " +
                          (errno == EPERM
                               ? std::string("its channel's name is held by another process")
                               : std::string(strerror(errno))));
  }
  timeval tv{kAnswerSeconds, 0};
  ::setsockopt(conn.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  wire::Request req;
  req.op = wire::Op::kShare;
  req.version = wire::kVersionLegacyIpc;
  req.id = h.id;
  req.secret = SecretHex(h.secret);
  std::string text;
  std::vector<UniqueFd> fds;
  if (!wire::SendMessage(conn.get(), wire::Encode(req)) ||
      !wire::ReceiveMessage(conn.get(), &text, &fds)) {
    const int err = errno;
    // No answer in time: the exporter may be held at a cut, as busy as one that says so.
    return Result::Failed(
        who + " did not answer: " + strerror(err),
        err == EAGAIN || err == EWOULDBLOCK ? ErrorCode::kBusy : ErrorCode::kNone);
  }
  conn.reset();
  wire::Reply<wire::ShareReply> r;
  std::string bad;
  const bool decoded = wire::Decode(text, &r, &bad);
  if (decoded && r.ok && fds.size() == 1 && r.body.size == h.size) {
    *fd = fds[0].release();
    return {};
  }
  if (!decoded) return Result::Failed(who + " answered what is not a share: " + bad);
  if (!r.ok) {
    return Result::Failed(who + ": " + r.error.message,
                          r.error.code == ErrorCode::kBusy ? ErrorCode::kBusy : ErrorCode::kNone);
  }
  return Result::Failed(who + " shared " + std::to_string(fds.size()) + " descriptors of " +
                        std::to_string(r.body.size) + " bytes, not one of " +
                        std::to_string(h.size));
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
    int fd = -1;
    if (Result got = FetchIpcShare(h, &fd); !got.ok()) {
      const bool busy = got.code == ErrorCode::kBusy;
      if (busy && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      Say("cuIpcOpenMemHandle: " + got.error);
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
