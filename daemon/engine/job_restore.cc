// A job's replacements resuming together (issue 37): each member's restore meets the others in
// the shared store (its arrival, job_gather), holds the job's connections with the members' old
// addresses rewritten to their new pods' (job_hold) and lets them go once every member is back
// (job_release); a node's RestoreJob restores a job of process members by itself.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <tuple>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "daemon/container/runtime.h"
#include "daemon/criu/job_network.h"
#include "daemon/criu/listen_ports.h"
#include "daemon/criu/network_lock.h"
#include "daemon/engine/engine.h"
#include "daemon/engine/job_cut.h"
#include "daemon/engine/states.h"
#include "daemon/store/signature.h"
#include "lib/base/fs.h"
#include "lib/base/ids.h"
#include "lib/base/log.h"
#include "lib/base/proc.h"
#include "lib/base/status.h"
#include "lib/contract/annotations.h"
#include "lib/contract/job.h"
#include "lib/contract/labels.h"

namespace cryo::engine {

namespace {

// Each member's old address to its replacement's, per family where each has exactly one (a
// pod's address); what is ambiguous is left out, and said.
criu::AddressMap JobAddressMap(const std::map<std::string, std::vector<std::string>>& old_ips,
                               const std::map<std::string, std::vector<std::string>>& new_ips) {
  auto family_of = [](const std::string& ip) { return ip.find(':') == std::string::npos ? 4 : 6; };
  auto one_of = [&](const std::vector<std::string>& ips, int family) -> std::string {
    std::string found;
    for (const auto& ip : ips) {
      if (family_of(ip) != family) continue;
      if (!found.empty()) return "";
      found = ip;
    }
    return found;
  };
  criu::AddressMap map;
  for (const auto& [member, before] : old_ips) {
    auto it = new_ips.find(member);
    if (it == new_ips.end()) continue;
    for (int family : {4, 6}) {
      const std::string from = one_of(before, family), to = one_of(it->second, family);
      if (!from.empty() && !to.empty()) {
        map[from] = to;
      } else if (!from.empty() || !to.empty()) {
        CRYO_LOG(Warning) << "member " << member << ": IPv" << family << " addresses ["
                          << absl::StrJoin(before, ", ") << "] -> ["
                          << absl::StrJoin(it->second, ", ")
                          << "] are not one each; its connections keep their addresses";
      }
    }
  }
  return map;
}

}  // namespace

absl::Status Engine::GatherJobMembers(RestoreState& s) {
  const store::JobPart& part = *s.m.job;
  CRYO_ASSIGN_OR_RETURN(store::JobCheckpoint jc,
                        d_.store->GetJobCheckpoint(part.namespace_, part.job, part.job_checkpoint));
  const std::string what =
      absl::StrCat("job checkpoint '", jc.id, "' of ", jc.namespace_, "/", jc.job);
  const absl::Time t0 = absl::Now();
  store::JobArrival mine{part.member, jc.id, cfg_.node_name,
                         t0,          {},    store::JobArrival::State::kArrived};
  const pid_t init = s.ctr ? s.ctr->init_pid : 0;
  if (init > 0 && d_.proc->OwnNetns(init)) {
    auto ips = criu::PodAddresses(init);
    if (!ips.ok()) return Annotate(ips.status(), absl::StrCat(what, ": the new pod's addresses"));
    mine.pod_ips = *std::move(ips);
  }
  CRYO_RETURN_IF_ERROR(Annotate(d_.store->MarkJobArrival(jc.namespace_, jc.job, mine),
                                absl::StrCat(what, ": member ", part.member, "'s arrival")));
  s.live.job_arrival = mine;
  s.live.job_namespace = jc.namespace_;
  s.live.job_name = jc.job;
  // A wait that ends without the others says so: they do not count on this one any more.
  auto gave_up = absl::MakeCleanup([&] { MarkJobArrivalFailed(s.live); });
  const absl::Time end = std::min(s.req.deadline, t0 + cfg_.job_gather_timeout);
  absl::Time next_report = t0;
  for (;;) {
    CRYO_ASSIGN_OR_RETURN(auto arrivals, d_.store->JobArrivals(jc.namespace_, jc.job));
    const absl::Time now = absl::Now();
    std::map<std::string, std::vector<std::string>> here = {{part.member, mine.pod_ips}};
    for (const auto& a : arrivals) {
      // One from a resume long over (twice the wait: the nodes' clocks differ a little).
      if (a.at < now - 2 * cfg_.job_gather_timeout) continue;
      if (a.job_checkpoint == jc.id) {
        // One that failed is not coming (its next try writes a new arrival).
        if (a.member != part.member && a.state != store::JobArrival::State::kFailed) {
          here[a.member] = a.pod_ips;
        }
        continue;
      }
      // Another member's replacement resumes another job checkpoint: the one that chose the
      // older gives way (its pod is re-created and `resume: auto` takes the newest).
      auto other = d_.store->GetJobCheckpoint(jc.namespace_, jc.job, a.job_checkpoint);
      if (other.ok() && std::tie(other->created_at, other->id) > std::tie(jc.created_at, jc.id)) {
        return absl::FailedPreconditionError(absl::StrCat(
            what, ": member ", a.member, "'s replacement resumes the newer job checkpoint '",
            other->id, "'; the members resume one cut or none, so member ", part.member,
            " does not resume this older one (re-create its pod to take the newest)"));
      }
    }
    std::vector<std::string> missing;
    for (const auto& m : jc.members) {
      if (!here.count(m.member)) missing.push_back(m.member);
    }
    if (missing.empty()) {
      CRYO_LOG(Info) << what << ": all " << jc.members.size() << " members ready after "
                     << absl::FormatDuration(absl::Trunc(now - t0, absl::Milliseconds(1)))
                     << "; member " << part.member << " resumes";
      // Where the members were and where they are now: their connections move with them.
      // And where they were before that, which the job may still dial (any member's record).
      std::map<std::string, std::vector<std::string>> before;
      criu::AddressMap earlier = part.former_addresses;
      for (const auto& m : jc.members) {
        if (m.member == part.member) {
          before[m.member] = part.pod_ips;
          continue;
        }
        auto other = d_.store->Get(m.checkpoint_id);
        if (!other.ok()) return Annotate(other.status(), absl::StrCat(what, ": member ", m.member));
        if (!other->job) continue;
        before[m.member] = other->job->pod_ips;
        earlier.insert(other->job->former_addresses.begin(), other->job->former_addresses.end());
      }
      s.job_addresses = criu::ComposeAddressMaps(JobAddressMap(before, here), earlier);
      std::move(gave_up).Cancel();
      return absl::OkStatus();
    }
    const std::string waiting = absl::StrCat(
        "waiting for the replacements of member(s) ", absl::StrJoin(missing, ", "), " of job ",
        jc.namespace_, "/", jc.job, " (", here.size(), " of ", jc.members.size(), " ready)");
    if (now >= end) {
      return absl::DeadlineExceededError(
          absl::StrCat(what, ": ", waiting, " for ",
                       absl::FormatDuration(absl::Trunc(now - t0, absl::Seconds(1))),
                       "; nothing was restored (job_gather_timeout_s, or the caller's deadline)"));
    }
    if (s.op->cancelled()) return absl::CancelledError(absl::StrCat(what, ": ", waiting));
    if (now >= next_report) {
      // Progress where the pod's owner looks: the log and the container's own log.
      CRYO_LOG(Info) << "member " << part.member << ": " << waiting;
      s.op->Report(Stage::kRestore, here.size(), jc.members.size(), waiting);
      if (init > 0) proc::WriteToStderrOf(init, absl::StrCat("cryo: ", waiting));
      next_report = now + absl::Seconds(5);
    }
    // (The last member to arrive waits for none; the others see it within one poll, which is
    // one listing of the store's jobs/.)
    absl::SleepFor(absl::Milliseconds(50));
  }
}

absl::Status Engine::HoldJobConnections(RestoreState& s) {
  const std::string images = fs::Join(s.dir, store::kImagesDir);
  if (!s.job_addresses.empty()) {
    const std::string out = fs::Join(s.op_dir, "images");
    CRYO_RETURN_IF_ERROR(fs::MakeDirs(out, 0700));
    // Relative: CRIU in the new container resolves the links from the directory it was handed
    // (a descriptor), under the container's root, where the host's absolute paths mean nothing.
    // (A descriptor of its own would not do: CRIU's restored tasks close what they inherit
    // before they read their images.)
    const std::string base = std::filesystem::path(images).lexically_relative(out).string();
    CRYO_ASSIGN_OR_RETURN(bool rewritten,
                          criu::RewriteImageAddresses(images, out, base, s.job_addresses));
    if (rewritten) {
      s.images_dir = out;
      std::vector<std::string> pairs;
      for (const auto& [from, to] : s.job_addresses) pairs.push_back(absl::StrCat(from, "->", to));
      CRYO_LOG(Info) << "member " << s.m.job->member
                     << ": the job's connections move with its pods (" << absl::StrJoin(pairs, ", ")
                     << ")";
    }
  }
  // New connections to the old addresses go where the members are now. Without it the job runs
  // on, but whatever it dials later by an address it remembers fails: said, not fatal.
  if (!s.job_addresses.empty() && s.ctr && d_.proc->OwnNetns(s.ctr->init_pid)) {
    if (absl::Status st =
            criu::KeepJobAddresses(s.job_addresses, s.ctr->init_pid, cfg_.nsexec_path);
        !st.ok()) {
      CRYO_LOG(Warning) << "member " << s.m.job->member << ": " << st;
    }
  }
  // Every connection as CRIU will restore it, rewritten or not.
  CRYO_ASSIGN_OR_RETURN(auto conns,
                        criu::ReadImageConnections(s.images_dir.empty() ? images : s.images_dir));
  if (conns.empty()) return absl::OkStatus();
  // Until every member is restored (job_release): a member restored first must not reach one
  // that is not yet, whose kernel would reset the connection.
  const pid_t netns = s.ctr ? s.ctr->init_pid : 0;
  CRYO_ASSIGN_OR_RETURN(s.job_lock,
                        criu::ConnectionLock::Take(absl::StrCat(s.m.job->member, "-", RandomHex(4)),
                                                   conns, netns, cfg_.nsexec_path));
  return absl::OkStatus();
}

absl::Status Engine::ReleaseJobConnections(RestoreState& s) {
  const store::JobPart& part = *s.m.job;
  store::JobArrival done = *s.live.job_arrival;
  done.state = store::JobArrival::State::kRestored;
  CRYO_RETURN_IF_ERROR(d_.store->MarkJobArrival(part.namespace_, part.job, done));
  const absl::Time t0 = absl::Now();
  const absl::Time end = std::min(s.req.deadline, t0 + cfg_.job_gather_timeout);
  for (;;) {
    CRYO_ASSIGN_OR_RETURN(auto arrivals, d_.store->JobArrivals(part.namespace_, part.job));
    // Every member arrived (job_gather): one whose arrival is gone was restored and saw all the
    // others restored.
    std::vector<std::string> pending;
    for (const auto& a : arrivals) {
      if (a.member == part.member || a.job_checkpoint != part.job_checkpoint) continue;
      if (a.state == store::JobArrival::State::kFailed) {
        return absl::AbortedError(absl::StrCat(
            "job ", part.namespace_, "/", part.job, ": member ", a.member, "'s restore on node ",
            a.node, " failed; member ", part.member, " is not resumed without it"));
      }
      if (a.state != store::JobArrival::State::kRestored) pending.push_back(a.member);
    }
    if (pending.empty()) break;
    if (absl::Now() >= end) {
      return absl::DeadlineExceededError(
          absl::StrCat("job ", part.namespace_, "/", part.job, ": member(s) ",
                       absl::StrJoin(pending, ", "), " not restored after ",
                       absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Seconds(1))),
                       "; member ", part.member, " is not resumed without them"));
    }
    if (s.op->cancelled()) return absl::CancelledError("waiting for the job's other members");
    absl::SleepFor(absl::Milliseconds(50));
  }
  CRYO_LOG(Info) << "member " << part.member << ": every member restored after "
                 << absl::FormatDuration(absl::Trunc(absl::Now() - t0, absl::Milliseconds(1)))
                 << "; its connections go on";
  if (s.job_lock) CRYO_RETURN_IF_ERROR(s.job_lock->Release());
  // Done with: a later resume of this job checkpoint must not take it for a replacement.
  if (absl::Status st = d_.store->RemoveJobArrival(part.namespace_, part.job, part.member);
      !st.ok()) {
    CRYO_LOG(Warning) << "member " << part.member << "'s arrival stays (collected later): " << st;
  }
  s.live.job_arrival.reset();
  return absl::OkStatus();
}

void Engine::MarkJobArrivalFailed(RestoreLive& live) {
  if (!live.job_arrival) return;
  store::JobArrival a = *live.job_arrival;
  a.state = store::JobArrival::State::kFailed;
  if (absl::Status st = d_.store->MarkJobArrival(live.job_namespace, live.job_name, a); !st.ok()) {
    CRYO_LOG(Warning) << "member " << a.member << "'s failed arrival not recorded: " << st;
  }
  live.job_arrival.reset();
}

void Engine::UndoJobGather(const journal::Entry&, RestoreLive* live) {
  // After a restart nothing is known of it: the arrival ages out.
  if (live != nullptr) MarkJobArrivalFailed(*live);
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
    // (With or without connections to hold: a job of GPU members alone has none.)
    r.job_restore = true;
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
