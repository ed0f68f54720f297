#include "daemon/store/job_checkpoint.h"

#include <openssl/evp.h>

#include <set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "daemon/store/store.h"
#include "lib/base/ids.h"
#include "lib/base/json.h"
#include "lib/base/status.h"
#include "lib/contract/job.h"

namespace cryo::store {
namespace {

constexpr char kDigestPrefix[] = "sha256:";

bool IsDigest(const std::string& s) {
  if (s.size() != sizeof(kDigestPrefix) - 1 + 64 || s.rfind(kDigestPrefix, 0) != 0) return false;
  for (size_t i = sizeof(kDigestPrefix) - 1; i < s.size(); ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status ParseBody(const nlohmann::json& j, JobCheckpoint& jc) {
  json::Fields f(j, "job checkpoint");
  CRYO_RETURN_IF_ERROR(f.Str("id", &jc.id, true));
  CRYO_RETURN_IF_ERROR(f.Str("namespace", &jc.namespace_, true));
  CRYO_RETURN_IF_ERROR(f.Str("job", &jc.job, true));
  CRYO_RETURN_IF_ERROR(f.Str("created_at", &jc.created_at, true));
  CRYO_RETURN_IF_ERROR(f.Uint64Map("cut_ms", &jc.cut_ms));
  CRYO_RETURN_IF_ERROR(f.Str("signature", &jc.signature));
  CRYO_RETURN_IF_ERROR(ValidateCheckpointId(jc.id));
  if (!contract::IsKubernetesName(jc.namespace_) || !contract::IsKubernetesName(jc.job)) {
    return absl::InvalidArgumentError("namespace or job is not a Kubernetes name");
  }
  if (jc.created_at.size() > kMaxManifestField || jc.signature.size() > kMaxManifestField ||
      jc.cut_ms.size() > kMaxManifestStages) {
    return absl::InvalidArgumentError("a field is longer than a record holds");
  }
  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* members, f.Array("members", true));
  if (members->empty() || members->size() > static_cast<size_t>(contract::kMaxJobMembers)) {
    return absl::InvalidArgumentError(absl::StrCat("a job checkpoint lists 1 to ",
                                                   contract::kMaxJobMembers, " members, this one ",
                                                   members->size()));
  }
  std::set<std::string> names, parts;
  for (const auto& m : *members) {
    if (!m.is_object()) return absl::InvalidArgumentError("a member is not an object");
    json::Fields mf(m, "member");
    JobCheckpointMember out;
    CRYO_RETURN_IF_ERROR(mf.Str("member", &out.member, true));
    CRYO_RETURN_IF_ERROR(mf.Str("checkpoint_id", &out.checkpoint_id, true));
    CRYO_RETURN_IF_ERROR(mf.Str("node", &out.node));
    CRYO_RETURN_IF_ERROR(mf.Str("manifest_digest", &out.manifest_digest, true));
    if (!contract::IsKubernetesName(out.member)) {
      return absl::InvalidArgumentError(
          absl::StrCat("member '", out.member.substr(0, 64), "' is not a Kubernetes name"));
    }
    CRYO_RETURN_IF_ERROR(ValidateCheckpointId(out.checkpoint_id));
    if (!IsDigest(out.manifest_digest)) {
      return absl::InvalidArgumentError(
          absl::StrCat("member '", out.member, "': manifest_digest is not sha256:<64 hex>"));
    }
    if (out.node.size() > kMaxManifestField) {
      return absl::InvalidArgumentError("a member's node is longer than a record holds");
    }
    if (!names.insert(out.member).second || !parts.insert(out.checkpoint_id).second) {
      return absl::InvalidArgumentError(absl::StrCat("member '", out.member, "' or its part '",
                                                     out.checkpoint_id, "' is listed twice"));
    }
    jc.members.push_back(std::move(out));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ManifestDigest(const Manifest& m) {
  const std::string body = ManifestToJson(m);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(body.data(), body.size(), md, &len, EVP_sha256(), nullptr);
  return absl::StrCat(kDigestPrefix,
                      absl::BytesToHexString(absl::string_view(reinterpret_cast<char*>(md), len)));
}

std::string JobCheckpointToJson(const JobCheckpoint& jc) {
  nlohmann::json members = nlohmann::json::array();
  for (const auto& m : jc.members) {
    members.push_back({{"member", m.member},
                       {"checkpoint_id", m.checkpoint_id},
                       {"node", m.node},
                       {"manifest_digest", m.manifest_digest}});
  }
  nlohmann::json j = {{"format", kJobCheckpointFormat},
                      {"id", jc.id},
                      {"namespace", jc.namespace_},
                      {"job", jc.job},
                      {"created_at", jc.created_at},
                      {"members", members},
                      {"cut_ms", jc.cut_ms},
                      {"signature", jc.signature}};
  return j.dump(2) + "\n";
}

absl::StatusOr<JobCheckpoint> ParseJobCheckpoint(absl::string_view text) {
  auto parsed = json::Parse(text, {kMaxJobCheckpointBytes, 8});
  if (!parsed.ok()) return Annotate(parsed.status(), "job checkpoint");
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError("job checkpoint is not a JSON object");
  std::string format;
  if (auto it = j.find("format"); it != j.end() && it->is_string()) format = it->get<std::string>();
  if (format != kJobCheckpointFormat) {
    if (format.rfind("cryo.job-checkpoint/", 0) == 0) {
      return absl::FailedPreconditionError(absl::StrCat("job checkpoint format '", format,
                                                        "' is newer than this cryod's (",
                                                        kJobCheckpointFormat, ")"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("not a cryo job checkpoint (format '", format.substr(0, 64), "')"));
  }
  JobCheckpoint jc;
  absl::Status s = ParseBody(j, jc);
  if (!s.ok()) return Annotate(s, "job checkpoint is malformed");
  return jc;
}

std::string JobCheckpointFileName(const std::string& ns, const std::string& job,
                                  const std::string& id) {
  return absl::StrCat(ns, "+", job, "+", id, ".json");
}

std::string JobArrivalToJson(const JobArrival& a) {
  nlohmann::json j = {{"member", a.member},
                      {"job_checkpoint", a.job_checkpoint},
                      {"node", a.node},
                      {"at", absl::FormatTime(absl::RFC3339_full, a.at, absl::UTCTimeZone())}};
  if (!a.pod_ips.empty()) j["pod_ips"] = a.pod_ips;
  if (a.state == JobArrival::State::kRestored) j["state"] = "restored";
  if (a.state == JobArrival::State::kFailed) j["state"] = "failed";
  return j.dump();
}

absl::StatusOr<JobArrival> ParseJobArrival(absl::string_view text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto str = [&](const char* k) -> std::string {
    if (!j.is_object() || !j.contains(k) || !j[k].is_string()) return "";
    return j[k].get<std::string>();
  };
  JobArrival a;
  a.member = str("member");
  a.job_checkpoint = str("job_checkpoint");
  a.node = str("node");
  std::string err;
  if (!contract::IsKubernetesName(a.member) || !ValidateCheckpointId(a.job_checkpoint).ok() ||
      !absl::ParseTime(absl::RFC3339_full, str("at"), &a.at, &err)) {
    return absl::InvalidArgumentError("not a job arrival (member, job_checkpoint, node, at)");
  }
  if (j.contains("pod_ips")) {
    if (!j["pod_ips"].is_array()) return absl::InvalidArgumentError("job arrival: bad pod_ips");
    for (const auto& ip : j["pod_ips"]) {
      if (!ip.is_string() || !IsIpAddress(ip.get<std::string>())) {
        return absl::InvalidArgumentError("job arrival: pod_ips holds something not an address");
      }
      a.pod_ips.push_back(ip.get<std::string>());
    }
  }
  const std::string state = str("state");
  if (state == "restored") {
    a.state = JobArrival::State::kRestored;
  } else if (state == "failed") {
    a.state = JobArrival::State::kFailed;
  } else if (!state.empty() && state != "arrived") {
    return absl::InvalidArgumentError(absl::StrCat("job arrival: unknown state '", state, "'"));
  }
  return a;
}

std::string JobArrivalFileName(const std::string& ns, const std::string& job,
                               const std::string& member) {
  return absl::StrCat(ns, "+", job, kJobArrivalInfix, member);
}

absl::StatusOr<JobCheckpoint> CommittedJobCheckpointOf(CheckpointStore& store,
                                                       const Manifest& part) {
  if (!part.job) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint '", part.id, "' is no part of a job checkpoint"));
  }
  const JobPart& p = *part.job;
  const std::string what =
      absl::StrCat("checkpoint '", part.id, "' is member ", p.member, "'s part of job checkpoint '",
                   p.job_checkpoint, "' of ", p.namespace_, "/", p.job);
  auto jc = store.GetJobCheckpoint(p.namespace_, p.job, p.job_checkpoint);
  if (absl::IsNotFound(jc.status())) {
    return absl::FailedPreconditionError(
        absl::StrCat(what,
                     ", which was never committed (a member failed or missed the deadline, or the "
                     "commit is still to come): a part is never restored alone"));
  }
  if (!jc.ok()) return Annotate(jc.status(), what);
  for (const auto& m : jc->members) {
    if (m.member != p.member) continue;
    if (m.checkpoint_id != part.id) {
      return absl::FailedPreconditionError(absl::StrCat(what, ", but that job checkpoint's member ",
                                                        p.member, " is '", m.checkpoint_id, "'"));
    }
    if (m.manifest_digest != ManifestDigest(part)) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ", but its manifest changed since the commit (digest ",
                       m.manifest_digest, " committed)"));
    }
    return *std::move(jc);
  }
  return absl::FailedPreconditionError(
      absl::StrCat(what, ", but that job checkpoint has no member ", p.member));
}

}  // namespace cryo::store
