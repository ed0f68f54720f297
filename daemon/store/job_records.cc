// The store's job checkpoint records and the replacements' arrivals (store/job_records.h).

#include "daemon/store/job_records.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/io_all.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/contract/job.h"

namespace cryo::store {
namespace {

// The names a record's file is made of: a job's, and (unless listing) a job checkpoint's id.
absl::Status CheckJobNames(const std::string& ns, const std::string& job,
                           const std::string* id = nullptr) {
  if (!contract::IsKubernetesName(ns) || !contract::IsKubernetesName(job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job '", ns.substr(0, 64), "/", job.substr(0, 64), "': not Kubernetes names"));
  }
  return id == nullptr ? absl::OkStatus() : ValidateCheckpointId(*id);
}

}  // namespace

std::string JobRecords::jobs() const { return fs::Join(h_.root, kJobsDir); }

absl::Status JobRecords::Commit(const JobCheckpoint& jc) {
  CRYO_RETURN_IF_ERROR(CheckJobNames(jc.namespace_, jc.job, &jc.id));
  if (jc.members.empty()) {
    return absl::InvalidArgumentError("a job checkpoint of no members is none");
  }
  CRYO_RETURN_IF_ERROR(h_.ready());
  const std::string what =
      absl::StrCat("job checkpoint '", jc.id, "' of ", jc.namespace_, "/", jc.job);
  // Every part is in the store as the record names it, before the record exists.
  for (const auto& mb : jc.members) {
    auto m = h_.part(mb.checkpoint_id);
    if (!m.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": member ", mb.member, "'s part '", mb.checkpoint_id,
                       "' is not in the store: ", m.status().message()));
    }
    if (!m->job || m->job->namespace_ != jc.namespace_ || m->job->job != jc.job ||
        m->job->job_checkpoint != jc.id || m->job->member != mb.member) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": checkpoint '", mb.checkpoint_id, "' is not member ", mb.member,
                       "'s part of it (its manifest's job section says otherwise)"));
    }
    if (ManifestDigest(*m) != mb.manifest_digest) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": member ", mb.member, "'s part '", mb.checkpoint_id,
                       "' is not the one the record names (manifest digest differs)"));
    }
  }
  // The commit: the record appears whole or not at all, and never over another.
  absl::Status st = WriteWhole(JobCheckpointFileName(jc.namespace_, jc.job, jc.id),
                               JobCheckpointToJson(jc), /*commit=*/true);
  if (absl::IsAlreadyExists(st))
    return absl::AlreadyExistsError(absl::StrCat(what, " already exists"));
  return Annotate(st, what);
}

absl::Status JobRecords::WriteWhole(const std::string& name, const std::string& text, bool commit) {
  CRYO_ASSIGN_OR_RETURN(UniqueFd dir, h_.open(kJobsDir));
  const std::string temp = absl::StrCat(kJobTempPrefix, h_.node, "+", RandomHex(6));
  const bool sync = commit && h_.fsync;
  {
    UniqueFd f(::openat(dir.get(), temp.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (f.get() < 0) return ErrnoStatus(errno, fs::Join(jobs(), temp));
    std::string err;
    absl::Status w = absl::OkStatus();
    if (!io::WriteAll(f.get(), {{const_cast<char*>(text.data()), text.size()}}, 0, &err)) {
      w = absl::UnavailableError(absl::StrCat(fs::Join(jobs(), temp), ": ", err));
    } else if (sync && ::fsync(f.get()) != 0) {
      w = ErrnoStatus(errno, absl::StrCat("fsync ", fs::Join(jobs(), temp)));
    }
    if (!w.ok()) {
      ::unlinkat(dir.get(), temp.c_str(), 0);
      return w;
    }
  }
  if (::renameat2(dir.get(), temp.c_str(), dir.get(), name.c_str(),
                  commit ? RENAME_NOREPLACE : 0) != 0) {
    const int e = errno;
    ::unlinkat(dir.get(), temp.c_str(), 0);
    if (e == EEXIST) return absl::AlreadyExistsError(fs::Join(jobs(), name));
    return ErrnoStatus(e, fs::Join(jobs(), name));
  }
  if (sync && ::fsync(dir.get()) != 0 && errno != EINVAL) {
    return ErrnoStatus(errno, absl::StrCat("fsync ", jobs()));
  }
  return absl::OkStatus();
}

absl::StatusOr<JobCheckpoint> JobRecords::Get(const std::string& ns, const std::string& job,
                                              const std::string& id) {
  CRYO_RETURN_IF_ERROR(CheckJobNames(ns, job, &id));
  CRYO_RETURN_IF_ERROR(h_.ready());
  return ReadJobCheckpoint(JobCheckpointFileName(ns, job, id), ns, job, id);
}

absl::StatusOr<std::vector<JobCheckpoint>> JobRecords::List(const std::string& ns,
                                                            const std::string& job) {
  CRYO_RETURN_IF_ERROR(CheckJobNames(ns, job));
  CRYO_RETURN_IF_ERROR(h_.ready());
  CRYO_ASSIGN_OR_RETURN(UniqueFd dir, h_.open(kJobsDir));
  CRYO_ASSIGN_OR_RETURN(auto entries, fs::ListDirAt(dir.get(), jobs()));
  const std::string prefix = absl::StrCat(ns, "+", job, "+");
  std::vector<JobCheckpoint> out;
  for (const auto& e : entries) {
    if (!absl::StartsWith(e.name, prefix) || !absl::EndsWith(e.name, ".json")) continue;
    const std::string id =
        e.name.substr(prefix.size(), e.name.size() - prefix.size() - strlen(".json"));
    if (!ValidateCheckpointId(id).ok()) continue;
    auto jc = ReadJobCheckpoint(e.name, ns, job, id);
    if (jc.ok()) {
      out.push_back(*std::move(jc));
    } else if (!absl::IsNotFound(jc.status())) {
      CRYO_LOG(Warning) << "skipping job checkpoint record " << e.name << ": " << jc.status();
    }
  }
  std::sort(out.begin(), out.end(), [](const JobCheckpoint& a, const JobCheckpoint& b) {
    if (a.created_at != b.created_at) return a.created_at > b.created_at;
    return a.id > b.id;
  });
  return out;
}

absl::Status JobRecords::Delete(const std::string& ns, const std::string& job,
                                const std::string& id) {
  CRYO_ASSIGN_OR_RETURN(JobCheckpoint jc, Get(ns, job, id));
  CRYO_ASSIGN_OR_RETURN(UniqueFd dir, h_.open(kJobsDir));
  CRYO_ASSIGN_OR_RETURN(UniqueFd trash, h_.open(kTrashDir));
  const std::string name = JobCheckpointFileName(ns, job, id);
  const std::string gone = absl::StrCat(name, "+", RandomHex(6));
  if (::renameat2(dir.get(), name.c_str(), trash.get(), gone.c_str(), RENAME_NOREPLACE) != 0) {
    return ErrnoStatus(errno, absl::StrCat("move ", fs::Join(jobs(), name), " to the trash"));
  }
  (void)::unlinkat(trash.get(), gone.c_str(), 0);
  for (const auto& m : jc.members) {
    absl::Status s = h_.delete_part(m.checkpoint_id);
    if (!s.ok() && !absl::IsNotFound(s)) return s;
  }
  return absl::OkStatus();
}

absl::Status JobRecords::MarkArrival(const std::string& ns, const std::string& job,
                                     const JobArrival& a) {
  CRYO_RETURN_IF_ERROR(CheckJobNames(ns, job, &a.job_checkpoint));
  if (!contract::IsKubernetesName(a.member)) {
    return absl::InvalidArgumentError("a job arrival's member is not a Kubernetes name");
  }
  CRYO_RETURN_IF_ERROR(h_.ready());
  // Whole or not at all; a later arrival of the same member replaces it.
  return WriteWhole(JobArrivalFileName(ns, job, a.member), JobArrivalToJson(a), /*commit=*/false);
}

absl::Status JobRecords::RemoveArrival(const std::string& ns, const std::string& job,
                                       const std::string& member) {
  CRYO_RETURN_IF_ERROR(CheckJobNames(ns, job));
  if (!contract::IsKubernetesName(member)) {
    return absl::InvalidArgumentError("a job arrival's member is not a Kubernetes name");
  }
  CRYO_RETURN_IF_ERROR(h_.ready());
  CRYO_ASSIGN_OR_RETURN(UniqueFd dir, h_.open(kJobsDir));
  const std::string name = JobArrivalFileName(ns, job, member);
  if (::unlinkat(dir.get(), name.c_str(), 0) != 0 && errno != ENOENT) {
    return ErrnoStatus(errno, fs::Join(jobs(), name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<JobArrival>> JobRecords::Arrivals(const std::string& ns,
                                                             const std::string& job) {
  CRYO_RETURN_IF_ERROR(CheckJobNames(ns, job));
  CRYO_RETURN_IF_ERROR(h_.ready());
  CRYO_ASSIGN_OR_RETURN(UniqueFd dir, h_.open(kJobsDir));
  CRYO_ASSIGN_OR_RETURN(auto entries, fs::ListDirAt(dir.get(), jobs()));
  const std::string prefix = absl::StrCat(ns, "+", job, kJobArrivalInfix);
  std::vector<JobArrival> out;
  for (const auto& e : entries) {
    if (!absl::StartsWith(e.name, prefix)) continue;
    auto text = fs::ReadRegularBeneath(h_.root, fs::Join(kJobsDir, e.name), 4096);
    if (!text.ok()) continue;  // replaced or collected meanwhile
    auto a = ParseJobArrival(*text);
    if (!a.ok() || a->member != e.name.substr(prefix.size())) {
      CRYO_LOG(Warning) << "skipping job arrival " << e.name << ": not one";
      continue;
    }
    out.push_back(*std::move(a));
  }
  return out;
}

// Read below the store's root, following no link; a record for another job or id than its
// name says is refused.
absl::StatusOr<JobCheckpoint> JobRecords::ReadJobCheckpoint(const std::string& name,
                                                            const std::string& ns,
                                                            const std::string& job,
                                                            const std::string& id) {
  const std::string what = absl::StrCat("job checkpoint '", id, "' of ", ns, "/", job);
  auto text = fs::ReadRegularBeneath(h_.root, fs::Join(kJobsDir, name), kMaxJobCheckpointBytes);
  if (!text.ok()) {
    if (absl::IsNotFound(text.status())) {
      return absl::NotFoundError(absl::StrCat("no ", what, " in ", h_.root));
    }
    return Annotate(text.status(), what);
  }
  auto jc = ParseJobCheckpoint(*text);
  if (!jc.ok()) return Annotate(jc.status(), what);
  if (jc->namespace_ != ns || jc->job != job || jc->id != id) {
    return absl::DataLossError(absl::StrCat("record ", name, " holds job checkpoint '", jc->id,
                                            "' of ", jc->namespace_, "/", jc->job));
  }
  return jc;
}

}  // namespace cryo::store
