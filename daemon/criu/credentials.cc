#include "daemon/criu/credentials.h"

#include <linux/filter.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "criu/images.pb.h"
#include "daemon/criu/image_file.h"
#include "daemon/criu/seccomp_compare.h"
#include "lib/base/fs.h"
#include "lib/base/json_table.h"
#include "lib/base/status.h"

namespace cryo::criu {
namespace {

constexpr uint32_t kImagesV1_1 = 2;
constexpr uint32_t kTaskDead = 0x02;  // a zombie: restored only to be reaped, runs nothing
// A seccomp image holds BPF programs of at most 4096 instructions each.
constexpr uint64_t kMaxSeccompBytes = 16 << 20;
constexpr size_t kMaxFilterChain = 1024;
// One entry per process (pid, parents, threads): a tree of 100k threads is a few MiB.
constexpr uint64_t kMaxPstreeBytes = 64 << 20;
constexpr uint32_t kSeccompFilterFlagTsync = 1;  // SECCOMP_FILTER_FLAG_TSYNC
constexpr uint64_t kCapSetgid = uint64_t{1} << 6;
constexpr uint64_t kCapSetuid = uint64_t{1} << 7;

// The images of the namespaces CRIU would create at restore. Container mode never has them
// (CRIU runs inside the container's namespaces and records none): one that has them asks CRIU
// to build mounts and namespaces with its own privileges.
constexpr const char* kNamespaceImages[] = {"mountpoints-", "userns-", "netns-",   "utsns-",
                                            "ipcns-",       "pidns-",  "cgroupns-"};

uint64_t CapWords(const google::protobuf::RepeatedField<uint32_t>& w, bool* over) {
  uint64_t v = 0;
  for (int i = 0; i < w.size(); ++i) {
    if (i < 2) {
      v |= static_cast<uint64_t>(w.Get(i)) << (32 * i);
    } else if (w.Get(i) != 0) {
      *over = true;
    }
  }
  return v;
}

void SetCapWords(uint64_t v, google::protobuf::RepeatedField<uint32_t>* w) {
  w->Add(static_cast<uint32_t>(v));
  w->Add(static_cast<uint32_t>(v >> 32));
}

std::string StripLsmMode(absl::string_view label) {
  label = absl::StripTrailingAsciiWhitespace(label);
  // AppArmor shows "profile (enforce)"; CRIU records the profile alone.
  if (absl::EndsWith(label, ")")) {
    if (size_t p = label.rfind(" ("); p != absl::string_view::npos) label = label.substr(0, p);
  }
  // Unterminated strings from the kernel end with a NUL.
  while (!label.empty() && label.back() == '\0') label.remove_suffix(1);
  return std::string(label);
}

const char* kCapNames[] = {"CAP_CHOWN",
                           "CAP_DAC_OVERRIDE",
                           "CAP_DAC_READ_SEARCH",
                           "CAP_FOWNER",
                           "CAP_FSETID",
                           "CAP_KILL",
                           "CAP_SETGID",
                           "CAP_SETUID",
                           "CAP_SETPCAP",
                           "CAP_LINUX_IMMUTABLE",
                           "CAP_NET_BIND_SERVICE",
                           "CAP_NET_BROADCAST",
                           "CAP_NET_ADMIN",
                           "CAP_NET_RAW",
                           "CAP_IPC_LOCK",
                           "CAP_IPC_OWNER",
                           "CAP_SYS_MODULE",
                           "CAP_SYS_RAWIO",
                           "CAP_SYS_CHROOT",
                           "CAP_SYS_PTRACE",
                           "CAP_SYS_PACCT",
                           "CAP_SYS_ADMIN",
                           "CAP_SYS_BOOT",
                           "CAP_SYS_NICE",
                           "CAP_SYS_RESOURCE",
                           "CAP_SYS_TIME",
                           "CAP_SYS_TTY_CONFIG",
                           "CAP_MKNOD",
                           "CAP_LEASE",
                           "CAP_AUDIT_WRITE",
                           "CAP_AUDIT_CONTROL",
                           "CAP_SETFCAP",
                           "CAP_MAC_OVERRIDE",
                           "CAP_MAC_ADMIN",
                           "CAP_SYSLOG",
                           "CAP_WAKE_ALARM",
                           "CAP_BLOCK_SUSPEND",
                           "CAP_AUDIT_READ",
                           "CAP_PERFMON",
                           "CAP_BPF",
                           "CAP_CHECKPOINT_RESTORE"};

std::string CapList(uint64_t bits) {
  std::vector<std::string> names;
  for (int i = 0; i < 64; ++i) {
    if (!(bits & (uint64_t{1} << i))) continue;
    names.push_back(i < static_cast<int>(std::size(kCapNames)) ? kCapNames[i]
                                                               : absl::StrCat("cap ", i));
  }
  return absl::StrJoin(names, ", ");
}

// CRIU keeps the filter chain that every thread of a process shares on the main thread only,
// each filter flagged TSYNC, and records the other threads without seccomp (criu/seccomp.c,
// try_use_tsync). Its restore installs that chain with TSYNC, which the kernel gives to every
// thread of the process; so a thread recorded without seccomp runs under the main thread's
// chain, up to its newest TSYNC filter, and is checked with it. A thread with a chain of its
// own keeps it: TSYNC could only add to it, or fail the restore. Without pstree.img (the
// tests' fake CRIU writes none) nothing is shared, which reads every thread as strictly as can
// be; CRIU cannot restore such images anyway.
absl::Status ApplyThreadSync(const std::string& images_dir, bool has_pstree,
                             const std::vector<size_t>& synced,
                             std::vector<TaskCredentials>* threads) {
  if (!has_pstree) return absl::OkStatus();
  CRYO_ASSIGN_OR_RETURN(auto entries, ReadImageEntries(images_dir, "pstree.img", kPstreeMagic, true,
                                                       kMaxPstreeBytes));
  std::map<pid_t, size_t> by_tid;
  for (size_t k = 0; k < threads->size(); ++k) by_tid[(*threads)[k].tid] = k;
  for (const auto& raw : entries) {
    ::criu::pstree_entry pe;
    if (!pe.ParseFromString(raw)) {
      return absl::InvalidArgumentError("CRIU image pstree.img does not parse");
    }
    auto leader = by_tid.find(static_cast<pid_t>(pe.pid()));
    if (leader == by_tid.end() || synced[leader->second] == 0) continue;
    const TaskCredentials& main = (*threads)[leader->second];
    for (uint32_t tid : pe.threads()) {
      auto it = by_tid.find(static_cast<pid_t>(tid));
      if (it == by_tid.end() || it == leader) continue;
      TaskCredentials& t = (*threads)[it->second];
      if (t.seccomp_mode != kSeccompDisabled) continue;
      t.seccomp_mode = kSeccompFilter;
      t.seccomp_filters.assign(
          main.seccomp_filters.begin(),
          main.seccomp_filters.begin() + static_cast<std::ptrdiff_t>(synced[leader->second]));
    }
  }
  return absl::OkStatus();
}

}  // namespace

CredentialCeiling CeilingOf(const std::vector<TaskCredentials>& tasks) {
  CredentialCeiling c;
  bool first = true;
  for (const auto& t : tasks) {
    c.uids.insert({t.uid, t.euid, t.suid, t.fsuid});
    c.gids.insert({t.gid, t.egid, t.sgid, t.fsgid});
    c.groups.insert(t.groups.begin(), t.groups.end());
    c.caps.inh |= t.caps.inh;
    c.caps.prm |= t.caps.prm;
    c.caps.eff |= t.caps.eff;
    c.caps.bnd |= t.caps.bnd;
    c.caps.amb |= t.caps.amb;
    if (first) {
      c.no_new_privs = t.no_new_privs;
      c.seccomp_mode = t.seccomp_mode;
      c.lsm = t.lsm;
    } else {
      c.no_new_privs = c.no_new_privs && t.no_new_privs;
      c.seccomp_mode = std::min(c.seccomp_mode, t.seccomp_mode);
      if (c.lsm != t.lsm) c.lsm = "unconfined";  // tasks of different labels: none is binding
    }
    first = false;
  }
  // Which filters each task had is in the (signed) images; the ceiling keeps the mode only.
  return c;
}

absl::Status ParseProcStatus(absl::string_view status, TaskCredentials* c) {
  int seen = 0;
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    std::pair<absl::string_view, absl::string_view> kv =
        absl::StrSplit(line, absl::MaxSplits(':', 1));
    const absl::string_view key = kv.first;
    const absl::string_view val = absl::StripAsciiWhitespace(kv.second);
    std::vector<absl::string_view> w =
        absl::StrSplit(val, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    auto ids = [&](uint32_t* a, uint32_t* b, uint32_t* s, uint32_t* f) {
      if (w.size() != 4 || !absl::SimpleAtoi(w[0], a) || !absl::SimpleAtoi(w[1], b) ||
          !absl::SimpleAtoi(w[2], s) || !absl::SimpleAtoi(w[3], f)) {
        return false;
      }
      ++seen;
      return true;
    };
    auto cap = [&](uint64_t* v) {
      if (!absl::SimpleHexAtoi(val, v)) return false;
      ++seen;
      return true;
    };
    bool ok = true;
    if (key == "Uid") {
      ok = ids(&c->uid, &c->euid, &c->suid, &c->fsuid);
    } else if (key == "Gid") {
      ok = ids(&c->gid, &c->egid, &c->sgid, &c->fsgid);
    } else if (key == "Groups") {
      c->groups.clear();
      for (auto g : w) {
        uint32_t v;
        if (!absl::SimpleAtoi(g, &v)) ok = false;
        c->groups.push_back(v);
      }
    } else if (key == "CapInh") {
      ok = cap(&c->caps.inh);
    } else if (key == "CapPrm") {
      ok = cap(&c->caps.prm);
    } else if (key == "CapEff") {
      ok = cap(&c->caps.eff);
    } else if (key == "CapBnd") {
      ok = cap(&c->caps.bnd);
    } else if (key == "CapAmb") {
      ok = cap(&c->caps.amb);
    } else if (key == "NoNewPrivs") {
      c->no_new_privs = val == "1";
    } else if (key == "Seccomp") {
      ok = absl::SimpleAtoi(val, &c->seccomp_mode);
    }
    if (!ok) return absl::InvalidArgumentError(absl::StrCat("unexpected status line: ", line));
  }
  // Uid, Gid and the five capability sets are in every kernel we run on.
  if (seen != 7) return absl::InvalidArgumentError("status lacks Uid, Gid or Cap* lines");
  return absl::OkStatus();
}

absl::StatusOr<TaskCredentials> ReadLiveCredentials(const proc::ProcReader& proc, pid_t pid,
                                                    pid_t tid) {
  const std::string base = tid > 0 ? absl::StrCat("task/", tid, "/") : "";
  CRYO_ASSIGN_OR_RETURN(std::string status,
                        fs::ReadFile(proc.PidPath(pid, absl::StrCat(base, "status"))));
  TaskCredentials c;
  c.tid = tid > 0 ? tid : pid;
  CRYO_RETURN_IF_ERROR(
      Annotate(ParseProcStatus(status, &c), absl::StrCat("reading credentials of pid ", pid)));
  // No LSM: the read fails (EINVAL), which is an empty label.
  auto label = fs::ReadFile(proc.PidPath(pid, absl::StrCat(base, "attr/current")));
  if (label.ok()) c.lsm = StripLsmMode(*label);
  return c;
}

absl::StatusOr<std::vector<std::string>> ReadSeccompFilters(pid_t pid) {
  if (::ptrace(PTRACE_SEIZE, pid, nullptr, nullptr) != 0) {
    return ErrnoStatus(errno, absl::StrCat("ptrace(SEIZE) of pid ", pid));
  }
  std::vector<std::string> newest_first;
  absl::Status st;
  int wstatus = 0;
  if (::ptrace(PTRACE_INTERRUPT, pid, nullptr, nullptr) != 0 ||
      ::waitpid(pid, &wstatus, __WALL) != pid) {
    st = ErrnoStatus(errno, absl::StrCat("stopping pid ", pid, " to read its seccomp filters"));
  }
  for (unsigned long i = 0; st.ok() && i < kMaxFilterChain; ++i) {
    long n = ::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, reinterpret_cast<void*>(i), nullptr);
    if (n < 0) {
      if (errno != ENOENT) st = ErrnoStatus(errno, absl::StrCat("reading seccomp filter ", i));
      break;
    }
    std::string prog(static_cast<size_t>(n) * sizeof(struct sock_filter), '\0');
    if (::ptrace(PTRACE_SECCOMP_GET_FILTER, pid, reinterpret_cast<void*>(i), prog.data()) != n) {
      st = ErrnoStatus(errno, absl::StrCat("reading seccomp filter ", i));
      break;
    }
    newest_first.push_back(std::move(prog));
  }
  ::ptrace(PTRACE_DETACH, pid, nullptr, nullptr);
  CRYO_RETURN_IF_ERROR(st);
  return std::vector<std::string>(newest_first.rbegin(), newest_first.rend());
}

namespace {

// A thread's credentials from its core image `name` (and the images' seccomp filters `se`) into
// `t`; `sync`: how many of its filters, oldest first, a restore gives the other threads of its
// process too (the chain up to its newest TSYNC filter).
absl::Status ThreadCredentials(const std::string& name, const ::criu::core_entry& core,
                               const ::criu::seccomp_entry& se, TaskCredentials* t, size_t* sync) {
  const auto& tc = core.thread_core();
  const auto& ce = tc.creds();
  t->uid = ce.uid();
  t->euid = ce.euid();
  t->suid = ce.suid();
  t->fsuid = ce.fsuid();
  t->gid = ce.gid();
  t->egid = ce.egid();
  t->sgid = ce.sgid();
  t->fsgid = ce.fsgid();
  t->groups.assign(ce.groups().begin(), ce.groups().end());
  bool over = false;
  t->caps.inh = CapWords(ce.cap_inh(), &over);
  t->caps.prm = CapWords(ce.cap_prm(), &over);
  t->caps.eff = CapWords(ce.cap_eff(), &over);
  t->caps.bnd = CapWords(ce.cap_bnd(), &over);
  t->caps.amb = CapWords(ce.cap_amb(), &over);
  if (over) {
    return absl::PermissionDeniedError(
        absl::StrCat("image ", name, ": capability bits beyond 64, which no kernel has"));
  }
  t->no_new_privs = ce.no_new_privs() != 0;
  t->lsm = ce.lsm_profile();
  t->lsm_sockcreate = ce.lsm_sockcreate();
  t->apparmor_data = ce.has_apparmor_data() && !ce.apparmor_data().empty();
  // Old images kept seccomp per task; CRIU lets those fields win.
  uint32_t mode = tc.seccomp_mode();
  bool has_filter = tc.has_seccomp_filter();
  uint32_t filter = tc.seccomp_filter();
  // A legacy per-task filter is restored with TSYNC forced (cr-restore.c), whatever its flags.
  bool legacy_filter = false;
  if (core.has_tc() && core.tc().has_old_seccomp_mode()) mode = core.tc().old_seccomp_mode();
  if (core.has_tc() && core.tc().has_old_seccomp_filter()) {
    has_filter = true;
    legacy_filter = true;
    filter = core.tc().old_seccomp_filter();
  }
  t->seccomp_mode = static_cast<int>(mode);
  *sync = 0;
  if (mode == kSeccompFilter && has_filter) {
    // CRIU starts at the oldest filter and follows `prev` to newer ones.
    std::set<uint32_t> seen;
    uint32_t i = filter;
    for (;;) {
      if (i >= static_cast<uint32_t>(se.seccomp_filters_size()) || !seen.insert(i).second ||
          seen.size() > kMaxFilterChain) {
        return absl::InvalidArgumentError(
            absl::StrCat("image ", name, ": its seccomp filter chain is broken"));
      }
      const auto& f = se.seccomp_filters(static_cast<int>(i));
      t->seccomp_filters.push_back(f.filter());
      if (legacy_filter || (f.flags() & kSeccompFilterFlagTsync) != 0) {
        *sync = t->seccomp_filters.size();
      }
      if (!f.has_prev()) break;
      i = f.prev();
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<TaskCredentials>> ReadImageCredentials(const std::string& images_dir) {
  CRYO_ASSIGN_OR_RETURN(auto listing, ListImages(images_dir));
  std::vector<std::string> cores;
  bool has_seccomp = false;
  bool has_pstree = false;
  for (const auto& e : listing) {
    if (absl::StartsWith(e.name, "creds-")) {
      return absl::PermissionDeniedError(
          absl::StrCat("image ", e.name,
                       " holds credentials in CRIU's legacy per-task form, which cryo "
                       "does not check: refused"));
    }
    if (absl::StartsWith(e.name, "core-") && absl::EndsWith(e.name, ".img")) {
      cores.push_back(e.name);
    }
    if (e.name == "seccomp.img") has_seccomp = true;
    if (e.name == "pstree.img") has_pstree = true;
  }
  if (cores.empty()) {
    return absl::InvalidArgumentError("the checkpoint has no CRIU core images");
  }
  // The image version decides whether entries carry the common magic; only the current one is
  // read (CRIU has written it since 2016).
  CRYO_ASSIGN_OR_RETURN(
      auto inv, ReadImageEntries(images_dir, "inventory.img", kInventoryMagic, false, 1 << 20));
  ::criu::inventory_entry ie;
  if (inv.empty() || !ie.ParseFromString(inv[0])) {
    return absl::InvalidArgumentError("CRIU image inventory.img does not parse");
  }
  if (ie.img_version() != kImagesV1_1) {
    return absl::InvalidArgumentError(
        absl::StrCat("CRIU images of format version ", ie.img_version(), " are not supported"));
  }
  ::criu::seccomp_entry se;
  if (has_seccomp) {
    CRYO_ASSIGN_OR_RETURN(auto sec, ReadImageEntries(images_dir, "seccomp.img", kSeccompMagic, true,
                                                     kMaxSeccompBytes));
    if (!sec.empty() && !se.ParseFromString(sec[0])) {
      return absl::InvalidArgumentError("CRIU image seccomp.img does not parse");
    }
  }
  std::vector<TaskCredentials> out;
  // Per thread (same order as out): how many of its filters, oldest first, a restore gives the
  // other threads of its process too (the chain up to its newest TSYNC filter).
  std::vector<size_t> synced;
  for (const auto& name : cores) {
    CRYO_ASSIGN_OR_RETURN(::criu::core_entry core, ReadCoreImage(images_dir, name));
    TaskCredentials t;
    absl::string_view num = absl::StripSuffix(absl::StripPrefix(name, "core-"), ".img");
    (void)absl::SimpleAtoi(num, &t.tid);
    const bool zombie = core.has_tc() && core.tc().task_state() == kTaskDead;
    if (!core.has_thread_core() || !core.thread_core().has_creds()) {
      // CRIU then leaves the thread with its own credentials (root, every capability).
      if (zombie) continue;
      return absl::PermissionDeniedError(
          absl::StrCat("image ", name,
                       " has no credentials for its thread: CRIU would restore it with its "
                       "own (root, every capability); refused"));
    }
    size_t sync = 0;
    CRYO_RETURN_IF_ERROR(ThreadCredentials(name, core, se, &t, &sync));
    out.push_back(std::move(t));
    synced.push_back(sync);
  }
  CRYO_RETURN_IF_ERROR(ApplyThreadSync(images_dir, has_pstree, synced, &out));
  return out;
}

absl::Status CheckCredentials(const std::vector<TaskCredentials>& threads,
                              const CredentialCeiling& c, absl::string_view ceiling_name) {
  // A filter the target has against one of the images: the same bytes, or a program that decides
  // every call the same way (a runtime can compile one profile into programs of other bytes).
  // Threads share chains: each pair is compared once.
  std::map<std::pair<std::string, std::string>, bool> same;
  auto same_filter = [&same](const std::string& want, const std::string& have) {
    if (want == have) return true;
    auto [it, fresh] = same.try_emplace({want, have}, false);
    if (fresh) it->second = SameSeccompDecisions(want, have);
    return it->second;
  };
  for (const auto& t : threads) {
    auto deny = [&](absl::string_view field, absl::string_view what) {
      return absl::PermissionDeniedError(
          absl::StrCat("checkpoint would restore thread ", t.tid, " with more than ", ceiling_name,
                       " grants: ", field, " ", what, "; refused before anything started"));
    };
    // A target that may change its uids (CAP_SETUID permitted: a root container whose entrypoint
    // drops to another user, as gosu does) may run as any: that gains nothing the capability
    // checks below do not bound. Likewise gids and groups with CAP_SETGID.
    const bool any_uid = (c.caps.prm & kCapSetuid) != 0;
    const bool any_gid = (c.caps.prm & kCapSetgid) != 0;
    const std::pair<const char*, uint32_t> uids[] = {
        {"uid", t.uid}, {"euid", t.euid}, {"suid", t.suid}, {"fsuid", t.fsuid}};
    for (const auto& [f, v] : uids) {
      if (!any_uid && !c.uids.count(v)) {
        return deny(f, absl::StrCat("is ", v, ", allowed: ", absl::StrJoin(c.uids, ",")));
      }
    }
    const std::pair<const char*, uint32_t> gids[] = {
        {"gid", t.gid}, {"egid", t.egid}, {"sgid", t.sgid}, {"fsgid", t.fsgid}};
    for (const auto& [f, v] : gids) {
      if (!any_gid && !c.gids.count(v)) {
        return deny(f, absl::StrCat("is ", v, ", allowed: ", absl::StrJoin(c.gids, ",")));
      }
    }
    for (uint32_t g : t.groups) {
      if (!any_gid && !c.groups.count(g) && !c.gids.count(g)) {
        return deny("groups", absl::StrCat("has ", g, ", allowed: ", absl::StrJoin(c.groups, ",")));
      }
    }
    const std::pair<const char*, std::pair<uint64_t, uint64_t>> caps[] = {
        {"cap_inh", {t.caps.inh, c.caps.inh}},
        {"cap_prm", {t.caps.prm, c.caps.prm}},
        {"cap_eff", {t.caps.eff, c.caps.eff}},
        {"cap_bnd", {t.caps.bnd, c.caps.bnd}},
        {"cap_amb", {t.caps.amb, c.caps.amb}}};
    for (const auto& [f, v] : caps) {
      if (uint64_t extra = v.first & ~v.second; extra != 0) {
        return deny(f, absl::StrCat("has ", CapList(extra), ", which it may not"));
      }
    }
    if (c.no_new_privs && !t.no_new_privs) return deny("no_new_privs", "is off, must be on");
    if (t.seccomp_mode < c.seccomp_mode ||
        (c.seccomp_mode == kSeccompStrict && t.seccomp_mode != kSeccompStrict)) {
      return deny("seccomp",
                  absl::StrCat("mode is ", t.seccomp_mode, ", must be ", c.seccomp_mode));
    }
    if (c.seccomp_mode == kSeccompFilter && c.seccomp_filters) {
      const auto& want = *c.seccomp_filters;
      if (t.seccomp_filters.size() < want.size() ||
          !std::equal(want.begin(), want.end(), t.seccomp_filters.begin(), same_filter)) {
        return deny("seccomp",
                    absl::StrCat("filters do not start with the ", want.size(),
                                 " filter(s) the target has, nor with filters that decide "
                                 "every call as they do"));
      }
    }
    if (t.apparmor_data) return deny("apparmor_data", "is present (AppArmor policy to load)");
    if (!c.lsm.empty() && c.lsm != "unconfined") {
      if (t.lsm != c.lsm) {
        return deny("lsm_profile", absl::StrCat("is '", t.lsm, "', must be '", c.lsm, "'"));
      }
      if (!t.lsm_sockcreate.empty() && t.lsm_sockcreate != c.lsm) {
        return deny("lsm_sockcreate", absl::StrCat("is '", t.lsm_sockcreate, "'"));
      }
    } else if (c.lsm.empty() && (!t.lsm.empty() || !t.lsm_sockcreate.empty())) {
      return deny("lsm_profile", absl::StrCat("is '", t.lsm, "' where the target has none"));
    }
  }
  return absl::OkStatus();
}

namespace {

// The record's table (lib/base/json_table.h): the manifest's "credentials" section.
const json::Table<CredentialCeiling>& CeilingTable() {
  using C = CredentialCeiling;
  static const json::Table<C> t = {
      json::Member("uids", &C::uids, json::kRequired),
      json::Member("gids", &C::gids, json::kRequired),
      json::Member("groups", &C::groups, json::kRequired),
      json::Member("cap_inh", &C::caps, &CapSets::inh, json::kRequired),
      json::Member("cap_prm", &C::caps, &CapSets::prm, json::kRequired),
      json::Member("cap_eff", &C::caps, &CapSets::eff, json::kRequired),
      json::Member("cap_bnd", &C::caps, &CapSets::bnd, json::kRequired),
      json::Member("cap_amb", &C::caps, &CapSets::amb, json::kRequired),
      json::Member("no_new_privs", &C::no_new_privs, json::kRequired),
      json::Member("seccomp_mode", &C::seccomp_mode, json::kRequired),
      json::Member("lsm", &C::lsm, json::kRequired),
      // Absent in manifests written before cryo kept the limits.
      json::Member("rlimit_max", &C::rlimit_max, false, json::Emit::kUnlessEmpty),
  };
  return t;
}

}  // namespace

nlohmann::json CeilingToJson(const CredentialCeiling& c) { return json::Write(c, CeilingTable()); }

absl::StatusOr<CredentialCeiling> CeilingFromJson(const nlohmann::json& j) {
  if (!j.is_object()) return absl::InvalidArgumentError("credentials: not an object");
  CredentialCeiling c;
  CRYO_RETURN_IF_ERROR(json::Read(json::Fields(j, "credentials"), CeilingTable(), c));
  // Bounds of what is read back (a crafted record is refused, never taken as a huge ceiling).
  auto bad = [](absl::string_view f) {
    return absl::InvalidArgumentError(absl::StrCat("credentials: field ", f, " out of range"));
  };
  if (c.uids.size() > 65536) return bad("uids");
  if (c.gids.size() > 65536) return bad("gids");
  if (c.groups.size() > 65536) return bad("groups");
  if (c.seccomp_mode < 0 || c.seccomp_mode > kSeccompFilter) return bad("seccomp_mode");
  if (c.lsm.size() > 4096) return bad("lsm");
  if (c.rlimit_max.size() > 64) return bad("rlimit_max");
  return c;
}

absl::Status WriteImageCredentials(const std::string& images_dir,
                                   const std::vector<TaskCredentials>& threads,
                                   const ImageLayout& layout) {
  ::criu::inventory_entry ie;
  ie.set_img_version(kImagesV1_1);
  CRYO_RETURN_IF_ERROR(fs::WriteFileAtomic(fs::Join(images_dir, "inventory.img"),
                                           FrameImage({kInventoryMagic}, {&ie})));
  ::criu::seccomp_entry se;
  for (const auto& t : threads) {
    ::criu::core_entry core;
    core.set_mtype(1);
    core.mutable_tc()->set_task_state(1);
    auto* tc = core.mutable_thread_core();
    auto* ce = tc->mutable_creds();
    ce->set_uid(t.uid);
    ce->set_euid(t.euid);
    ce->set_suid(t.suid);
    ce->set_fsuid(t.fsuid);
    ce->set_gid(t.gid);
    ce->set_egid(t.egid);
    ce->set_sgid(t.sgid);
    ce->set_fsgid(t.fsgid);
    for (uint32_t g : t.groups) ce->add_groups(g);
    SetCapWords(t.caps.inh, ce->mutable_cap_inh());
    SetCapWords(t.caps.prm, ce->mutable_cap_prm());
    SetCapWords(t.caps.eff, ce->mutable_cap_eff());
    SetCapWords(t.caps.bnd, ce->mutable_cap_bnd());
    SetCapWords(t.caps.amb, ce->mutable_cap_amb());
    ce->set_secbits(0);
    ce->set_no_new_privs(t.no_new_privs ? 1 : 0);
    if (!t.lsm.empty()) ce->set_lsm_profile(t.lsm);
    tc->set_seccomp_mode(static_cast<uint32_t>(t.seccomp_mode));
    if (!t.seccomp_filters.empty()) {
      // As CRIU lays them out: newest first, each older one pointing at the newer before it;
      // the thread names its oldest.
      const int base = se.seccomp_filters_size();
      const int n = static_cast<int>(t.seccomp_filters.size());
      for (int k = n - 1; k >= 0; --k) {
        auto* f = se.add_seccomp_filters();
        f->set_filter(t.seccomp_filters[static_cast<size_t>(k)]);
        if (layout.tsync.count(t.tid)) f->set_flags(kSeccompFilterFlagTsync);
        if (k != n - 1) f->set_prev(static_cast<uint32_t>(se.seccomp_filters_size() - 2));
      }
      tc->set_seccomp_filter(static_cast<uint32_t>(base + n - 1));
    }
    CRYO_RETURN_IF_ERROR(
        fs::WriteFileAtomic(fs::Join(images_dir, absl::StrCat("core-", t.tid, ".img")),
                            FrameImage({kImgCommonMagic, kCoreMagic}, {&core})));
  }
  if (se.seccomp_filters_size() > 0) {
    CRYO_RETURN_IF_ERROR(fs::WriteFileAtomic(fs::Join(images_dir, "seccomp.img"),
                                             FrameImage({kImgCommonMagic, kSeccompMagic}, {&se})));
  }
  if (!layout.processes.empty()) {
    std::vector<::criu::pstree_entry> tree(layout.processes.size());
    std::vector<const google::protobuf::MessageLite*> entries;
    for (size_t k = 0; k < tree.size(); ++k) {
      const auto& [pid, tids] = layout.processes[k];
      tree[k].set_pid(static_cast<uint32_t>(pid));
      tree[k].set_ppid(0);
      tree[k].set_pgid(static_cast<uint32_t>(pid));
      tree[k].set_sid(static_cast<uint32_t>(pid));
      for (pid_t t : tids) tree[k].add_threads(static_cast<uint32_t>(t));
      entries.push_back(&tree[k]);
    }
    CRYO_RETURN_IF_ERROR(fs::WriteFileAtomic(fs::Join(images_dir, "pstree.img"),
                                             FrameImage({kImgCommonMagic, kPstreeMagic}, entries)));
  }
  return absl::OkStatus();
}

absl::Status CheckNoNamespaceImages(const std::string& images_dir, bool user_only) {
  for (const auto& name : fs::ListNames(images_dir)) {
    for (const char* prefix : kNamespaceImages) {
      if (user_only && absl::string_view(prefix) != "userns-") continue;
      if (absl::StartsWith(name, prefix)) {
        return absl::PermissionDeniedError(absl::StrCat(
            "image ", name,
            user_only ? " asks CRIU to create a user namespace, in which the images' ids "
                        "and capabilities are not what cryo checks: refused"
                      : " asks CRIU to create namespaces and mounts of its own, which a "
                        "container checkpoint never has: refused"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cryo::criu
