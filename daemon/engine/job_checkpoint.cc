// A job checkpoint (issue 37): every member of a job checkpointed at one cut, then one record
// committed in the shared store. Each member's part runs the ordinary checkpoint transaction on
// a thread of its own, with the `job_cut` step between its dump and anything that lets its job
// run on or makes its part visible (job_cut.h). The record is written last, by an atomic rename
// (store.h): nothing coordinates the job checkpoint that could lose it once committed, and a
// crash of this cryod before the commit leaves parts that never restore and are collected.

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/container/runtime.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_cut.h"
#include "daemon/engine/job_peers.h"
#include "daemon/engine/states.h"
#include "daemon/store/signature.h"
#include "lib/base/fs.h"
#include "lib/base/human.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/job.h"
#include "lib/contract/labels.h"

namespace cryo::engine {

namespace {

// The job checkpoint's bounds and names, before anything runs.
absl::StatusOr<std::string> ValidateJobRequest(const JobCheckpointRequest& req) {
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
  return id;
}

// Why a job checkpoint was not taken: the members whose failures ended it, rather than those
// they aborted at the cut (unless that is all there is); OK when every member succeeded.
absl::Status JobFailure(const std::string& what, const std::vector<std::string>& names,
                        const std::vector<absl::Status>& results) {
  std::string why;
  absl::StatusCode code = absl::StatusCode::kOk;
  for (int pass = 0; pass < 2 && why.empty(); ++pass) {
    for (size_t i = 0; i < results.size(); ++i) {
      if (results[i].ok() || (pass == 0 && absl::IsAborted(results[i]))) continue;
      if (code == absl::StatusCode::kOk) code = results[i].code();
      absl::StrAppend(&why, why.empty() ? "" : "; ", names[i], ": ", results[i].message());
    }
  }
  if (why.empty()) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(what, " not taken: ", why,
                                         "; no member's part was committed, and every member "
                                         "that was to run on runs on"));
}

}  // namespace

std::vector<absl::StatusOr<CheckpointResult>> Engine::RunJobMembers(
    const JobCheckpointRequest& req, const std::vector<int>& which,
    const std::shared_ptr<JobCut>& cut, Operation& op) {
  const size_t n = which.size();
  std::vector<absl::StatusOr<CheckpointResult>> results(n, absl::UnknownError("not run"));
  std::vector<std::unique_ptr<Operation>> subs;
  for (int i : which) {
    const std::string& member = req.members[i].member;
    subs.push_back(std::make_unique<Operation>(absl::StrCat(op.id(), ".", member), "checkpoint",
                                               absl::StrCat("job member ", member)));
  }
  // The job checkpoint's cancellation is each member's.
  std::atomic<bool> done{false};
  std::thread relay([&] {
    while (!done.load()) {
      if (op.cancelled()) {
        for (auto& sub : subs) sub->Cancel("the job checkpoint was cancelled");
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  });
  std::vector<std::thread> threads;
  for (size_t k = 0; k < n; ++k) {
    threads.emplace_back([&, k] {
      const auto& m = req.members[which[k]];
      CheckpointRequest r = m.req;
      r.checkpoint_id = absl::StrCat(req.id, ".", m.member);
      r.job_part = store::JobPart{req.namespace_, req.job, req.id, m.member, {}, {}};
      r.job_cut = cut;
      r.job_cut_timeout = req.cut_timeout;
      r.deadline = std::min(r.deadline, req.deadline);
      results[k] = Checkpoint(r, *subs[k]);
      if (!results[k].ok()) cut->Fail(m.member, results[k].status());
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  relay.join();
  return results;
}

absl::StatusOr<JobCheckpointResult> Engine::CheckpointJob(const JobCheckpointRequest& request,
                                                          Operation& op) {
  JobCheckpointRequest req = request;
  if (req.members.empty()) {
    CRYO_ASSIGN_OR_RETURN(req.members, FindJobMembers(req));
    for (auto& m : req.members) {
      const std::string container = m.req.container_id;
      m.req = req.member_defaults;
      m.req.container_id = container;
      m.req.pid = 0;
      // One archive per call: the part of the container it was asked for.
      if (container != req.export_container) m.req.export_archive.clear();
    }
  }
  CRYO_ASSIGN_OR_RETURN(const std::string id, ValidateJobRequest(req));
  req.id = id;
  const std::string what =
      absl::StrCat("job checkpoint '", id, "' of ", req.namespace_, "/", req.job);
  if (auto had = d_.store->GetJobCheckpoint(req.namespace_, req.job, id); had.ok()) {
    return absl::AlreadyExistsError(absl::StrCat(what, " already exists"));
  }
  if (req.plan) {
    if (auto fallback = PlanJob(req)) return *std::move(fallback);
  }
  // This node's members, and the others' by node.
  std::vector<int> local;
  std::map<std::string, std::vector<int>> remote;
  for (int i = 0; i < static_cast<int>(req.members.size()); ++i) {
    const std::string& node = req.members[i].node;
    if (node.empty() || node == cfg_.node_name) {
      local.push_back(i);
    } else {
      remote[node].push_back(i);
    }
  }
  if (!remote.empty() && d_.peers == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        what, ": member ", req.members[remote.begin()->second[0]].member, " runs on node ",
        remote.begin()->first,
        ", and this cryod does not reach other nodes' cryods (peer_token_file and peers)"));
  }
  // The GPU cut's parties: this node's members and each other node (its cryod speaks for its
  // members there).
  std::vector<std::string> gpu_parties;
  for (int i : local) gpu_parties.push_back(JobGpuCut::MemberParty(req.members[i].member));
  for (const auto& [node, idx] : remote) gpu_parties.push_back(JobGpuCut::NodeParty(node));
  auto cut = std::make_shared<JobCut>(static_cast<int>(local.size() + remote.size()),
                                      std::make_shared<JobGpuCut>(gpu_parties));
  op.Report(
      Stage::kDump, 0, 0,
      absl::StrCat(req.members.size(), " members on ", remote.size() + 1, " node(s), to one cut"));
  std::map<std::string, absl::StatusOr<std::vector<CheckpointResult>>> from_peers;
  std::vector<absl::StatusOr<CheckpointResult>> mine;
  {
    absl::Mutex mu;
    std::vector<std::thread> peers;
    for (const auto& [node, idx] : remote) {
      peers.emplace_back([&, node = node, idx = idx] {
        JobCheckpointRequest sub = req;
        sub.members.clear();
        for (int i : idx) sub.members.push_back(req.members[i]);
        auto r = d_.peers->Join(node, sub, *cut);
        if (!r.ok()) cut->Fail(JobGpuCut::NodeParty(node), r.status());
        absl::MutexLock l(&mu);
        from_peers.emplace(node, std::move(r));
      });
    }
    mine = RunJobMembers(req, local, cut, op);
    for (auto& t : peers) t.join();
  }
  // Every member's part, by member, or why the job checkpoint was not taken.
  std::vector<std::string> names;
  std::vector<absl::Status> statuses;
  std::map<std::string, CheckpointResult> parts;
  for (size_t k = 0; k < local.size(); ++k) {
    names.push_back(absl::StrCat("member ", req.members[local[k]].member));
    statuses.push_back(mine[k].status());
    if (mine[k].ok()) parts.emplace(req.members[local[k]].member, *std::move(mine[k]));
  }
  for (auto& [node, r] : from_peers) {
    names.push_back(absl::StrCat("node ", node));
    statuses.push_back(r.status());
    if (!r.ok()) continue;
    for (auto& p : *r) {
      if (p.manifest.job) parts.emplace(p.manifest.job->member, std::move(p));
    }
  }
  CRYO_RETURN_IF_ERROR(JobFailure(what, names, statuses));

  op.Report(Stage::kPublish, 0, 0, "the job checkpoint's record");
  return CommitJob(req, what, std::move(parts), cut->Skew(), remote.size() + 1);
}

absl::StatusOr<JobCheckpointResult> Engine::CommitJob(const JobCheckpointRequest& req,
                                                      const std::string& what,
                                                      std::map<std::string, CheckpointResult> parts,
                                                      absl::Duration skew, size_t nodes) {
  JobCheckpointResult out;
  store::JobCheckpoint& jc = out.record;
  jc.id = req.id;
  jc.namespace_ = req.namespace_;
  jc.job = req.job;
  jc.created_at = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  for (const auto& m : req.members) {
    auto it = parts.find(m.member);
    if (it == parts.end()) {
      return absl::InternalError(
          absl::StrCat(what, " not committed: no part came back for member ", m.member));
    }
    // The digest of the manifest as the shared store holds it, which is what a restore reads
    // (a peer's answer is not taken for it).
    auto part = d_.store->Get(absl::StrCat(req.id, ".", m.member));
    if (!part.ok()) {
      return Annotate(part.status(),
                      absl::StrCat(what, " not committed: member ", m.member, "'s part"));
    }
    jc.members.push_back({m.member, part->id, m.node.empty() ? cfg_.node_name : m.node,
                          store::ManifestDigest(*part)});
    it->second.manifest = *std::move(part);
    out.parts.push_back(std::move(it->second));
  }
  jc.cut_ms["cut_skew"] = absl::ToInt64Milliseconds(skew);
  jc.signature = store::SignJobCheckpoint(jc, signing_key_);
  if (absl::Status s = d_.store->CommitJobCheckpoint(jc); !s.ok()) {
    return Annotate(s, absl::StrCat(what, " not committed (its parts are collected later)"));
  }
  CRYO_LOG(Info) << what << " committed: " << req.members.size() << " members on " << nodes
                 << " node(s), cut skew " << jc.cut_ms["cut_skew"] << " ms";
  ApplyJobRetention(req.namespace_, req.job);
  return out;
}

absl::StatusOr<std::vector<JobCheckpointRequest::Member>> Engine::FindJobMembers(
    const JobCheckpointRequest& req) {
  const std::string what = absl::StrCat("job ", req.namespace_, "/", req.job);
  std::vector<JobCheckpointRequest::Member> found;
  if (d_.jobs != nullptr) {
    // Every member, as the Kubernetes API lists the job's running pods.
    CRYO_ASSIGN_OR_RETURN(found, d_.jobs->Members(req.namespace_, req.job));
  } else {
    // Without the API: this node's members and those of the nodes in `peers`.
    auto local = LocalJobMembers(req.namespace_, req.job);
    if (!local.ok() && d_.peers == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a job checkpoint names its members, or cryod finds them: in the Kubernetes API (cryod "
          "in a pod of the chart), or on this node's runtime and its peers' (",
          local.status().message(), ")"));
    }
    if (local.ok()) found = *std::move(local);
    if (d_.peers != nullptr) {
      CRYO_ASSIGN_OR_RETURN(auto others, d_.peers->ListMembers(req.namespace_, req.job));
      for (auto& m : others) {
        if (m.node != cfg_.node_name) found.push_back(std::move(m));  // `peers` may name this one
      }
    }
  }
  std::vector<std::string> names;
  for (const auto& m : found) names.push_back(absl::StrCat(m.member, "@", m.node));
  std::sort(names.begin(), names.end());
  if (found.empty()) {
    return absl::NotFoundError(absl::StrCat(what, " has no member running"));
  }
  // A job checkpoint saves every member or none: one without a member could never resume.
  if (req.job_size > 0 && static_cast<int>(found.size()) != req.job_size) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " has ", req.job_size, " members, and ", found.size(), " run (",
                     absl::StrJoin(names, ", "), "): nothing was checkpointed"));
  }
  CRYO_LOG(Info) << what << ": members " << absl::StrJoin(names, ", ");
  return found;
}

std::optional<JobCheckpointResult> Engine::PlanJob(const JobCheckpointRequest& req) {
  const std::string what =
      absl::StrCat("job checkpoint of ", req.namespace_, "/", req.job, " at a member's stop");
  auto count = [this](const char* decision) {
    if (d_.metrics) d_.metrics->CountPlan(decision);
  };
  // The newest committed job checkpoint whose every part is in the store and not found damaged.
  std::optional<store::JobCheckpoint> newest;
  std::vector<store::Manifest> parts;
  auto all = d_.store->ListJobCheckpoints(req.namespace_, req.job);  // newest first
  for (const auto& jc : all.ok() ? *all : std::vector<store::JobCheckpoint>{}) {
    parts.clear();
    bool good = true;
    for (const auto& m : jc.members) {
      auto p = d_.store->Get(m.checkpoint_id);
      good = p.ok() && p->damaged.empty();
      if (!good) break;
      parts.push_back(*std::move(p));
    }
    if (good) {
      newest = jc;
      break;
    }
  }
  if (!newest) {
    count("no_fallback");
    CRYO_LOG(Info) << what << ": no earlier job checkpoint to resume from; taking it";
    return std::nullopt;
  }
  // The members are dumped in parallel, each on its node: the slowest part sets the time, each
  // at this node's pace for its workload (or this node's own).
  absl::Duration predicted = absl::ZeroDuration();
  for (const auto& p : parts) {
    auto t = pace_.Predict(p.workload, p.TotalBytes());
    if (!t) {
      count("no_estimate");
      CRYO_LOG(Info) << what << ": no checkpoint measured on this node yet; taking it";
      return std::nullopt;
    }
    predicted = std::max(predicted, *t);
  }
  const absl::Time now = absl::Now();
  const absl::Duration left = req.deadline - now;
  const std::string estimate =
      absl::StrCat("its slowest part would take about ",
                   absl::FormatDuration(absl::Trunc(predicted, absl::Milliseconds(100))),
                   " at this node's pace, and ",
                   absl::FormatDuration(absl::Trunc(left, absl::Milliseconds(100))), " are left");
  if (predicted <= left) {
    count("checkpoint");
    CRYO_LOG(Info) << what << ": " << estimate << "; taking it";
    return std::nullopt;
  }
  absl::Time taken = human::ParseRfc3339(newest->created_at);
  if (taken == absl::InfinitePast()) taken = now;
  const absl::Duration lost =
      std::max(absl::ZeroDuration(), absl::Trunc(now - taken, absl::Seconds(1)));
  count("fall_back");
  if (d_.metrics) d_.metrics->ObserveWorkLost(absl::ToDoubleSeconds(lost));
  JobCheckpointResult out;
  out.not_taken = absl::StrCat(
      "not checkpointed at this stop: ", estimate, "; the replacements resume from job checkpoint ",
      newest->id, ", taken ", absl::FormatDuration(lost), " before the stop (that work is lost)");
  out.record = *std::move(newest);
  CRYO_LOG(Warning) << what << ": " << out.not_taken;
  return out;
}

absl::StatusOr<bool> Engine::DrivesJob(const std::string& ns, const std::string& job, int size) {
  JobCheckpointRequest req;
  req.namespace_ = ns;
  req.job = job;
  req.job_size = size;
  CRYO_ASSIGN_OR_RETURN(auto members, FindJobMembers(req));
  const auto first =
      std::min_element(members.begin(), members.end(),
                       [](const JobCheckpointRequest::Member& a,
                          const JobCheckpointRequest::Member& b) { return a.member < b.member; });
  return first->node == cfg_.node_name;
}

void Engine::ApplyJobRetention(const std::string& ns, const std::string& job) {
  if (cfg_.retention_keep <= 0) return;
  auto all = d_.store->ListJobCheckpoints(ns, job);  // newest first
  if (!all.ok()) {
    CRYO_LOG(Warning) << "retention of job " << ns << "/" << job << ": " << all.status();
    return;
  }
  const size_t keep = static_cast<size_t>(cfg_.retention_keep);
  if (all->size() <= keep) return;
  // What the kept ones need: their parts and, however many steps away, what those refer to
  // (an incremental part's GPU data lies partly in an earlier one's files).
  std::set<std::string> needed;
  std::vector<std::string> todo;
  for (size_t i = 0; i < keep; ++i) {
    for (const auto& m : (*all)[i].members) todo.push_back(m.checkpoint_id);
  }
  while (!todo.empty()) {
    const std::string id = todo.back();
    todo.pop_back();
    if (!needed.insert(id).second) continue;
    if (auto m = d_.store->Get(id); m.ok()) {
      for (const auto& r : m->References()) todo.push_back(r);
    }
  }
  {
    absl::MutexLock l(&mu_);
    needed.insert(busy_ids_.begin(), busy_ids_.end());
    needed.insert(held_refs_.begin(), held_refs_.end());
  }
  for (size_t i = keep; i < all->size(); ++i) {
    const store::JobCheckpoint& jc = (*all)[i];
    const bool held = std::any_of(jc.members.begin(), jc.members.end(),
                                  [&](const auto& m) { return needed.count(m.checkpoint_id) > 0; });
    if (held) continue;  // a later pass takes it
    if (absl::Status s = d_.store->DeleteJobCheckpoint(ns, job, jc.id); !s.ok()) {
      CRYO_LOG(Warning) << "retention of job " << ns << "/" << job << ": " << s;
    } else {
      CRYO_LOG(Info) << "retention: deleted job checkpoint " << jc.id << " of " << ns << "/" << job
                     << " and its " << jc.members.size() << " parts";
    }
  }
}

absl::StatusOr<std::vector<JobCheckpointRequest::Member>> Engine::LocalJobMembers(
    const std::string& ns, const std::string& job) {
  if (d_.runtime == nullptr) {
    return absl::FailedPreconditionError("this cryod has no container runtime (runtime_endpoint)");
  }
  CRYO_ASSIGN_OR_RETURN(auto running, d_.runtime->ListRunning());
  auto get = [](const std::map<std::string, std::string>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  const std::string p = cfg_.annotation_prefix;
  std::vector<JobCheckpointRequest::Member> out;
  for (const auto& c : running) {
    if (get(c.labels, contract::k8s::kPodNamespace) != ns ||
        get(c.annotations, contract::Key(p, contract::container::kJob)) != job) {
      continue;
    }
    JobCheckpointRequest::Member m;
    m.member = get(c.annotations, contract::Key(p, contract::container::kJobMember));
    m.node = cfg_.node_name;
    m.req.container_id = c.id;
    out.push_back(std::move(m));
  }
  return out;
}

absl::StatusOr<std::vector<CheckpointResult>> Engine::CheckpointJobMembers(
    const JobCheckpointRequest& req, Operation& op,
    const std::function<void(const absl::Status&)>& at_cut,
    const std::function<absl::Status()>& wait_go, JobGpuCut::Upstream gpu_up,
    std::function<void()> gpu_left) {
  if (req.id.empty()) return absl::InvalidArgumentError("a node's part needs the job's id");
  CRYO_ASSIGN_OR_RETURN(const std::string id, ValidateJobRequest(req));
  const std::string what =
      absl::StrCat("job checkpoint '", id, "' of ", req.namespace_, "/", req.job);
  std::vector<int> all;
  for (int i = 0; i < static_cast<int>(req.members.size()); ++i) {
    if (!req.members[i].node.empty() && req.members[i].node != cfg_.node_name) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": member ", req.members[i].member,
                                                     " is on node ", req.members[i].node,
                                                     ", not on this one (", cfg_.node_name, ")"));
    }
    all.push_back(i);
  }
  const int n = static_cast<int>(all.size());
  // This node's members, and the driver's word as one more party; at the GPU cut, this node's
  // members, with the driver deciding each round.
  std::vector<std::string> gpu_parties;
  for (int i : all) gpu_parties.push_back(JobGpuCut::MemberParty(req.members[i].member));
  auto cut = std::make_shared<JobCut>(
      n + 1, std::make_shared<JobGpuCut>(gpu_parties, std::move(gpu_up), std::move(gpu_left)));
  std::thread word([&] {
    absl::Status s = cut->WaitFor(n, std::min(req.deadline, absl::Now() + req.cut_timeout));
    at_cut(s);
    if (!s.ok()) return;
    absl::Status go = wait_go();
    if (go.ok()) {
      cut->Mark("the driver");
    } else {
      cut->Fail("the driving node", go);
    }
  });
  auto results = RunJobMembers(req, all, cut, op);
  word.join();
  std::vector<std::string> names;
  std::vector<absl::Status> statuses;
  std::vector<CheckpointResult> out;
  for (int k = 0; k < n; ++k) {
    names.push_back(absl::StrCat("member ", req.members[k].member));
    statuses.push_back(results[k].status());
    if (results[k].ok()) out.push_back(*std::move(results[k]));
  }
  CRYO_RETURN_IF_ERROR(JobFailure(what, names, statuses));
  return out;
}

absl::Status Engine::CheckJobMember(const std::string& container_id, const std::string& ns,
                                    const std::string& job, const std::string& member) {
  if (d_.runtime == nullptr) {
    return absl::FailedPreconditionError("this cryod has no container runtime (runtime_endpoint)");
  }
  CRYO_ASSIGN_OR_RETURN(runtime::ContainerInfo c, d_.runtime->Inspect(container_id));
  auto get = [](const std::map<std::string, std::string>& m, const std::string& k) {
    auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  const std::string p = cfg_.annotation_prefix;
  const std::string got_ns = get(c.labels, contract::k8s::kPodNamespace);
  const std::string got_job = get(c.annotations, contract::Key(p, contract::container::kJob));
  const std::string got_member =
      get(c.annotations, contract::Key(p, contract::container::kJobMember));
  if (got_ns != ns || got_job != job || got_member != member) {
    return absl::PermissionDeniedError(
        absl::StrCat("container ", container_id.substr(0, 13), " is not member ", member,
                     " of job ", ns, "/", job, " (its pod says namespace '", got_ns, "', job '",
                     got_job, "', member '", got_member, "')"));
  }
  return absl::OkStatus();
}

}  // namespace cryo::engine
