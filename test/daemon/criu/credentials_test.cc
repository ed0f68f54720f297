// What a restore would grant, read from CRIU images and bounded by a ceiling: each field that
// can raise a thread's privileges is refused by name; images that would leave a thread with
// CRIU's own credentials are refused; the container's seccomp filters are read from a live
// process.

#include "daemon/criu/credentials.h"

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>

#include "absl/strings/str_cat.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "lib/base/fs.h"
#include "test/daemon/test_util.h"

namespace cryo::criu {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kContainerCaps = 0x00000000a80425fbULL;  // containerd's default set
constexpr uint64_t kSysAdmin = uint64_t{1} << 21;
constexpr uint64_t kSysModule = uint64_t{1} << 16;

TaskCredentials User(pid_t tid, uint32_t uid) {
  TaskCredentials t;
  t.tid = tid;
  t.uid = t.euid = t.suid = t.fsuid = uid;
  t.gid = t.egid = t.sgid = t.fsgid = uid;
  t.caps.bnd = kContainerCaps;
  t.no_new_privs = true;
  return t;
}

std::string Bpf(uint32_t ret) {
  struct sock_filter f = BPF_STMT(BPF_RET | BPF_K, ret);
  return std::string(reinterpret_cast<const char*>(&f), sizeof(f));
}

TEST(CredentialsTest, ProcStatusIsParsed) {
  TaskCredentials c;
  ASSERT_TRUE(ParseProcStatus("Name:\tjob\nUid:\t1000\t1001\t1002\t1003\nGid:\t5\t6\t7\t8\n"
                              "Groups:\t10 20 \nCapInh:\t0000000000000000\n"
                              "CapPrm:\t00000000a80425fb\nCapEff:\t00000000a80425fb\n"
                              "CapBnd:\t000001ffffffffff\nCapAmb:\t0000000000000000\n"
                              "NoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n",
                              &c)
                  .ok());
  EXPECT_EQ(c.uid, 1000u);
  EXPECT_EQ(c.fsuid, 1003u);
  EXPECT_EQ(c.sgid, 7u);
  EXPECT_EQ(c.groups, (std::vector<uint32_t>{10, 20}));
  EXPECT_EQ(c.caps.eff, kContainerCaps);
  EXPECT_EQ(c.caps.bnd, 0x000001ffffffffffULL);
  EXPECT_TRUE(c.no_new_privs);
  EXPECT_EQ(c.seccomp_mode, kSeccompFilter);
  EXPECT_FALSE(ParseProcStatus("Name:\tjob\n", &c).ok());
}

TEST(CredentialsTest, ImagesRoundTripWithTheirSeccompChains) {
  TempDir d;
  TaskCredentials a = User(10, 1000);
  a.groups = {1000, 44};
  a.seccomp_mode = kSeccompFilter;
  a.seccomp_filters = {Bpf(SECCOMP_RET_ALLOW), Bpf(SECCOMP_RET_KILL)};
  TaskCredentials b = User(11, 1000);
  b.seccomp_mode = kSeccompFilter;
  b.seccomp_filters = {Bpf(SECCOMP_RET_ALLOW)};
  ASSERT_TRUE(WriteImageCredentials(d.path, {a, b}).ok());
  auto got = ReadImageCredentials(d.path);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  const TaskCredentials& ga = (*got)[0].tid == 10 ? (*got)[0] : (*got)[1];
  const TaskCredentials& gb = (*got)[0].tid == 10 ? (*got)[1] : (*got)[0];
  EXPECT_EQ(ga.uid, 1000u);
  EXPECT_EQ(ga.groups, a.groups);
  EXPECT_EQ(ga.caps.bnd, kContainerCaps);
  EXPECT_TRUE(ga.no_new_privs);
  EXPECT_EQ(ga.seccomp_filters, a.seccomp_filters);  // oldest first, as installed
  EXPECT_EQ(gb.seccomp_filters, b.seccomp_filters);
}

// CRIU's record of a process whose threads all share one filter chain (seccomp_filter_tsync,
// pthread00 under a pod's profile): the chain on the main thread only, each filter flagged
// TSYNC, the other threads with no seccomp. The restore gives every thread that chain, and the
// check reads it so; without the flag, or outside the process, a thread stays unfiltered.
TEST(CredentialsTest, ThreadsBesideATsyncMainThreadAreReadWithItsChain) {
  const std::vector<std::string> pod = {Bpf(SECCOMP_RET_ALLOW)};
  CredentialCeiling c = CeilingOf({User(1, 1000)});
  c.seccomp_mode = kSeccompFilter;
  c.seccomp_filters = pod;
  TaskCredentials main = User(20, 1000);
  main.seccomp_mode = kSeccompFilter;
  main.seccomp_filters = {pod[0], Bpf(SECCOMP_RET_TRAP)};  // the pod's, then the job's own
  const TaskCredentials t21 = User(21, 1000), t22 = User(22, 1000);  // recorded without seccomp
  TaskCredentials own = User(23, 1000);  // a thread that added a filter of its own
  own.seccomp_mode = kSeccompFilter;
  own.seccomp_filters = {pod[0], Bpf(SECCOMP_RET_TRAP), Bpf(SECCOMP_RET_ERRNO)};
  const TaskCredentials other = User(30, 1000);  // another process, single-threaded

  auto read = [&](const ImageLayout& layout) {
    TempDir d;
    EXPECT_TRUE(WriteImageCredentials(d.path, {main, t21, t22, own, other}, layout).ok());
    auto got = ReadImageCredentials(d.path);
    EXPECT_TRUE(got.ok()) << got.status();
    std::map<pid_t, TaskCredentials> by_tid;
    for (auto& t : *got) by_tid[t.tid] = t;
    return by_tid;
  };
  ImageLayout layout;
  layout.processes = {{20, {20, 21, 22, 23}}, {30, {30}}};
  layout.tsync = {20};
  auto got = read(layout);
  for (pid_t tid : {21, 22}) {
    EXPECT_EQ(got[tid].seccomp_mode, kSeccompFilter) << tid;
    EXPECT_EQ(got[tid].seccomp_filters, main.seccomp_filters) << tid;
  }
  EXPECT_EQ(got[23].seccomp_filters, own.seccomp_filters) << "its own chain is kept";
  EXPECT_EQ(got[30].seccomp_mode, kSeccompDisabled) << "not a thread of the TSYNC process";
  std::vector<TaskCredentials> threads;
  for (auto& [tid, t] : got) {
    if (tid != 30) threads.push_back(t);
  }
  EXPECT_TRUE(CheckCredentials(threads, c, "container c").ok());
  absl::Status st = CheckCredentials({got[30]}, c, "container c");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(st.message()), HasSubstr("thread 30 "));
  EXPECT_THAT(std::string(st.message()), HasSubstr("seccomp mode is 0, must be 2"));

  // The same images without the flag: CRIU would restore threads 21 and 22 unfiltered.
  layout.tsync.clear();
  got = read(layout);
  EXPECT_EQ(got[21].seccomp_mode, kSeccompDisabled);
  st = CheckCredentials({got[20], got[21]}, c, "container c");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(st.message()), HasSubstr("thread 21 "));
  EXPECT_THAT(std::string(st.message()), HasSubstr("seccomp mode is 0, must be 2"));

  // A pstree.img that is not CRIU's is refused, not read as "no processes".
  TempDir d;
  ASSERT_TRUE(WriteImageCredentials(d.path, {main, t21}, {}).ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/pstree.img", "garbage").ok());
  EXPECT_EQ(ReadImageCredentials(d.path).status().code(), absl::StatusCode::kInvalidArgument);
}

// Images of CRIU before per-thread seccomp kept the process's filter in the main thread's task
// core (old_seccomp_mode/filter), which the restore installs with TSYNC forced: its other
// threads, recorded without seccomp, have that chain as well.
TEST(CredentialsTest, ALegacyPerTaskFilterIsEveryThreadsChain) {
  TempDir d;
  TaskCredentials main = User(20, 1000);
  main.seccomp_mode = kSeccompFilter;
  main.seccomp_filters = {Bpf(SECCOMP_RET_ALLOW)};
  ImageLayout layout;
  layout.processes = {{20, {20, 21}}};
  ASSERT_TRUE(WriteImageCredentials(d.path, {main, User(21, 1000)}, layout).ok());
  // Move the main thread's seccomp into the legacy task fields, as old CRIU wrote them.
  const std::string core_path = d.path + "/core-20.img";
  auto b = fs::ReadFile(core_path);
  ASSERT_TRUE(b.ok());
  ::criu::core_entry core;
  ASSERT_TRUE(core.ParseFromString(b->substr(12)));
  core.mutable_tc()->set_old_seccomp_mode(kSeccompFilter);
  core.mutable_tc()->set_old_seccomp_filter(core.thread_core().seccomp_filter());
  core.mutable_thread_core()->clear_seccomp_mode();
  core.mutable_thread_core()->clear_seccomp_filter();
  ASSERT_TRUE(
      fs::WriteFileAtomic(core_path, FrameImage({kImgCommonMagic, kCoreMagic}, {&core})).ok());
  auto got = ReadImageCredentials(d.path);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_EQ(got->size(), 2u);
  for (const auto& t : *got) {
    EXPECT_EQ(t.seccomp_mode, kSeccompFilter) << t.tid;
    EXPECT_EQ(t.seccomp_filters, main.seccomp_filters) << t.tid;
  }
}

TEST(CredentialsTest, EachRaisedFieldIsRefusedByName) {
  CredentialCeiling c = CeilingOf({User(1, 1000)});
  c.seccomp_mode = kSeccompFilter;
  c.seccomp_filters = std::vector<std::string>{Bpf(SECCOMP_RET_ALLOW)};
  TaskCredentials honest = User(7, 1000);
  honest.seccomp_mode = kSeccompFilter;
  honest.seccomp_filters = {Bpf(SECCOMP_RET_ALLOW), Bpf(SECCOMP_RET_ALLOW)};  // one of its own
  EXPECT_TRUE(CheckCredentials({honest}, c, "container c").ok());

  struct Case {
    const char* field;
    std::function<void(TaskCredentials&)> raise;
  };
  const Case cases[] = {
      {"uid", [](TaskCredentials& t) { t.uid = 0; }},
      {"euid", [](TaskCredentials& t) { t.euid = 0; }},
      {"fsgid", [](TaskCredentials& t) { t.fsgid = 0; }},
      {"groups", [](TaskCredentials& t) { t.groups = {0}; }},
      {"cap_eff", [](TaskCredentials& t) { t.caps.eff = kSysAdmin; }},
      {"cap_prm", [](TaskCredentials& t) { t.caps.prm = kSysModule; }},
      {"cap_bnd", [](TaskCredentials& t) { t.caps.bnd = ~uint64_t{0}; }},
      {"cap_inh", [](TaskCredentials& t) { t.caps.inh = kSysAdmin; }},
      {"cap_amb", [](TaskCredentials& t) { t.caps.amb = kSysAdmin; }},
      {"no_new_privs", [](TaskCredentials& t) { t.no_new_privs = false; }},
      {"seccomp", [](TaskCredentials& t) { t.seccomp_mode = kSeccompDisabled; }},
      {"seccomp", [](TaskCredentials& t) { t.seccomp_filters = {Bpf(SECCOMP_RET_KILL)}; }},
      {"lsm_profile", [](TaskCredentials& t) { t.lsm = "unconfined_t"; }},
      {"apparmor_data", [](TaskCredentials& t) { t.apparmor_data = true; }},
  };
  for (const auto& k : cases) {
    TaskCredentials t = honest;
    k.raise(t);
    absl::Status st = CheckCredentials({honest, t}, c, "container c");
    EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << k.field;
    EXPECT_THAT(std::string(st.message()), HasSubstr(k.field));
    EXPECT_THAT(std::string(st.message()), HasSubstr("container c"));
  }
  TaskCredentials admin = honest;
  admin.caps.eff = kSysAdmin | kSysModule;
  EXPECT_THAT(std::string(CheckCredentials({admin}, c, "x").message()),
              HasSubstr("CAP_SYS_MODULE, CAP_SYS_ADMIN"));
}

// The new pod's runtime may compile the same profile into other bytes (runc orders its
// per-architecture checks by a Go map): a chain that decides every call as the target's does is
// the target's; one that allows a call the target refuses is not.
TEST(CredentialsTest, TheTargetsFiltersCompiledAsOtherBytesAreTheTargetsFilters) {
  auto prog = [](uint32_t first_arch, uint32_t second_arch, uint32_t refused_ret) {
    const std::vector<sock_filter> p = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 4),  // arch
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, first_arch, 1, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, second_arch, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 0),           // nr
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 165, 0, 1),  // mount
        BPF_STMT(BPF_RET | BPF_K, refused_ret),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return std::string(reinterpret_cast<const char*>(p.data()), p.size() * sizeof(sock_filter));
  };
  constexpr uint32_t kX86 = 0xc000003e, kI386 = 0x40000003;
  const uint32_t eperm = SECCOMP_RET_ERRNO | 1;
  CredentialCeiling c = CeilingOf({User(1, 1000)});
  c.seccomp_mode = kSeccompFilter;
  c.seccomp_filters = std::vector<std::string>{prog(kX86, kI386, eperm)};
  TaskCredentials t = User(7, 1000);
  t.seccomp_mode = kSeccompFilter;
  t.seccomp_filters = {prog(kI386, kX86, eperm), Bpf(SECCOMP_RET_ALLOW)};  // and one of its own
  ASSERT_NE(t.seccomp_filters[0], (*c.seccomp_filters)[0]);
  EXPECT_TRUE(CheckCredentials({t, t}, c, "container c").ok());
  t.seccomp_filters[0] = prog(kI386, kX86, SECCOMP_RET_ALLOW);  // mount allowed
  absl::Status st = CheckCredentials({t}, c, "container c");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(st.message()), HasSubstr("seccomp filters do not start with the 1"));
}

// A root container whose entrypoint drops to another user (gosu, su-exec) restores: with
// CAP_SETUID and CAP_SETGID it could become that user itself. Without them it may not.
TEST(CredentialsTest, ATargetThatMayChangeItsUidsBindsNoUid) {
  TaskCredentials root = User(1, 0);
  root.caps.prm = root.caps.eff = kContainerCaps;  // has CAP_SETUID and CAP_SETGID
  root.no_new_privs = false;
  TaskCredentials dropped = User(9, 999);
  dropped.groups = {999};
  dropped.no_new_privs = false;
  EXPECT_TRUE(CheckCredentials({dropped}, CeilingOf({root}), "c").ok());
  root.caps.prm = root.caps.eff = kContainerCaps & ~(uint64_t{1} << 7);  // no CAP_SETUID
  absl::Status st = CheckCredentials({dropped}, CeilingOf({root}), "c");
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(st.message()), HasSubstr("uid is 999"));
}

TEST(CredentialsTest, ALabelledTargetBindsEveryThreadToItsLabel) {
  TaskCredentials init = User(1, 0);
  init.lsm = "cri-containerd.apparmor.d";
  CredentialCeiling c = CeilingOf({init});
  TaskCredentials t = init;
  EXPECT_TRUE(CheckCredentials({t}, c, "c").ok());
  t.lsm = "";
  EXPECT_EQ(CheckCredentials({t}, c, "c").code(), absl::StatusCode::kPermissionDenied);
}

TEST(CredentialsTest, AThreadWithoutCredentialsOrALegacyCredsImageIsRefused) {
  TempDir d;
  ASSERT_TRUE(WriteImageCredentials(d.path, {User(5, 1000)}).ok());
  // core-6.img: a live thread whose core has no creds (CRIU would leave it root).
  ::criu::core_entry core;
  core.set_mtype(1);
  core.mutable_tc()->set_task_state(1);
  core.mutable_thread_core()->set_futex_rla(0);
  std::string body = core.SerializeAsString();
  std::string img;
  const uint32_t magics[] = {0x54564319, 0x55053847, static_cast<uint32_t>(body.size())};
  img.append(reinterpret_cast<const char*>(magics), sizeof(magics));
  img += body;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/core-6.img", img).ok());
  auto r = ReadImageCredentials(d.path);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("core-6.img"));

  // The same core as a zombie's is fine: a zombie runs nothing.
  core.mutable_tc()->set_task_state(2);
  core.clear_thread_core();
  body = core.SerializeAsString();
  img.resize(8);
  const uint32_t n = static_cast<uint32_t>(body.size());
  img.append(reinterpret_cast<const char*>(&n), 4);
  img += body;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/core-6.img", img).ok());
  r = ReadImageCredentials(d.path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 1u);

  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/creds-5.img", "x").ok());
  EXPECT_EQ(ReadImageCredentials(d.path).status().code(), absl::StatusCode::kPermissionDenied);
}

TEST(CredentialsTest, DamagedImagesAreRefusedNotTrusted) {
  TempDir d;
  ASSERT_TRUE(WriteImageCredentials(d.path, {User(5, 1000)}).ok());
  auto core = fs::ReadFile(d.path + "/core-5.img");
  ASSERT_TRUE(core.ok());
  // An entry size past the end; a wrong magic; no core at all.
  std::string bad = *core;
  bad[8] = '\xff';
  bad[9] = '\xff';
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/core-5.img", bad).ok());
  EXPECT_EQ(ReadImageCredentials(d.path).status().code(), absl::StatusCode::kInvalidArgument);
  bad = *core;
  bad[0] = 0;
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/core-5.img", bad).ok());
  EXPECT_EQ(ReadImageCredentials(d.path).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(fs::RemoveTree(d.path + "/core-5.img").ok());
  EXPECT_FALSE(ReadImageCredentials(d.path).ok());
}

TEST(CredentialsTest, NamespaceImagesAreRefusedForContainers) {
  TempDir d;
  ASSERT_TRUE(WriteImageCredentials(d.path, {User(5, 1000)}).ok());
  EXPECT_TRUE(CheckNoNamespaceImages(d.path).ok());
  ASSERT_TRUE(fs::WriteFileAtomic(d.path + "/mountpoints-12.img", "x").ok());
  absl::Status st = CheckNoNamespaceImages(d.path);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(st.message()), HasSubstr("mountpoints-12.img"));
}

TEST(CredentialsTest, CeilingOfTasksAndItsJsonRoundTrip) {
  TaskCredentials a = User(1, 1000), b = User(2, 1001);
  b.no_new_privs = false;
  b.caps.eff = kSysAdmin;
  CredentialCeiling c = CeilingOf({a, b});
  EXPECT_EQ(c.uids, (std::set<uint32_t>{1000, 1001}));
  EXPECT_EQ(c.caps.eff, kSysAdmin);
  EXPECT_FALSE(c.no_new_privs);
  auto back = CeilingFromJson(CeilingToJson(c));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, c);
  nlohmann::json j = CeilingToJson(c);
  j["cap_eff"] = "all";
  EXPECT_EQ(CeilingFromJson(j).status().code(), absl::StatusCode::kInvalidArgument);
  // Crafted records are refused naming what is wrong, never read as a wider ceiling.
  auto refused = [&](const char* key, nlohmann::json v) {
    nlohmann::json r = CeilingToJson(c);
    if (v.is_discarded()) {
      r.erase(key);
    } else {
      r[key] = std::move(v);
    }
    absl::StatusOr<CredentialCeiling> got = CeilingFromJson(r);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << key;
    EXPECT_THAT(std::string(got.status().message()), HasSubstr(key));
  };
  refused("uids", nlohmann::json::array({uint64_t{1} << 32}));  // not a uid
  refused("gids", nlohmann::json::array({-1}));
  refused("groups", nlohmann::json::value_t::discarded);  // missing
  refused("seccomp_mode", 3);
  refused("lsm", std::string(5000, 'x'));
  refused("rlimit_max", nlohmann::json::array({"unlimited"}));
  // A record from before cryo kept the limits reads with none.
  nlohmann::json old = CeilingToJson(c);
  old.erase("rlimit_max");
  auto without = CeilingFromJson(old);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->rlimit_max.empty());
}

TEST(CredentialsTest, LiveCredentialsAndSeccompFiltersOfAProcess) {
  // A child that installs one filter (allow everything) and waits.
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const std::string prog = Bpf(SECCOMP_RET_ALLOW);
  pid_t child = ::fork();
  if (child == 0) {
    struct sock_fprog fp = {1,
                            reinterpret_cast<struct sock_filter*>(const_cast<char*>(prog.data()))};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp) != 0) {
      ::_exit(1);
    }
    (void)!::write(ready[1], "r", 1);
    for (;;) ::pause();
  }
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  proc::ProcReader proc;
  auto live = ReadLiveCredentials(proc, child);
  ASSERT_TRUE(live.ok()) << live.status();
  EXPECT_EQ(live->uid, ::getuid());
  EXPECT_TRUE(live->no_new_privs);
  EXPECT_EQ(live->seccomp_mode, kSeccompFilter);
  auto filters = ReadSeccompFilters(child);
  ASSERT_TRUE(filters.ok()) << filters.status();
  ASSERT_EQ(filters->size(), 1u);
  EXPECT_EQ((*filters)[0], prog);
  // Let go again: it still runs and is not traced.
  EXPECT_EQ(::kill(child, 0), 0);
  auto status = fs::ReadFile(absl::StrCat("/proc/", child, "/status"));
  ASSERT_TRUE(status.ok());
  EXPECT_THAT(*status, HasSubstr("TracerPid:\t0"));
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace cryo::criu
