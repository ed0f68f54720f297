#include "daemon/store/manifest.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/ids.h"
#include "lib/base/json.h"
#include "lib/base/limits.h"
#include "lib/base/status.h"
#include "lib/contract/job.h"

namespace cryo::store {
namespace {

nlohmann::json ContainerToJson(const ContainerSection& c) {
  return {{"id", c.id},
          {"name", c.name},
          {"image", c.image},
          {"image_ref", c.image_ref},
          {"labels", c.labels},
          {"annotations", c.annotations},
          {"runtime", c.runtime},
          {"created_at_ns", c.created_at_ns},
          {"stdout_pipe", c.stdout_pipe},
          {"stderr_pipe", c.stderr_pipe},
          {"rootfs_diff", c.rootfs_diff},
          {"deleted_files", c.deleted_files}};
}

absl::StatusOr<ContainerSection> ContainerFromJson(const nlohmann::json& j) {
  json::Fields f(j, "container");
  ContainerSection c;
  CRYO_RETURN_IF_ERROR(f.Str("id", &c.id, true));
  CRYO_RETURN_IF_ERROR(f.Str("name", &c.name));
  CRYO_RETURN_IF_ERROR(f.Str("image", &c.image));
  CRYO_RETURN_IF_ERROR(f.Str("image_ref", &c.image_ref));
  CRYO_RETURN_IF_ERROR(f.StrMap("labels", &c.labels));
  CRYO_RETURN_IF_ERROR(f.StrMap("annotations", &c.annotations));
  CRYO_RETURN_IF_ERROR(f.Str("runtime", &c.runtime));
  CRYO_RETURN_IF_ERROR(f.Int64("created_at_ns", &c.created_at_ns));
  CRYO_RETURN_IF_ERROR(f.Str("stdout_pipe", &c.stdout_pipe));
  CRYO_RETURN_IF_ERROR(f.Str("stderr_pipe", &c.stderr_pipe));
  CRYO_RETURN_IF_ERROR(f.Str("rootfs_diff", &c.rootfs_diff));
  CRYO_RETURN_IF_ERROR(f.Str("deleted_files", &c.deleted_files));
  return c;
}

absl::StatusOr<JobPart> JobPartFromJson(const nlohmann::json& j) {
  json::Fields f(j, "job");
  JobPart p;
  CRYO_RETURN_IF_ERROR(f.Str("namespace", &p.namespace_, true));
  CRYO_RETURN_IF_ERROR(f.Str("job", &p.job, true));
  CRYO_RETURN_IF_ERROR(f.Str("job_checkpoint", &p.job_checkpoint, true));
  CRYO_RETURN_IF_ERROR(f.Str("member", &p.member, true));
  CRYO_RETURN_IF_ERROR(f.Strs("pod_ips", &p.pod_ips));
  for (const auto& ip : p.pod_ips) {
    if (!IsIpAddress(ip)) {
      return absl::InvalidArgumentError(
          absl::StrCat("section 'job': pod_ips holds '", ip, "', not an IP address"));
    }
  }
  CRYO_RETURN_IF_ERROR(f.StrMap("former_addresses", &p.former_addresses));
  for (const auto& [from, to] : p.former_addresses) {
    if (!IsIpAddress(from) || !IsIpAddress(to)) {
      return absl::InvalidArgumentError(absl::StrCat("section 'job': former_addresses holds '",
                                                     from, "' -> '", to, "', not IP addresses"));
    }
  }
  // They name the job checkpoint's record in the store: names it can hold, nothing else.
  if (!contract::IsKubernetesName(p.namespace_) || !contract::IsKubernetesName(p.job) ||
      !contract::IsKubernetesName(p.member)) {
    return absl::InvalidArgumentError("section 'job' holds a name that is not a Kubernetes name");
  }
  if (absl::Status s = ValidateCheckpointId(p.job_checkpoint); !s.ok()) {
    return Annotate(s, "section 'job'");
  }
  return p;
}

bool IsDigestHex(const std::string& s) {
  if (s.size() != 32) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// A file's "chunks" and "refs": every chunk's digest, and the chunks other checkpoints hold.
absl::Status ChunksFromJson(const json::Fields& ff, const std::string& where, ManifestFile* mf) {
  CRYO_RETURN_IF_ERROR(ff.Strs("chunks", &mf->chunks));
  if (!mf->chunks.empty() && mf->chunks.size() != ChunkCount(mf->size)) {
    return absl::InvalidArgumentError(absl::StrCat(where, " lists ", mf->chunks.size(),
                                                   " chunk digests for ", mf->size, " bytes"));
  }
  for (const auto& c : mf->chunks) {
    if (!IsDigestHex(c)) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has a chunk digest that is not one"));
    }
  }
  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* refs, ff.Object("refs"));
  if (refs == nullptr) return absl::OkStatus();
  if (mf->chunks.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " refers to chunks it has no digest of"));
  }
  std::set<uint32_t> seen;
  for (const auto& [id, list] : refs->items()) {
    if (absl::Status s = ValidateCheckpointId(id); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " refers to ", s.message()));
    }
    if (!list.is_array() || list.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": refs of ", id, " are no list"));
    }
    std::vector<uint32_t>& out = mf->refs[id];
    for (const auto& v : list) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() >= mf->chunks.size() ||
          !seen.insert(v.get<uint32_t>()).second) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " refers to a chunk it does not have, or twice"));
      }
      out.push_back(v.get<uint32_t>());
    }
  }
  return absl::OkStatus();
}

// What every node lists is bounded as a request would be: labels and workload as
// daemon/engine/validate.h bounds them, and the other listed fields by size.
absl::Status CheckBounds(const Manifest& m) {
  if (absl::Status s = limits::ValidateLabels(m.labels); !s.ok()) return Annotate(s, "labels");
  CRYO_RETURN_IF_ERROR(limits::ValidateWorkload(m.workload));
  if (m.pids.size() > kMaxManifestTasks || m.tids.size() > kMaxManifestTasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxManifestTasks, " pids or tids"));
  }
  // A restore refills each of these on a thread of its own, through the processes it restores.
  if (m.gpu_fastpath.size() > kMaxManifestFastpath) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxManifestFastpath, " gpu_fastpath entries"));
  }
  std::set<int> pids(m.pids.begin(), m.pids.end()), seen;
  for (const auto& f : m.gpu_fastpath) {
    if ((!pids.count(f.ns_pid) && !pids.count(f.pid)) || !seen.insert(f.ns_pid).second) {
      return absl::InvalidArgumentError(absl::StrCat("gpu_fastpath entry for pid ", f.ns_pid,
                                                     " is not one process of the checkpoint"));
    }
    if (f.files < 0 || f.files > kMaxManifestFastpathFiles) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpu_fastpath entry for pid ", f.ns_pid, " has ", f.files, " files"));
    }
  }
  if (m.stage_ms.size() > kMaxManifestStages) {
    return absl::InvalidArgumentError(
        absl::StrCat("more than ", kMaxManifestStages, " stage times"));
  }
  const std::pair<const char*, const std::string*> fields[] = {
      {"node", &m.node},
      {"created_at", &m.created_at},
      {"command", &m.command},
      {"kernel", &m.kernel},
      {"arch", &m.arch},
      {"criu_version", &m.criu_version},
      {"cryo_version", &m.cryo_version},
      {"checksum_algorithm", &m.checksum_algorithm}};
  for (const auto& [name, value] : fields) {
    if (value->size() > kMaxManifestField) {
      return absl::InvalidArgumentError(
          absl::StrCat("field '", name, "' is longer than ", kMaxManifestField, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseBody(const nlohmann::json& j, Manifest& m) {
  json::Fields f(j, "");
  CRYO_RETURN_IF_ERROR(f.Str("id", &m.id, true));
  CRYO_RETURN_IF_ERROR(f.Str("workload", &m.workload));
  CRYO_RETURN_IF_ERROR(f.Str("node", &m.node));
  CRYO_RETURN_IF_ERROR(f.Str("created_at", &m.created_at));
  std::string kind = "process";
  CRYO_RETURN_IF_ERROR(f.Str("kind", &kind));
  auto k = ParseKind(kind);
  if (!k) return absl::InvalidArgumentError(absl::StrCat("unknown checkpoint kind '", kind, "'"));
  m.kind = *k;

  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* target, f.Object("target", true));
  json::Fields t(*target, "target");
  CRYO_RETURN_IF_ERROR(t.Int("root_pid", &m.root_pid, true));
  CRYO_RETURN_IF_ERROR(t.Ints("pids", &m.pids));
  CRYO_RETURN_IF_ERROR(t.Ints("tids", &m.tids));
  CRYO_RETURN_IF_ERROR(t.Str("command", &m.command));
  CRYO_RETURN_IF_ERROR(t.Strs("cmdline", &m.cmdline));

  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* source, f.Object("source", true));
  json::Fields s(*source, "source");
  CRYO_RETURN_IF_ERROR(s.Str("kernel", &m.kernel));
  CRYO_RETURN_IF_ERROR(s.Str("arch", &m.arch));
  CRYO_RETURN_IF_ERROR(s.Str("criu_version", &m.criu_version));
  CRYO_RETURN_IF_ERROR(s.Str("cryo_version", &m.cryo_version));

  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* options, f.Object("options"));
  if (options != nullptr) {
    json::Fields o(*options, "options");
    CRYO_RETURN_IF_ERROR(o.Bool("leave_running", &m.leave_running));
    CRYO_RETURN_IF_ERROR(o.Bool("tcp_established", &m.options.tcp_established));
    CRYO_RETURN_IF_ERROR(o.Bool("tcp_close", &m.options.tcp_close));
    CRYO_RETURN_IF_ERROR(o.Bool("skip_in_flight", &m.options.skip_in_flight));
    CRYO_RETURN_IF_ERROR(o.Bool("link_remap", &m.options.link_remap));
    CRYO_RETURN_IF_ERROR(o.Uint64("ghost_limit", &m.options.ghost_limit));
    CRYO_RETURN_IF_ERROR(o.Bool("ext_unix_sk", &m.options.ext_unix_sk));
    CRYO_RETURN_IF_ERROR(o.Bool("shell_job", &m.options.shell_job));
  }
  CRYO_RETURN_IF_ERROR(f.StrMap("labels", &m.labels));
  CRYO_RETURN_IF_ERROR(f.Uint64Map("stage_ms", &m.stage_ms));
  CRYO_RETURN_IF_ERROR(f.Str("checksum_algorithm", &m.checksum_algorithm));

  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* files, f.Array("files", true));
  for (size_t i = 0; i < files->size(); ++i) {
    const nlohmann::json& e = (*files)[i];
    const std::string where = absl::StrCat("files[", i, "]");
    if (!e.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
    json::Fields ff(e, where);
    ManifestFile mf;
    CRYO_RETURN_IF_ERROR(ff.Str("path", &mf.path, true));
    CRYO_RETURN_IF_ERROR(ff.Uint64("size", &mf.size, true));
    CRYO_RETURN_IF_ERROR(ff.Str("checksum", &mf.checksum, true));
    if (!SafeRelativePath(mf.path)) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest lists an unsafe file path '", mf.path, "'"));
    }
    CRYO_RETURN_IF_ERROR(ChunksFromJson(ff, where, &mf));
    m.files.push_back(std::move(mf));
  }

  CRYO_RETURN_IF_ERROR(f.Any("gpu", &m.gpu));
  if (!m.gpu.is_null() && !m.gpu.is_object()) {
    return absl::InvalidArgumentError("field 'gpu' is not an object");
  }
  nlohmann::json gp;
  CRYO_RETURN_IF_ERROR(f.Any("gpu_processes", &gp));
  CRYO_ASSIGN_OR_RETURN(m.gpu_processes, gpu::GpuProcessesFromJson(gp));
  nlohmann::json fp;
  CRYO_RETURN_IF_ERROR(f.Any("gpu_fastpath", &fp));
  CRYO_ASSIGN_OR_RETURN(m.gpu_fastpath, gpu::FastpathProcessesFromJson(fp));

  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* container, f.Object("container"));
  if (m.kind == CheckpointKind::kContainer) {
    if (container == nullptr) {
      return absl::InvalidArgumentError("a container checkpoint without its 'container' section");
    }
    CRYO_ASSIGN_OR_RETURN(m.container, ContainerFromJson(*container));
  } else if (container != nullptr) {
    return absl::InvalidArgumentError("a process checkpoint with a 'container' section");
  }
  nlohmann::json creds;
  CRYO_RETURN_IF_ERROR(f.Any("credentials", &creds));
  if (!creds.is_null()) {
    CRYO_ASSIGN_OR_RETURN(m.credentials, criu::CeilingFromJson(creds));
  }
  CRYO_ASSIGN_OR_RETURN(const nlohmann::json* job, f.Object("job"));
  if (job != nullptr) {
    CRYO_ASSIGN_OR_RETURN(m.job, JobPartFromJson(*job));
  }
  CRYO_RETURN_IF_ERROR(f.Str("signature", &m.signature));
  if (m.signature.size() > 256) return absl::InvalidArgumentError("field 'signature' too long");
  if (m.root_pid <= 0) return absl::InvalidArgumentError("manifest has no root pid");
  for (const auto& mf : m.files) {
    if (mf.refs.count(m.id)) {
      return absl::InvalidArgumentError(absl::StrCat(mf.path, " refers to its own checkpoint"));
    }
  }
  return CheckBounds(m);
}

}  // namespace

const char* KindName(CheckpointKind k) {
  return k == CheckpointKind::kContainer ? "container" : "process";
}

std::optional<CheckpointKind> ParseKind(const std::string& s) {
  if (s == "process") return CheckpointKind::kProcess;
  if (s == "container") return CheckpointKind::kContainer;
  return std::nullopt;
}

uint64_t Manifest::TotalBytes() const {
  uint64_t t = 0;
  for (const auto& f : files) t += f.size;
  return t;
}

uint64_t ChunkCount(uint64_t size) {
  return size == 0 ? 1 : (size + xxh3chunked::kChunk - 1) / xxh3chunked::kChunk;
}

uint64_t ManifestFile::ReferencedBytes() const {
  uint64_t t = 0;
  for (const auto& [id, list] : refs) {
    for (uint32_t c : list) {
      const uint64_t off = uint64_t{c} * xxh3chunked::kChunk;
      t += off < size ? std::min<uint64_t>(xxh3chunked::kChunk, size - off) : 0;
    }
  }
  return t;
}

uint64_t Manifest::ReferencedBytes() const {
  uint64_t t = 0;
  for (const auto& f : files) t += f.ReferencedBytes();
  return t;
}

std::set<std::string> Manifest::References() const {
  std::set<std::string> out;
  for (const auto& f : files) {
    for (const auto& [id, list] : f.refs) out.insert(id);
  }
  return out;
}

bool SafeRelativePath(absl::string_view p) {
  if (p.empty() || p[0] == '/') return false;
  for (absl::string_view part : absl::StrSplit(p, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

std::string ManifestToJson(const Manifest& m) {
  nlohmann::json j;
  j["format"] = kManifestFormat;
  j["id"] = m.id;
  j["workload"] = m.workload;
  j["node"] = m.node;
  j["created_at"] = m.created_at;
  j["kind"] = KindName(m.kind);
  j["target"] = {{"root_pid", m.root_pid},
                 {"pids", m.pids},
                 {"tids", m.tids},
                 {"command", m.command},
                 {"cmdline", m.cmdline}};
  j["source"] = {{"kernel", m.kernel},
                 {"arch", m.arch},
                 {"criu_version", m.criu_version},
                 {"cryo_version", m.cryo_version}};
  j["options"] = {
      {"leave_running", m.leave_running},     {"tcp_established", m.options.tcp_established},
      {"tcp_close", m.options.tcp_close},     {"skip_in_flight", m.options.skip_in_flight},
      {"link_remap", m.options.link_remap},   {"ghost_limit", m.options.ghost_limit},
      {"ext_unix_sk", m.options.ext_unix_sk}, {"shell_job", m.options.shell_job}};
  j["labels"] = m.labels;
  j["stage_ms"] = m.stage_ms;
  j["checksum_algorithm"] = m.checksum_algorithm;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) {
    nlohmann::json e = {{"path", f.path}, {"size", f.size}, {"checksum", f.checksum}};
    if (!f.chunks.empty()) e["chunks"] = f.chunks;
    if (!f.refs.empty()) e["refs"] = f.refs;
    files.push_back(std::move(e));
  }
  j["files"] = files;
  j["total_bytes"] = m.TotalBytes();
  if (const uint64_t r = m.ReferencedBytes(); r > 0) j["bytes_referenced"] = r;
  j["gpu"] = m.gpu;
  j["gpu_processes"] = m.gpu_processes.empty() ? nlohmann::json() : gpu::ToJson(m.gpu_processes);
  j["gpu_fastpath"] = m.gpu_fastpath.empty() ? nlohmann::json() : gpu::ToJson(m.gpu_fastpath);
  j["container"] = m.container ? ContainerToJson(*m.container) : nlohmann::json();
  if (m.credentials) j["credentials"] = criu::CeilingToJson(*m.credentials);
  if (m.job) {
    j["job"] = {{"namespace", m.job->namespace_},
                {"job", m.job->job},
                {"job_checkpoint", m.job->job_checkpoint},
                {"member", m.job->member}};
    if (!m.job->pod_ips.empty()) j["job"]["pod_ips"] = m.job->pod_ips;
    if (!m.job->former_addresses.empty()) {
      j["job"]["former_addresses"] = m.job->former_addresses;
    }
  }
  if (!m.signature.empty()) j["signature"] = m.signature;
  // Replace invalid UTF-8 (a command name is bytes) rather than throw.
  return j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view text) {
  auto parsed = json::Parse(text, {kMaxManifestBytes, kMaxManifestDepth});
  if (!parsed.ok()) return Annotate(parsed.status(), "manifest");
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return absl::InvalidArgumentError("manifest is not a JSON object");
  std::string format;
  if (auto it = j.find("format"); it != j.end() && it->is_string()) format = it->get<std::string>();
  if (format != kManifestFormat) {
    if (format.rfind("cryo.checkpoint/", 0) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "manifest format '", format, "' is not supported by this cryod (knows ", kManifestFormat,
          "); restore with a cryod of the version that wrote it or newer"));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("not a cryo manifest (format '", format.substr(0, 64), "')"));
  }
  Manifest m;
  absl::Status s = ParseBody(j, m);
  if (!s.ok()) return Annotate(s, "manifest is malformed");
  return m;
}

}  // namespace cryo::store
