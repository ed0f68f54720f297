#include "e2e/process/harness.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "lib/base/proc.h"
#include "lib/base/subprocess.h"

namespace cryo::e2e {

std::string MakeTempDir(const std::string& prefix) {
  std::string t = "/tmp/" + prefix + "-XXXXXX";
  char* d = ::mkdtemp(t.data());
  return d ? std::string(d) : "";
}

bool WaitFor(const std::function<bool()>& pred, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (pred()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return pred();
}

bool MakePeerTls(const std::string& dir, const std::string& name, std::string* why) {
  const std::string ec = "ec:" + dir + "/ec.param";
  const std::vector<std::vector<std::string>> steps = {
      {"openssl", "ecparam", "-name", "prime256v1", "-out", dir + "/ec.param"},
      {"openssl", "req", "-x509", "-newkey", ec, "-nodes", "-keyout", dir + "/ca.key", "-out",
       dir + "/ca.crt", "-subj", "/CN=" + name + "-ca", "-days", "2"},
      {"openssl", "req", "-newkey", ec, "-nodes", "-keyout", dir + "/tls.key", "-out",
       dir + "/tls.csr", "-subj", "/CN=" + name},
      {"openssl", "x509", "-req", "-in", dir + "/tls.csr", "-CA", dir + "/ca.crt", "-CAkey",
       dir + "/ca.key", "-CAcreateserial", "-out", dir + "/tls.crt", "-days", "2", "-extfile",
       dir + "/ext.cnf"},
  };
  std::ofstream(dir + "/ext.cnf") << "subjectAltName=DNS:" << name
                                  << "\nextendedKeyUsage=serverAuth,clientAuth\n";
  for (const auto& argv : steps) {
    auto r = RunCapture(argv);
    if (!r.ok() || !r->exit.exited || r->exit.code != 0) {
      *why = r.ok() ? r->output : std::string(r.status().message());
      return false;
    }
  }
  return true;
}

namespace {

// Binds 127.0.0.1:`port` (0: any) and lets it go; the port bound, or -1.
int BindAndRelease(int port) {
  int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return -1;
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  socklen_t len = sizeof(a);
  int got = -1;
  if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    got = ntohs(a.sin_port);
  }
  ::close(s);
  return got;
}

}  // namespace

int FreePort() {
  // Below the kernel's ephemeral range: a port from bind(0) is the kernel's to hand out again
  // to anyone's connect() or bind(0) (a containerd, another cryod's metrics) before the daemon
  // it was meant for binds it ("Address already in use", seen on CI once).
  int low = 32768, high = 60999;
  std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
  if (!(range >> low >> high)) low = 32768;
  constexpr int kFirst = 10000;
  if (low - kFirst >= 1000) {
    static std::mutex mu;
    static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(::getpid()));
    static std::set<int> given;  // a second call before the first port is bound gets another
    std::lock_guard<std::mutex> l(mu);
    for (int tries = 0; tries < 100; ++tries) {
      const int port = kFirst + static_cast<int>(rng() % static_cast<unsigned>(low - kFirst));
      if (given.count(port) == 0 && BindAndRelease(port) == port) {
        given.insert(port);
        return port;
      }
    }
  }
  return BindAndRelease(0);
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

bool KernelGivesIoUring(std::string* why) {
  uint32_t params[30] = {0};  // struct io_uring_params: 120 bytes
  const long fd = ::syscall(__NR_io_uring_setup, 4, params);
  if (fd < 0) {
    *why = std::strerror(errno);
    return false;
  }
  ::close(static_cast<int>(fd));
  return true;
}

static pid_t SpawnArgs(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                       const std::string& out, bool new_session) {
  SpawnOptions o;
  o.argv = argv;
  o.env = env;
  o.stdout_path = out;
  o.new_session = new_session;
  o.own_process_group = false;
  auto pid = Spawn(o);
  return pid.ok() ? *pid : -1;
}

absl::StatusOr<std::unique_ptr<Cryod>> Cryod::Start(const std::string& dir,
                                                    const std::string& store,
                                                    const std::string& node,
                                                    std::vector<std::string> extra,
                                                    std::vector<std::string> env) {
  auto c = std::unique_ptr<Cryod>(new Cryod());
  c->socket_ = dir + "/" + node + ".sock";
  c->state_ = dir + "/" + node + "-state";
  c->log_ = dir + "/" + node + ".log";
  // The nodes of one test share a signing key, as a cluster's nodes do (the chart's Secret).
  std::vector<std::string> argv = {CRYOD_BIN, "--socket", c->socket_, "--state-dir", c->state_,
                                   "--store", store, "--node-name", node, "--metrics-address",
                                   "127.0.0.1:0", "--log-level", "debug", "--signing-key-file",
                                   dir + "/cluster-signing.key",
                                   // cryod's copy of the job's memory at CRIU's post-dump, which
                                   // a node of fewer than 4 cores leaves to CRIU by default.
                                   "--dump-copy-threads", "2",
                                   // ... and the copy of shared memory ahead (off by default),
                                   // so that the e2e checks what it writes.
                                   "--dump-pre-copy-shared=true",
                                   // ... and the pages images kept from one leave-running dump
                                   // for the next (off by default): every later one is written
                                   // over them, and the restores check what they hold.
                                   "--dump-pages-pool-mib", "1024"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  c->pid_ = SpawnArgs(argv, env, c->log_, false);
  // Connect only once the socket exists: a channel that failed once backs off for seconds.
  WaitFor([&] {
    int st;
    if (::waitpid(c->pid_, &st, WNOHANG) == c->pid_) {
      c->pid_ = -1;
      return true;
    }
    return ::access(c->socket_.c_str(), F_OK) == 0;
  });
  if (c->pid_ < 0) {
    return absl::InternalError(absl::StrCat("cryod exited at startup; log:\n", Slurp(c->log_)));
  }
  auto channel = grpc::CreateChannel("unix://" + c->socket_, grpc::InsecureChannelCredentials());
  c->stub_ = v1::Cryo::NewStub(channel);
  bool up = WaitFor([&] {
    int st;
    if (::waitpid(c->pid_, &st, WNOHANG) == c->pid_) {
      c->pid_ = -1;
      return true;
    }
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    v1::NodeInfoResponse r;
    return c->stub_->NodeInfo(&ctx, v1::NodeInfoRequest(), &r).ok();
  });
  if (!up || c->pid_ < 0) {
    return absl::InternalError(absl::StrCat("cryod did not come up; log:\n", Slurp(c->log_)));
  }
  return c;
}

Cryod::~Cryod() {
  if (pid_ > 0) Stop();
}

void Cryod::Kill9() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int Cryod::Stop() {
  if (pid_ <= 0) return -1;
  ::kill(pid_, SIGTERM);
  int st = 0;
  ::waitpid(pid_, &st, 0);
  pid_ = -1;
  return st;
}

std::string Cryod::StopCleanly() {
  if (pid_ <= 0) return "";
  const int st = Stop();
  if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return "";
  std::string log = Slurp(log_);
  if (log.size() > 8000) log = log.substr(log.size() - 8000);
  return absl::StrCat("cryod ",
                      WIFEXITED(st) ? absl::StrCat("exited with ", WEXITSTATUS(st))
                                    : absl::StrCat("was killed by signal ", WTERMSIG(st)),
                      " at shutdown; its log ends:\n", log);
}

int Cryod::metrics_port() {
  // cryod logs "metrics on 127.0.0.1:0 (port N)".
  std::string log = Slurp(log_);
  auto pos = log.find("(port ");
  if (pos == std::string::npos) return -1;
  int port = -1;
  (void)absl::SimpleAtoi(log.substr(pos + 6, log.find(')', pos) - pos - 6), &port);
  return port;
}

grpc::Status Cryod::Checkpoint(const v1::CheckpointRequest& req, v1::CheckpointInfo* out,
                               std::vector<v1::Progress>* progress) {
  grpc::ClientContext ctx;
  auto r = stub_->Checkpoint(&ctx, req);
  v1::OperationEvent ev;
  while (r->Read(&ev)) {
    if (ev.has_checkpoint() && out) *out = ev.checkpoint();
    if (ev.has_progress() && progress) progress->push_back(ev.progress());
  }
  return r->Finish();
}

grpc::Status Cryod::Restore(const v1::RestoreRequest& req, v1::RestoreResult* out,
                            std::vector<v1::Progress>* progress) {
  grpc::ClientContext ctx;
  auto r = stub_->Restore(&ctx, req);
  v1::OperationEvent ev;
  while (r->Read(&ev)) {
    if (ev.has_restored() && out) *out = ev.restored();
    if (ev.has_progress() && progress) progress->push_back(ev.progress());
  }
  return r->Finish();
}

grpc::Status Cryod::CheckpointJob(const v1::CheckpointJobRequest& req, v1::JobCheckpointInfo* out) {
  grpc::ClientContext ctx;
  auto r = stub_->CheckpointJob(&ctx, req);
  v1::OperationEvent ev;
  while (r->Read(&ev)) {
    if (ev.has_job_checkpoint() && out) *out = ev.job_checkpoint();
  }
  return r->Finish();
}

grpc::Status Cryod::RestoreJob(const v1::RestoreJobRequest& req, v1::JobRestoreResult* out) {
  grpc::ClientContext ctx;
  auto r = stub_->RestoreJob(&ctx, req);
  v1::OperationEvent ev;
  while (r->Read(&ev)) {
    if (ev.has_job_restored() && out) *out = ev.job_restored();
  }
  return r->Finish();
}

std::vector<v1::CheckpointInfo> Cryod::List() {
  grpc::ClientContext ctx;
  v1::ListCheckpointsResponse resp;
  auto s = stub_->ListCheckpoints(&ctx, v1::ListCheckpointsRequest(), &resp);
  if (!s.ok()) return {};
  return {resp.checkpoints().begin(), resp.checkpoints().end()};
}

absl::StatusOr<std::unique_ptr<Workload>> Workload::Start(const std::string& dir, int mem_mib,
                                                          int threads,
                                                          std::vector<std::string> extra,
                                                          std::vector<std::string> wrapper) {
  auto w = std::unique_ptr<Workload>(new Workload());
  w->status_ = dir + "/status-" + std::to_string(::getpid()) + "-" + std::to_string(rand());
  std::vector<std::string> argv = std::move(wrapper);
  for (const std::string& a :
       {std::string(TESTLOAD_BIN), std::string("--status"), w->status_, std::string("--mem-mib"),
        std::to_string(mem_mib), std::string("--threads"), std::to_string(threads)}) {
    argv.push_back(a);
  }
  argv.insert(argv.end(), extra.begin(), extra.end());
  w->pid_ = SpawnArgs(argv, {}, dir + "/testload.log", true);
  if (!w->WaitMain(5, absl::Seconds(60))) {
    return absl::InternalError("cryo-testload did not start");
  }
  return w;
}

absl::StatusOr<std::unique_ptr<Workload>> Workload::StartConfined(const std::string& dir,
                                                                  int mem_mib, bool seccomp,
                                                                  int threads) {
  auto w = std::unique_ptr<Workload>(new Workload());
  w->status_ = dir + "/status-" + std::to_string(::getpid()) + "-" + std::to_string(rand());
  // As a pod's job runs that drops every capability and sets no_new_privs.
  std::vector<std::string> argv = {"/usr/bin/setpriv",
                                   "--no-new-privs",
                                   "--inh-caps=-all",
                                   "--bounding-set=-all",
                                   TESTLOAD_BIN,
                                   "--status",
                                   w->status_,
                                   "--mem-mib",
                                   std::to_string(mem_mib),
                                   "--threads",
                                   std::to_string(threads)};
  if (seccomp) argv.push_back("--seccomp");
  w->pid_ = SpawnArgs(argv, {}, dir + "/testload-confined.log", true);
  if (!w->WaitMain(5, absl::Seconds(60))) {
    return absl::InternalError("cryo-testload did not start under setpriv");
  }
  return w;
}

absl::StatusOr<std::unique_ptr<Workload>> Workload::StartProgram(const std::string& dir,
                                                                 const std::string& binary,
                                                                 std::vector<std::string> args,
                                                                 std::vector<std::string> env) {
  auto w = std::unique_ptr<Workload>(new Workload());
  w->status_ = dir + "/status-" + std::to_string(::getpid()) + "-" + std::to_string(rand());
  std::vector<std::string> argv = {binary, "--status", w->status_};
  argv.insert(argv.end(), args.begin(), args.end());
  w->pid_ = SpawnArgs(argv, env, dir + "/workload.log", true);
  if (!w->WaitMain(5, absl::Seconds(60))) {
    return absl::InternalError(absl::StrCat(binary, " did not start (see ", dir, "/workload.log)"));
  }
  return w;
}

Workload::~Workload() { Kill(); }

nlohmann::json Workload::Status() const {
  // The job rewrites its record in place while we may read it: a read that tears it does not
  // parse, and the next one, a moment later, does.
  for (int i = 0; i < 5; ++i) {
    auto j = nlohmann::json::parse(Slurp(status_), nullptr, false);
    if (!j.is_discarded()) return j;
    ::usleep(2000);
  }
  return nlohmann::json();
}

bool Workload::WaitMain(uint64_t n, absl::Duration timeout) {
  return WaitFor(
      [&] {
        auto j = Status();
        return j.is_object() && j.value("main", uint64_t{0}) >= n;
      },
      timeout);
}

int Workload::Verify() {
  auto before = Status();
  uint64_t seq = before.is_object() ? before.value("verify_seq", uint64_t{0}) : 0;
  ::kill(pid_, SIGUSR1);
  int verdict = -1;
  WaitFor([&] {
    auto j = Status();
    if (j.is_object() && j.value("verify_seq", uint64_t{0}) > seq) {
      verdict = j.value("verify_ok", -1);
      return true;
    }
    return false;
  });
  return verdict;
}

void Workload::Reap() {
  if (reaped_ || pid_ <= 0) return;
  int st;
  if (::waitpid(pid_, &st, WNOHANG) == pid_) reaped_ = true;
}

char Workload::State() const {
  std::string s = Slurp("/proc/" + std::to_string(pid_) + "/stat");
  auto p = s.rfind(')');
  if (p == std::string::npos || p + 2 >= s.size()) return '-';
  return s[p + 2];
}

bool Workload::IsThisJob() const {
  // Our child (its pid cannot be reused before we reap it), or a restored job: same pid, no
  // longer our child, with its status file open again.
  proc::ProcReader r;
  auto info = r.Read(pid_);
  if (!info.ok()) return false;
  if (info->ppid == ::getpid()) return true;
  for (const std::string& target : r.FdTargets(pid_)) {
    if (target == status_) return true;
  }
  return false;
}

void Workload::Kill() {
  if (pid_ <= 0) return;
  if (State() != '-' && IsThisJob()) {
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
  }
  if (!reaped_) {
    WaitFor(
        [&] {
          Reap();
          return reaped_ || State() == '-';
        },
        absl::Seconds(10));
  }
  WaitFor([&] { return State() == '-'; }, absl::Seconds(10));
  // pid_ stays: a test may restore the job under the same pid, and the destructor ends it then.
}

CliResult RunCli(const std::string& socket, const std::vector<std::string>& args) {
  std::string cmd = absl::StrCat(CRYO_BIN, " --socket ", socket);
  for (const auto& a : args) absl::StrAppend(&cmd, " '", a, "'");
  absl::StrAppend(&cmd, " 2>&1");
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int st = ::pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

}  // namespace cryo::e2e
