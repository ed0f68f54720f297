#pragma once

// What a restored task may run as. CRIU writes every thread's credentials into its images
// (uids, gids, groups, the five capability sets, no_new_privs, seccomp filters, LSM label) and
// applies them as written, with the privileges of the CRIU that restores: an image alone would
// decide them. cryod therefore reads them from the images before a restore and refuses any that
// exceed a ceiling it trusts: in container mode the new container's (its cryo-init, which the
// runtime set up from the OCI spec), in process mode the job's own, recorded when it was
// checkpointed and signed (store/signature.h). See docs/security.md, "Credentials".

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "lib/base/proc.h"
#include "nlohmann/json.hpp"

namespace cryo::criu {

// The five capability sets, one bit per capability (as /proc/<pid>/status shows them).
struct CapSets {
  uint64_t inh = 0, prm = 0, eff = 0, bnd = 0, amb = 0;
  friend bool operator==(const CapSets&, const CapSets&) = default;
};

enum SeccompMode : int { kSeccompDisabled = 0, kSeccompStrict = 1, kSeccompFilter = 2 };

// One thread's credentials, read from a CRIU image or from /proc.
struct TaskCredentials {
  pid_t tid = 0;  // as the image or /proc names it
  uint32_t uid = 0, euid = 0, suid = 0, fsuid = 0;
  uint32_t gid = 0, egid = 0, sgid = 0, fsgid = 0;
  std::vector<uint32_t> groups;
  CapSets caps;
  bool no_new_privs = false;
  int seccomp_mode = kSeccompDisabled;
  // Its seccomp filters, oldest (first installed) first, each the raw BPF program.
  std::vector<std::string> seccomp_filters;
  // The LSM label (AppArmor profile or SELinux context) without AppArmor's " (mode)" suffix;
  // empty when the node has no LSM.
  std::string lsm;
  std::string lsm_sockcreate;
  bool apparmor_data = false;  // the image carries AppArmor policy for CRIU to load
};

// The most a restored job may have. Each field is a bound for every restored thread.
struct CredentialCeiling {
  std::set<uint32_t> uids;              // real, effective, saved and fs uid each one of these
  std::set<uint32_t> gids;              // likewise gids
  std::set<uint32_t> groups;            // supplementary groups
  CapSets caps;                         // each set a subset of this one
  bool no_new_privs = false;            // true: every thread keeps no_new_privs
  int seccomp_mode = kSeccompDisabled;  // every thread at least this strict
  // With seccomp_mode == filter, when known (container mode): every thread's chain starts
  // with these filters (oldest first), so none of the container's filters is dropped.
  std::optional<std::vector<std::string>> seccomp_filters;
  // Non-empty and not "unconfined": every thread carries exactly this label.
  std::string lsm;
  // Hard resource limits, in RLIMIT_* order (RLIM_INFINITY: none): no restored process may have
  // a higher one (resources.h). Empty: not known (a manifest recorded before cryo kept them).
  std::vector<uint64_t> rlimit_max;

  friend bool operator==(const CredentialCeiling&, const CredentialCeiling&) = default;
};

// The ceiling a set of live (or recorded) threads defines: the union of what they hold, the
// least strict seccomp mode among them, no_new_privs only if all have it, and the LSM label
// they share ("unconfined", binding nothing, when they differ).
CredentialCeiling CeilingOf(const std::vector<TaskCredentials>& tasks);

// The credentials of thread `tid` of process `pid` from /proc (tid 0: the process itself).
// Seccomp filters are not read (ReadSeccompFilters does, with ptrace).
absl::StatusOr<TaskCredentials> ReadLiveCredentials(const proc::ProcReader& proc, pid_t pid,
                                                    pid_t tid = 0);
// Parses the text of /proc/<pid>/status into `c` (tests feed it by hand).
absl::Status ParseProcStatus(absl::string_view status, TaskCredentials* c);

// The seccomp filters of process `pid` (oldest first), read with PTRACE_SECCOMP_GET_FILTER: the
// process is seized and interrupted for the moment it takes, then let go. Needs
// CAP_SYS_ADMIN. Empty when it has none.
absl::StatusOr<std::vector<std::string>> ReadSeccompFilters(pid_t pid);

// Every thread's credentials as the CRIU images in `images_dir` will restore them: one entry
// per core-<tid>.img. A thread recorded without seccomp whose main thread's chain is flagged
// TSYNC (CRIU's record of a chain all threads share) has that chain, as the restore gives it.
// INVALID_ARGUMENT for an image that cannot be read as CRIU's (or is too large); PERMISSION_DENIED
// for images that would restore a thread with CRIU's own credentials (a live thread without
// credentials, a legacy creds-<pid>.img) or load AppArmor policy.
absl::StatusOr<std::vector<TaskCredentials>> ReadImageCredentials(const std::string& images_dir);

// OK when every thread stays within the ceiling; PERMISSION_DENIED otherwise, naming the
// thread, the field and both values ("thread 42: cap_eff has CAP_SYS_ADMIN, which ...").
absl::Status CheckCredentials(const std::vector<TaskCredentials>& threads,
                              const CredentialCeiling& ceiling, absl::string_view ceiling_name);

// Container mode: PERMISSION_DENIED when the images ask CRIU to create namespaces (and with
// them mounts) of its own, which a container checkpoint, dumped inside the container's
// namespaces, never does. `user_only` (process mode, where a job may have namespaces of its
// own): only a user namespace, in which the images' ids and capabilities would mean another
// thing than the check reads (cryod refuses to checkpoint such jobs).
absl::Status CheckNoNamespaceImages(const std::string& images_dir, bool user_only = false);

// The ceiling as recorded in a manifest, and back (INVALID_ARGUMENT for a malformed one).
nlohmann::json CeilingToJson(const CredentialCeiling& c);
absl::StatusOr<CredentialCeiling> CeilingFromJson(const nlohmann::json& j);

// How the threads form processes, for images that say it (pstree.img).
struct ImageLayout {
  // Each process's main thread (its pid) and its threads, the main one among them.
  std::vector<std::pair<pid_t, std::vector<pid_t>>> processes;
  // Threads whose filters are flagged TSYNC, as CRIU flags a main thread whose chain every
  // thread of its process shares (its other threads then recorded without seccomp).
  std::set<pid_t> tsync;
};

// Writes the images CRIU would have written for these threads (core-<tid>.img each, seccomp.img
// when a thread has filters, inventory.img, pstree.img when the layout names processes): the
// tests' fake CRIU, and crafted images in tests.
absl::Status WriteImageCredentials(const std::string& images_dir,
                                   const std::vector<TaskCredentials>& threads,
                                   const ImageLayout& layout = {});

}  // namespace cryo::criu
