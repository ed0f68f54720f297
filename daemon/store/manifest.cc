#include "daemon/store/manifest.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "lib/base/chunked_xxh3.h"
#include "lib/base/ids.h"
#include "lib/base/json.h"
#include "lib/base/json_table.h"
#include "lib/base/limits.h"
#include "lib/base/status.h"
#include "lib/contract/job.h"

namespace cryo::store {
namespace {

// The container section's one description (container mode's facts).
const json::Table<ContainerSection>& ContainerTable() {
  using C = ContainerSection;
  static const json::Table<C> t = {
      json::Member("id", &C::id, json::kRequired),
      json::Member("name", &C::name),
      json::Member("image", &C::image),
      json::Member("image_ref", &C::image_ref),
      json::Member("labels", &C::labels),
      json::Member("annotations", &C::annotations),
      json::Member("runtime", &C::runtime),
      json::Member("created_at_ns", &C::created_at_ns),
      json::Member("stdout_pipe", &C::stdout_pipe),
      json::Member("stderr_pipe", &C::stderr_pipe),
      json::Member("rootfs_diff", &C::rootfs_diff),
      json::Member("deleted_files", &C::deleted_files),
  };
  return t;
}

// A job checkpoint's part: which job, which member, and the addresses its connections name.
const json::Table<JobPart>& JobPartTable() {
  static const json::Table<JobPart> t = {
      json::Member("namespace", &JobPart::namespace_, json::kRequired),
      json::Member("job", &JobPart::job, json::kRequired),
      json::Member("job_checkpoint", &JobPart::job_checkpoint, json::kRequired),
      json::Member("member", &JobPart::member, json::kRequired),
      json::Member("pod_ips", &JobPart::pod_ips, false, json::Emit::kUnlessEmpty),
      json::Member("former_addresses", &JobPart::former_addresses, false, json::Emit::kUnlessEmpty),
  };
  return t;
}

absl::Status CheckJobPart(const JobPart& p) {
  for (const auto& ip : p.pod_ips) {
    if (!IsIpAddress(ip)) {
      return absl::InvalidArgumentError(
          absl::StrCat("section 'job': pod_ips holds '", ip, "', not an IP address"));
    }
  }
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
  return absl::OkStatus();
}

// An optional section of its own record type, read by its table and checked by `check`.
template <typename S>
json::Field<Manifest> Optional(const char* key, std::optional<S> Manifest::*m,
                               const json::Table<S>& table, bool null_when_absent,
                               absl::Status (*check)(const S&) = nullptr) {
  return json::Custom<Manifest>(
      key,
      [key, m, &table, null_when_absent](const Manifest& man, nlohmann::json& j) {
        if (man.*m) {
          j[key] = json::Write(*(man.*m), table);
        } else if (null_when_absent) {
          j[key] = nullptr;
        }
      },
      [key, m, &table, check](const json::Fields& in, Manifest& man) -> absl::Status {
        CRYO_ASSIGN_OR_RETURN(const nlohmann::json* obj, in.Object(key));
        if (obj == nullptr) return absl::OkStatus();
        S section;
        CRYO_RETURN_IF_ERROR(json::Read(json::Fields(*obj, key), table, section));
        if (check != nullptr) CRYO_RETURN_IF_ERROR(check(section));
        man.*m = std::move(section);
        return absl::OkStatus();
      });
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

const json::Table<ManifestFile>& FileTable() {
  static const json::Table<ManifestFile> t = {
      json::Member("path", &ManifestFile::path, json::kRequired),
      json::Member("size", &ManifestFile::size, json::kRequired),
      json::Member("checksum", &ManifestFile::checksum, json::kRequired),
      // "chunks" and "refs" are read together, checked against each other and the size read
      // above (ChunksFromJson).
      json::Custom<ManifestFile>(
          "chunks",
          [](const ManifestFile& f, nlohmann::json& j) {
            if (!f.chunks.empty()) j["chunks"] = f.chunks;
          },
          [](const json::Fields& in, ManifestFile& f) {
            return ChunksFromJson(in, in.where(), &f);
          }),
      json::WriteOnly<ManifestFile>("refs",
                                    [](const ManifestFile& f, nlohmann::json& j) {
                                      if (!f.refs.empty()) j["refs"] = f.refs;
                                    }),
  };
  return t;
}

// The manifest's one description: what ManifestToJson writes and ParseManifest reads (the
// "format" key is checked before, the checks across fields after).
const json::Table<Manifest>& ManifestTable() {
  using M = Manifest;
  static const json::Table<M> t = {
      json::WriteOnly<M>("format",
                         [](const M&, nlohmann::json& j) { j["format"] = kManifestFormat; }),
      json::Member("id", &M::id, json::kRequired),
      json::Member("workload", &M::workload),
      json::Member("node", &M::node),
      json::Member("created_at", &M::created_at),
      json::Enum("kind", &M::kind, &KindName, &ParseKind, "unknown checkpoint kind"),
      json::Section<M>("target",
                       {json::Member("root_pid", &M::root_pid, json::kRequired),
                        json::Member("pids", &M::pids), json::Member("tids", &M::tids),
                        json::Member("command", &M::command), json::Member("cmdline", &M::cmdline)},
                       json::kRequired),
      json::Section<M>("source",
                       {json::Member("kernel", &M::kernel), json::Member("arch", &M::arch),
                        json::Member("criu_version", &M::criu_version),
                        json::Member("cryo_version", &M::cryo_version)},
                       json::kRequired),
      json::Section<M>(
          "options",
          {json::Member("leave_running", &M::leave_running),
           json::Member("tcp_established", &M::options, &criu::JobOptions::tcp_established),
           json::Member("tcp_close", &M::options, &criu::JobOptions::tcp_close),
           json::Member("skip_in_flight", &M::options, &criu::JobOptions::skip_in_flight),
           json::Member("link_remap", &M::options, &criu::JobOptions::link_remap),
           json::Member("ghost_limit", &M::options, &criu::JobOptions::ghost_limit),
           json::Member("ext_unix_sk", &M::options, &criu::JobOptions::ext_unix_sk),
           json::Member("shell_job", &M::options, &criu::JobOptions::shell_job)}),
      json::Member("labels", &M::labels),
      json::Member("stage_ms", &M::stage_ms),
      json::Member("checksum_algorithm", &M::checksum_algorithm),
      json::Records("files", &M::files, FileTable(), json::kRequired,
                    [](const ManifestFile& mf, const std::string& where) -> absl::Status {
                      if (!SafeRelativePath(mf.path)) {
                        return absl::InvalidArgumentError(
                            absl::StrCat("manifest lists an unsafe file path '", mf.path, "'"));
                      }
                      return absl::OkStatus();
                    }),
      // Written for readers of the store (du, listings); derived, so not read back.
      json::WriteOnly<M>("total_bytes",
                         [](const M& m, nlohmann::json& j) { j["total_bytes"] = m.TotalBytes(); }),
      json::WriteOnly<M>("bytes_referenced",
                         [](const M& m, nlohmann::json& j) {
                           if (const uint64_t r = m.ReferencedBytes(); r > 0) {
                             j["bytes_referenced"] = r;
                           }
                         }),
      json::Custom<M>(
          "gpu", [](const M& m, nlohmann::json& j) { j["gpu"] = m.gpu; },
          [](const json::Fields& in, M& m) -> absl::Status {
            CRYO_RETURN_IF_ERROR(in.Any("gpu", &m.gpu));
            if (!m.gpu.is_null() && !m.gpu.is_object()) {
              return absl::InvalidArgumentError("field 'gpu' is not an object");
            }
            return absl::OkStatus();
          }),
      gpu::ProcessesField("gpu_processes", &M::gpu_processes, /*null_when_empty=*/true),
      gpu::ProcessesField("gpu_fastpath", &M::gpu_fastpath, /*null_when_empty=*/true),
      Optional("container", &M::container, ContainerTable(), /*null_when_absent=*/true),
      json::Custom<M>(
          "credentials",
          [](const M& m, nlohmann::json& j) {
            if (m.credentials) j["credentials"] = criu::CeilingToJson(*m.credentials);
          },
          [](const json::Fields& in, M& m) -> absl::Status {
            nlohmann::json creds;
            CRYO_RETURN_IF_ERROR(in.Any("credentials", &creds));
            if (creds.is_null()) return absl::OkStatus();
            CRYO_ASSIGN_OR_RETURN(m.credentials, criu::CeilingFromJson(creds));
            return absl::OkStatus();
          }),
      Optional("job", &M::job, JobPartTable(), /*null_when_absent=*/false, &CheckJobPart),
      json::Member("signature", &M::signature, false, json::Emit::kUnlessEmpty),
  };
  return t;
}

absl::Status ParseBody(const nlohmann::json& j, Manifest& m) {
  CRYO_RETURN_IF_ERROR(json::Read(json::Fields(j, ""), ManifestTable(), m));
  if (m.kind == CheckpointKind::kContainer && !m.container) {
    return absl::InvalidArgumentError("a container checkpoint without its 'container' section");
  }
  if (m.kind != CheckpointKind::kContainer && m.container) {
    return absl::InvalidArgumentError("a process checkpoint with a 'container' section");
  }
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
  // Replace invalid UTF-8 (a command name is bytes) rather than throw.
  return json::Write(m, ManifestTable())
             .dump(2, ' ', false, nlohmann::json::error_handler_t::replace) +
         "\n";
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
