#include "plugins/fastpath/control.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>

#include "lib/contract/gpu_fastpath.h"
#include "lib/contract/gpu_fastpath_wire.h"

namespace cryo::fastpath {
namespace wire = contract::gpu_fastpath;
using nlohmann::json;

namespace {

json Error(const std::string& why, bool rolled_back, const std::string& code = "") {
  json j{{"ok", false}, {"error", why}, {"rolled_back", rolled_back}};
  if (!code.empty()) j["code"] = code;
  return j;
}

void CloseAll(std::vector<int>& fds) {
  for (int f : fds) ::close(f);
  fds.clear();
}

// Only root (cryod) and the job's own user may drive the job's memory.
bool PeerAllowed(int conn) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return false;
  return cred.uid == 0 || cred.uid == ::geteuid();
}

int Int(const json& j, const char* key, int def, int lo, int hi) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return def;
  return std::clamp(it->get<int>(), lo, hi);
}

}  // namespace

std::string Control::Start(pid_t pid) {
  if (started_.exchange(true)) return "";
  pid_ = pid != 0 ? pid : ::getpid();
  const std::string name = wire::SocketName(pid_);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  memcpy(a.sun_path + 1, name.data(), name.size());
  const socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + name.size();
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::string("socket: ") + strerror(errno);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), len) != 0 || ::listen(fd, 4) != 0) {
    std::string err = std::string("listening on @") + name + ": " + strerror(errno);
    ::close(fd);
    return err;
  }
  listen_fd_ = fd;
  // The job's signals are for the job's threads: this one (and the threads it starts) takes none.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, &old);
  std::thread t([this] { Loop(); });
  pthread_setname_np(t.native_handle(), "cryo-fastpath");
  t.detach();  // lives as long as the process; CRIU saves it with the rest
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return "";
}

void Control::ForgetAfterFork() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = -1;
}

void Control::Loop() {
  GateGuard::MarkLibraryThread();
  for (;;) {
    int conn = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (listen_fd_ < 0) return;
      // A restore may briefly leave the socket unusable; never spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    if (PeerAllowed(conn)) Serve(conn);
    ::close(conn);
  }
}

json Control::Status() {
  RegistryStats st = reg_.Stats();
  json j{{"ok", true},
         {"version", contract::gpu_fastpath::kVersion},
         {"pid", pid_ != 0 ? pid_ : ::getpid()},
         {"state", StateName(mover_.state())},
         {"owned_bytes", st.owned_bytes},
         {"owned_allocations", st.owned_allocations},
         {"owned_cumemalloc", st.owned_cumemalloc},
         {"foreign_allocations", st.foreign_allocations},
         {"min_bytes", reg_.min_bytes()}};
  if (extra_status_) extra_status_(j);
  return j;
}

void Control::Serve(int conn) {
  std::string text;
  std::vector<int> fds;
  if (!wire::ReceiveMessage(conn, &text, &fds)) return;
  json req = json::parse(text, nullptr, /*allow_exceptions=*/false);
  std::string op;
  if (req.is_object() && req.contains("op") && req["op"].is_string()) op = req["op"];
  try {
    if (op == "status") {
      wire::SendMessage(conn, Status().dump());
    } else if (op == "drain") {
      HandleDrain(conn, req, fds);
    } else if (op == "refill") {
      HandleRefill(conn, req, fds);
    } else {
      wire::SendMessage(conn, Error("unknown request", false).dump());
    }
  } catch (const std::exception& e) {
    // Nothing may escape into the job; the state says what happened.
    wire::SendMessage(conn, Error(std::string("fast path: ") + e.what(), false).dump());
  }
  CloseAll(fds);
}

void Control::HandleDrain(int conn, const json& req, std::vector<int>& fds) {
  DrainOptions opt;
  opt.threads = Int(req, "threads", 8, 1, 256);
  opt.timeout = std::chrono::milliseconds(Int(req, "timeout_ms", 10000, 1, 3600000));
  if (auto it = req.find("stripe_bytes"); it != req.end() && it->is_number_unsigned()) {
    opt.stripe_bytes = it->get<uint64_t>();
  }
  const int want_files = Int(req, "files", 0, 0, contract::gpu_fastpath::kMaxFiles);
  if (want_files != static_cast<int>(fds.size())) {
    wire::SendMessage(conn, Error("the request names " + std::to_string(want_files) +
                                      " files but carries " + std::to_string(fds.size()),
                                  true)
                                .dump());
    return;
  }
  opt.fds = fds;
  DrainResult r;
  Outcome o = mover_.Drain(opt, &r);
  if (!o.ok()) {
    wire::SendMessage(conn, Error(o.error, o.rolled_back, o.code).dump());
    return;
  }
  json drained{{"ok", true},
               {"event", "drained"},
               {"bytes", r.bytes},
               {"allocations", r.allocations},
               {"quiesce_ms", r.quiesce_ms},
               {"copy_ms", r.copy_ms},
               {"release_ms", r.release_ms},
               {"total_ms", r.total_ms}};
  // If nobody heard that the memory is out, nobody will bring it back: do it now.
  if (!wire::SendMessage(conn, drained.dump())) {
    mover_.Abort();
    return;
  }
  if (fds.empty()) return;
  SaveResult s;
  o = mover_.FinishSave(&s);
  CloseAll(fds);  // before the reply: CRIU must find no descriptor of the store in the job
  if (!o.ok()) {
    wire::SendMessage(conn, Error(o.error, o.rolled_back).dump());
    return;
  }
  json files = json::array();
  for (const FileSum& f : s.files) files.push_back({{"size", f.size}, {"checksum", f.checksum}});
  wire::SendMessage(
      conn,
      json{{"ok", true}, {"event", "saved"}, {"files", files}, {"write_ms", s.write_ms}}.dump());
}

void Control::HandleRefill(int conn, const json& req, std::vector<int>& fds) {
  RefillOptions opt;
  opt.threads = Int(req, "threads", 8, 1, 256);
  opt.fds = fds;
  if (auto it = req.find("expected"); it != req.end() && it->is_array()) {
    for (const json& e : *it) {
      if (!e.is_object() || !e.contains("size") || !e["size"].is_number_unsigned() ||
          !e.contains("checksum") || !e["checksum"].is_string()) {
        wire::SendMessage(conn, Error("malformed \"expected\" entry", false).dump());
        return;
      }
      opt.expected.push_back({e["size"].get<uint64_t>(), e["checksum"].get<std::string>()});
    }
  }
  RefillResult r;
  Outcome o = mover_.Refill(opt, &r);
  CloseAll(fds);
  if (!o.ok()) {
    wire::SendMessage(conn, Error(o.error, false, o.code).dump());
    return;
  }
  json files = json::array();
  for (const FileSum& f : r.files) files.push_back({{"size", f.size}, {"checksum", f.checksum}});
  wire::SendMessage(conn, json{{"ok", true},
                               {"bytes", r.bytes},
                               {"allocate_ms", r.allocate_ms},
                               {"copy_ms", r.copy_ms},
                               {"total_ms", r.total_ms},
                               {"files", files}}
                              .dump());
}

}  // namespace cryo::fastpath
