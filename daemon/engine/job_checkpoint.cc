// A job checkpoint (issue 37): every member of a job checkpointed at one cut, then one record
// committed in the shared store. Each member's part runs the ordinary checkpoint transaction on
// a thread of its own, with the `job_cut` step between its dump and anything that lets its job
// run on or makes its part visible (job_cut.h). The record is written last, by an atomic rename
// (store.h): nothing coordinates the job checkpoint that could lose it once committed, and a
// crash of this cryod before the commit leaves parts that never restore and are collected.

#include <atomic>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "daemon/criu/listen_ports.h"
#include "daemon/criu/network_lock.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_cut.h"
#include "daemon/store/signature.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "lib/contract/job.h"

namespace cryo::engine {

absl::StatusOr<JobCheckpointResult> Engine::CheckpointJob(const JobCheckpointRequest& req,
                                                          Operation& op) {
  if (!contract::IsKubernetesName(req.namespace_) || !contract::IsKubernetesName(req.job)) {
    return absl::InvalidArgumentError(
        "a job checkpoint needs the job's namespace and name (Kubernetes names)");
  }
  const int n = static_cast<int>(req.members.size());
  if (n < 1 || n > contract::kMaxJobMembers) {
    return absl::InvalidArgumentError(
        absl::StrCat("a job checkpoint has 1 to ", contract::kMaxJobMembers, " members, not ", n));
  }
  const std::string id = req.id.empty() ? MakeCheckpointId(req.job, absl::Now()) : req.id;
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(id));
  const std::string what =
      absl::StrCat("job checkpoint '", id, "' of ", req.namespace_, "/", req.job);
  std::set<std::string> names;
  for (const auto& m : req.members) {
    if (!contract::IsKubernetesName(m.member) || !names.insert(m.member).second) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": member '", m.member.substr(0, 64),
                                                     "' is not a Kubernetes name, or twice"));
    }
    CRYO_RETURN_IF_ERROR(Annotate(ValidateCheckpointId(absl::StrCat(id, ".", m.member)),
                                  absl::StrCat(what, ": member ", m.member, "'s part")));
  }
  if (auto had = d_.store->GetJobCheckpoint(req.namespace_, req.job, id); had.ok()) {
    return absl::AlreadyExistsError(absl::StrCat(what, " already exists"));
  }

  auto cut = std::make_shared<JobCut>(n);
  std::vector<absl::StatusOr<CheckpointResult>> results(n, absl::UnknownError("not run"));
  std::vector<std::unique_ptr<Operation>> ops;
  for (const auto& m : req.members) {
    ops.push_back(std::make_unique<Operation>(absl::StrCat(op.id(), ".", m.member), "checkpoint",
                                              absl::StrCat("job member ", m.member)));
  }
  op.Report(Stage::kDump, 0, 0, absl::StrCat(n, " members, to one cut"));
  {
    std::vector<std::thread> threads;
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        const auto& m = req.members[i];
        CheckpointRequest r = m.req;
        r.checkpoint_id = absl::StrCat(id, ".", m.member);
        r.job_part = store::JobPart{req.namespace_, req.job, id, m.member};
        r.job_cut = cut;
        r.job_cut_timeout = req.cut_timeout;
        r.deadline = std::min(r.deadline, req.deadline);
        // The job checkpoint's cancellation is each member's.
        std::atomic<bool> done{false};
        std::thread relay([&] {
          while (!done.load()) {
            if (op.cancelled()) {
              ops[i]->Cancel("the job checkpoint was cancelled");
              return;
            }
            absl::SleepFor(absl::Milliseconds(50));
          }
        });
        results[i] = Checkpoint(r, *ops[i]);
        done = true;
        relay.join();
        if (!results[i].ok()) cut->Fail(m.member, results[i].status());
      });
    }
    for (auto& t : threads) t.join();
  }
  // The members whose failures ended it, rather than those they aborted at the cut (unless
  // that is all there is).
  std::string why;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (int pass = 0; pass < 2 && why.empty(); ++pass) {
    for (int i = 0; i < n; ++i) {
      if (results[i].ok() || (pass == 0 && absl::IsAborted(results[i].status()))) continue;
      if (code == absl::StatusCode::kOk) code = results[i].status().code();
      absl::StrAppend(&why, why.empty() ? "" : "; ", "member ", req.members[i].member, ": ",
                      results[i].status().message());
    }
  }
  if (!why.empty()) {
    return absl::Status(code, absl::StrCat(what, " not taken: ", why,
                                           "; no member's part was committed, and every member "
                                           "that was to run on runs on"));
  }

  JobCheckpointResult out;
  store::JobCheckpoint& jc = out.record;
  jc.id = id;
  jc.namespace_ = req.namespace_;
  jc.job = req.job;
  jc.created_at = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  for (int i = 0; i < n; ++i) {
    // The digest of the manifest as the store holds it, which is what a restore reads.
    auto m = d_.store->Get(results[i]->manifest.id);
    if (!m.ok()) {
      return Annotate(m.status(), absl::StrCat(what, " not committed: member ",
                                               req.members[i].member, "'s part"));
    }
    jc.members.push_back({req.members[i].member, m->id, cfg_.node_name, store::ManifestDigest(*m)});
    out.parts.push_back(*std::move(results[i]));
  }
  jc.cut_ms["cut_skew"] = absl::ToInt64Milliseconds(cut->Skew());
  jc.signature = store::SignJobCheckpoint(jc, signing_key_);
  op.Report(Stage::kPublish, 0, 0, "the job checkpoint's record");
  if (absl::Status s = d_.store->CommitJobCheckpoint(jc); !s.ok()) {
    return Annotate(s, absl::StrCat(what, " not committed (its parts are collected later)"));
  }
  CRYO_LOG(Info) << what << " committed: " << n << " members, cut skew " << jc.cut_ms["cut_skew"]
                 << " ms";
  return out;
}

absl::StatusOr<JobRestoreResult> Engine::RestoreJob(const JobRestoreRequest& req, Operation& op) {
  CRYO_ASSIGN_OR_RETURN(store::JobCheckpoint jc,
                        d_.store->GetJobCheckpoint(req.namespace_, req.job, req.id));
  CRYO_RETURN_IF_ERROR(store::VerifyJobCheckpointSignature(jc, signing_key_));
  const std::string what =
      absl::StrCat("job checkpoint '", jc.id, "' of ", jc.namespace_, "/", jc.job);
  // Every part is here and is the one committed, before anything starts.
  std::vector<criu::Connection> conns;
  for (const auto& m : jc.members) {
    auto part = d_.store->Get(m.checkpoint_id);
    if (!part.ok()) {
      return Annotate(part.status(), absl::StrCat(what, ": member ", m.member, "'s part"));
    }
    CRYO_RETURN_IF_ERROR(
        Annotate(store::CommittedJobCheckpointOf(*d_.store, *part).status(), what));
    if (part->kind != store::CheckpointKind::kProcess) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": member ", m.member,
                       " is a container; its replacement pod's cryo-init restores it, not a node"));
    }
    CRYO_ASSIGN_OR_RETURN(std::string dir, d_.store->LocalPath(m.checkpoint_id));
    CRYO_ASSIGN_OR_RETURN(auto mine, criu::ReadImageConnections(fs::Join(dir, store::kImagesDir)));
    conns.insert(conns.end(), mine.begin(), mine.end());
  }
  std::unique_ptr<criu::ConnectionLock> lock;
  if (!conns.empty()) {
    CRYO_ASSIGN_OR_RETURN(lock, criu::ConnectionLock::Take(jc.id, conns, 0, cfg_.nsexec_path));
  }
  JobRestoreResult out;
  for (size_t i = 0; i < jc.members.size(); ++i) {
    const auto& m = jc.members[i];
    op.Report(Stage::kRestore, i, jc.members.size(), absl::StrCat("member ", m.member));
    RestoreRequest r;
    r.checkpoint_id = m.checkpoint_id;
    r.pid_wait_timeout = req.pid_wait_timeout;
    r.deadline = req.deadline;
    r.job_lock_held = lock != nullptr;
    Operation sub(absl::StrCat(op.id(), ".", m.member), "restore", m.checkpoint_id);
    auto res = Restore(r, sub);
    if (!res.ok()) {
      // All or nothing: the members restored so far would only wait for this one forever.
      for (const auto& [name, done] : out.members) {
        auto tree = d_.proc->Tree(done.root_pid);
        if (tree.ok()) jobs_.Kill(jobs_.TasksOf(*tree));
      }
      return Annotate(res.status(), absl::StrCat(what, " not restored: member ", m.member,
                                                 " (the members restored before it were ended)"));
    }
    out.members[m.member] = *std::move(res);
  }
  if (lock) CRYO_RETURN_IF_ERROR(lock->Release());
  CRYO_LOG(Info) << what << " restored: " << jc.members.size() << " members";
  return out;
}

}  // namespace cryo::engine
