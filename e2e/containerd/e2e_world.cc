#include "e2e/containerd/e2e_world.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "e2e/containerd/cri_client.h"
#include "lib/base/subprocess.h"

#ifndef CRYO_E2E_SCRIPTS
#error "CRYO_E2E_SCRIPTS must name e2e/containerd"
#endif
#ifndef CRYO_SHIM_BINARY
#error "CRYO_SHIM_BINARY must name the cryo-cri-shim binary"
#endif

namespace cryo::e2e {
namespace {

bool SocketAccepts(const std::string& path) {
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return ok;
}

std::string Tail(const std::string& path, size_t max_bytes = 4000) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > max_bytes ? s.substr(s.size() - max_bytes) : s;
}

// fork + exec with stdout/stderr appended to log_file; dies with us.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const std::string& log_file,
                            const std::vector<std::string>& extra_env) {
  SpawnOptions o;
  o.argv = argv;
  o.env = extra_env;
  o.stdout_path = log_file;
  o.own_process_group = false;
  o.die_with_parent = true;
  return cryo::Spawn(o);
}

}  // namespace

std::string E2eTempRoot() {
  const char* root = getenv("CRYO_E2E_TMP");
  return root != nullptr && root[0] != '\0' ? root : "/tmp";
}

absl::StatusOr<std::unique_ptr<ShimProcess>> ShimProcess::Start(
    const std::string& binary, const std::string& listen, const std::string& runtime,
    const std::string& log_file, const std::string& cryod_socket, std::vector<std::string> extra) {
  std::vector<std::string> argv = {
      binary, "--listen",    listen, "--runtime-endpoint", runtime,         "--metrics-address",
      "",     "--log-level", "info", "--init-path",        CRYO_INIT_BINARY};
#ifdef CRYO_FASTPATH_LIBRARY
  argv.insert(argv.end(), {"--fastpath-library", CRYO_FASTPATH_LIBRARY});
#endif
  if (!cryod_socket.empty()) argv.insert(argv.end(), {"--cryod-socket", cryod_socket});
  argv.insert(argv.end(), extra.begin(), extra.end());
  absl::StatusOr<pid_t> pid = Spawn(argv, log_file, {});
  if (!pid.ok()) return pid.status();
  auto shim = std::unique_ptr<ShimProcess>(new ShimProcess(*pid, listen, log_file));
  if (!WaitUntil([&] { return !shim->Alive() || SocketAccepts(listen); }, absl::Seconds(30)) ||
      !shim->Alive()) {
    return absl::UnavailableError(
        absl::StrCat("cryo-cri-shim did not come up on ", listen, "; log:\n", Tail(log_file)));
  }
  return shim;
}

bool ShimProcess::Alive() {
  if (reaped_) return false;
  pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

absl::StatusOr<int> ShimProcess::Stop(absl::Duration timeout) {
  if (!Alive()) return status_;
  kill(pid_, SIGTERM);
  if (!WaitUntil([&] { return !Alive(); }, timeout)) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
    reaped_ = true;
    return absl::DeadlineExceededError("cryo-cri-shim ignored SIGTERM; killed");
  }
  return status_;
}

ShimProcess::~ShimProcess() {
  if (Alive()) {
    kill(pid_, SIGKILL);
    waitpid(pid_, &status_, 0);
  }
}

absl::Status E2eWorld::RunNodeScript(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {"/bin/bash", absl::StrCat(CRYO_E2E_SCRIPTS, "/node.sh")};
  argv.insert(argv.end(), args.begin(), args.end());
  std::string log = absl::StrCat(dir_, "/node-script.log");
  absl::StatusOr<pid_t> pid = Spawn(argv, log, {absl::StrCat("CRYO_E2E_OWNER_PID=", getpid())});
  if (!pid.ok()) return pid.status();
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat("node.sh ", absl::StrJoin(args, " "), " failed; log:\n", Tail(log)));
}

absl::StatusOr<std::unique_ptr<Cryod>> E2eWorld::StartCryod(const std::string& node) {
  // Periodic checkpoints looked for often and as short as a second (pods ask for seconds in
  // the tests), and the newest three of each workload kept.
  std::vector<std::string> args = {
      "--runtime-endpoint",     absl::StrCat("unix://", NodeSocket(node)),
      "--periodic-tick-ms",     "200",
      "--periodic-min-every-s", "1",
      "--retention-keep",       "3",
      "--shim-metrics-file",    ShimMetricsFile(node)};
  // The nodes reach each other's cryods for job checkpoints (cryod's `peers`), as the chart's
  // jobs.enabled makes them do through the Kubernetes API.
  std::vector<std::string> others;
  for (const auto& [n, port] : peer_ports_) {
    if (n != node) others.push_back(absl::StrCat(n, "=127.0.0.1:", port));
  }
  // ... and share the signing key, as the chart's Secret gives every node the same one (the
  // job checkpoint's record is signed by one node and verified by the others).
  args.insert(args.end(), {absl::StrCat("--peer-listen=127.0.0.1:", peer_ports_.at(node)),
                           "--peer-token-file=" + peer_token_file_,
                           // mutual TLS with one certificate, as the chart's Secret gives
                           "--peer-tls-dir=" + dir_ + "/peer-tls",
                           "--signing-key-file=" + dir_ + "/cluster-signing.key",
                           // A job's replacements here start within moments of each other
                           // (20 s: on a loaded 2-core CI machine a start can take seconds).
                           "--job-gather-timeout-s=20"});
  if (!others.empty()) args.push_back("--peers=" + absl::StrJoin(others, ","));
  // The GPU suite's pods (e2e/gpu/pods.sh) name the bundle's CRIU and GPU plugins here.
  if (const char* more = getenv("CRYO_E2E_CRYOD_ARGS"); more != nullptr) {
    for (absl::string_view a : absl::StrSplit(more, ' ', absl::SkipEmpty())) {
      args.emplace_back(a);
    }
  }
  return Cryod::Start(absl::StrCat(dir_, "/", node), store(), node, args,
                      {"CRYOD_TEST_HOOK_DIR=" + HookDir(node)});
}

absl::Status E2eWorld::RestartCryod(const std::string& node,
                                    const std::function<void()>& while_down) {
  cryods_.at(node)->Stop();
  cryods_.at(node).reset();
  while_down();
  auto c = StartCryod(node);
  if (!c.ok()) return c.status();
  cryods_[node] = std::move(*c);
  return absl::OkStatus();
}

std::string E2eWorld::LogTails() const {
  std::string out;
  for (const auto& [node, cryod] : cryods_) {
    if (cryod == nullptr) continue;
    absl::StrAppend(&out, "---- cryod of ", node, " (", cryod->log(), "), its end:\n",
                    Tail(cryod->log()), "\n");
    absl::StrAppend(&out, "---- shim of ", node, ", its end:\n",
                    Tail(absl::StrCat(dir_, "/shim-", node, ".log")), "\n");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<E2eWorld>> E2eWorld::Create(const std::vector<std::string>& nodes) {
  std::string tmpl = absl::StrCat(E2eTempRoot(), "/cryo-e2e-containerd.XXXXXX");
  if (mkdtemp(tmpl.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", tmpl, ": ", strerror(errno)));
  }
  auto world = std::unique_ptr<E2eWorld>(new E2eWorld(tmpl));
  {
    std::ofstream owner(absl::StrCat(tmpl, "/owner.pid"));
    owner << getpid() << "\n";
  }
  world->peer_token_file_ = absl::StrCat(tmpl, "/peer.token");
  {
    std::ofstream token(world->peer_token_file_);
    token << "peer-token-of-the-e2e-nodes\n";
  }
  const std::string tls = absl::StrCat(tmpl, "/peer-tls");
  std::string why;
  if (::mkdir(tls.c_str(), 0700) != 0 || !MakePeerTls(tls, "cryo-peer", &why)) {
    return absl::InternalError(absl::StrCat("the nodes' peer certificate: ", why));
  }
  for (const std::string& node : nodes) {
    const int port = FreePort();
    if (port <= 0) return absl::InternalError("no free port for a cryod's Peer service");
    world->peer_ports_[node] = port;
  }
  for (const std::string& node : nodes) {
    if (absl::Status st = world->StartNode(node); !st.ok()) return st;
    // Tests may hold cryod at a named point (see E2eWorld::HookDir); idle until they do.
    const std::string hooks = world->HookDir(node);
    if (::mkdir(hooks.c_str(), 0700) != 0 && errno != EEXIST) {
      return absl::InternalError(absl::StrCat("mkdir ", hooks, ": ", strerror(errno)));
    }
    absl::StatusOr<std::unique_ptr<Cryod>> cryod = world->StartCryod(node);
    if (!cryod.ok()) return cryod.status();
    world->cryods_[node] = std::move(*cryod);
    absl::StatusOr<std::unique_ptr<ShimProcess>> shim = ShimProcess::Start(
        CRYO_SHIM_BINARY, world->ShimSocket(node), world->NodeSocket(node),
        absl::StrCat(world->dir_, "/shim-", node, ".log"), world->cryods_[node]->socket(),
        {"--metrics-file", world->ShimMetricsFile(node), "--metrics-file-interval-seconds", "1"});
    if (!shim.ok()) return shim.status();
    world->shims_[node] = std::move(*shim);
  }
  return world;
}

E2eWorld::~E2eWorld() {
  for (auto& [node, shim] : shims_) (void)shim->Stop();
  shims_.clear();
  cryods_.clear();  // stops them
  if (absl::Status st = RunNodeScript({"clean", dir_}); !st.ok()) {
    fprintf(stderr, "e2e cleanup failed: %s\n", std::string(st.message()).c_str());
  }
}

std::string E2eWorld::NodeSocket(const std::string& node) const {
  return absl::StrCat(dir_, "/", node, "/containerd.sock");
}

std::string E2eWorld::ShimSocket(const std::string& node) const {
  return absl::StrCat(dir_, "/", node, "/cri-shim.sock");
}

std::string E2eWorld::CgroupParent(const std::string& node) const {
  return absl::StrCat("/cryo-e2e/", dir_.substr(dir_.rfind('/') + 1), "/", node);
}

std::string E2eWorld::PodLogDir(const std::string& node, const std::string& pod) const {
  return absl::StrCat(dir_, "/", node, "/pods/", pod);
}

absl::Status E2eWorld::StopNode(const std::string& node) {
  return RunNodeScript({"stop", dir_, node});
}

absl::Status E2eWorld::StartNode(const std::string& node) {
  return RunNodeScript({"start", dir_, node});
}

}  // namespace cryo::e2e
