#include "cri-shim/handlers/common.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cri-shim/opt_in.h"
#include "lib/base/proc.h"
#include "lib/contract/annotations.h"
#include "lib/contract/criu_annotations.h"
#include "lib/contract/job.h"
#include "lib/contract/labels.h"
#include "lib/cri/verbose_info.h"
#include "nlohmann/json.hpp"

namespace cryo::shim {

absl::StatusOr<runtime::v1::ContainerStatusResponse> ContainerStatusOf(CallContext& ctx,
                                                                       const std::string& id,
                                                                       bool verbose) {
  runtime::v1::ContainerStatusRequest req;
  req.set_container_id(id);
  req.set_verbose(verbose);
  runtime::v1::ContainerStatusResponse resp;
  auto rctx = ctx.NewRuntimeContext();
  grpc::Status s = ctx.runtime().runtime().ContainerStatus(rctx.get(), req, &resp);
  if (!s.ok()) return FromGrpc(s);
  return resp;
}

int InitPid(const runtime::v1::ContainerStatusResponse& r) {
  auto it = r.info().find("info");
  if (it == r.info().end()) return 0;
  auto parsed = json::Parse(it->second, kCriVerboseInfoLimits);
  nlohmann::json j = parsed.ok() ? std::move(*parsed) : nlohmann::json();
  if (!j.is_object() || !j.contains("pid") || !j["pid"].is_number_integer()) return 0;
  return j["pid"].get<int>();
}

std::map<std::string, std::string> CheckpointLabels(const runtime::v1::ContainerStatus& c,
                                                    const std::string& prefix,
                                                    const std::string& reason) {
  std::map<std::string, std::string> out;
  for (const char* k : contract::k8s::kContainerIdentity) {
    auto it = c.labels().find(k);
    if (it != c.labels().end()) out[k] = it->second;
  }
  if (!out.count(contract::k8s::kContainerName)) {
    out[contract::k8s::kContainerName] = c.metadata().name();
  }
  out[contract::Key(prefix, contract::label::kReason)] = reason;
  return out;
}

absl::Status SetCriuOptions(const runtime::v1::ContainerStatus& c, const std::string& prefix,
                            v1::CheckpointRequest* req) {
  auto a = contract::ParseCriuAnnotations({c.annotations().begin(), c.annotations().end()}, prefix);
  if (!a.ok()) return a.status();
  v1::CriuOptions* o = req->mutable_criu();
  if (a->tcp_established) o->set_tcp_established(*a->tcp_established);
  if (a->tcp_close) o->set_tcp_close(*a->tcp_close);
  if (a->skip_in_flight) o->set_skip_in_flight(*a->skip_in_flight);
  if (a->link_remap) o->set_link_remap(*a->link_remap);
  if (a->ghost_limit) o->set_ghost_limit_bytes(*a->ghost_limit);
  if (a->ext_unix_sk) o->set_ext_unix_sk(*a->ext_unix_sk);
  return absl::OkStatus();
}

std::string WorkloadOf(const runtime::v1::ContainerStatus& c, const std::string& prefix) {
  auto wk = c.annotations().find(ManagedKeys(prefix).workload);
  if (wk != c.annotations().end() && !wk->second.empty()) return wk->second;
  StringMap labels(c.labels().begin(), c.labels().end());
  return DefaultWorkloadKey(labels,
                            {labels[contract::k8s::kPodNamespace], labels[contract::k8s::kPodName],
                             labels[contract::k8s::kPodUid]},
                            c.metadata().name());
}

v1::CheckpointJobRequest JobRequestOf(const runtime::v1::ContainerStatus& c,
                                      const std::string& prefix, const std::string& job) {
  v1::CheckpointJobRequest jr;
  auto ns = c.labels().find(contract::k8s::kPodNamespace);
  jr.set_namespace_(ns == c.labels().end() ? "" : ns->second);
  jr.set_job(job);
  int size = 0;
  if (auto it = c.annotations().find(contract::Key(prefix, contract::container::kJobSize));
      it != c.annotations().end() && absl::SimpleAtoi(it->second, &size) && size > 0) {
    jr.set_job_size(static_cast<uint32_t>(size));
  }
  return jr;
}

void WriteToContainerLog(int init_pid, const std::string& line) {
  proc::WriteToStderrOf(init_pid, line);
}

absl::Duration TimeLeft(const CallContext& ctx, absl::Duration fallback) {
  if (ctx.deadline() == std::chrono::system_clock::time_point::max()) return fallback;
  return absl::FromChrono(ctx.deadline()) - absl::Now();
}

}  // namespace cryo::shim
