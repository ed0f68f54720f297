#include "daemon/store/manifest.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace cryo::store {

uint64_t Manifest::TotalBytes() const {
  uint64_t t = 0;
  for (const auto& f : files) t += f.size;
  return t;
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
  j["kind"] = m.kind;
  j["target"] = {{"root_pid", m.root_pid}, {"pids", m.pids},     {"tids", m.tids},
                 {"command", m.command},   {"cmdline", m.cmdline}};
  j["source"] = {{"kernel", m.kernel},
                 {"arch", m.arch},
                 {"criu_version", m.criu_version},
                 {"cryo_version", m.cryo_version}};
  j["options"] = {{"leave_running", m.leave_running},
                  {"tcp_established", m.tcp_established},
                  {"shell_job", m.shell_job}};
  j["labels"] = m.labels;
  j["stage_ms"] = m.stage_ms;
  j["checksum_algorithm"] = m.checksum_algorithm;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : m.files) {
    files.push_back({{"path", f.path}, {"size", f.size}, {"checksum", f.checksum}});
  }
  j["files"] = files;
  j["total_bytes"] = m.TotalBytes();
  j["gpu"] = m.gpu;
  j["gpu_processes"] = m.gpu_processes;
  j["container"] = m.container;
  return j.dump(2) + "\n";
}

absl::StatusOr<Manifest> ParseManifest(absl::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("manifest is not valid JSON");
  }
  std::string format = j.value("format", "");
  if (format != kManifestFormat) {
    if (format.rfind("cryo.checkpoint/", 0) == 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "manifest format '", format, "' is not supported by this cryod (knows ", kManifestFormat,
          "); restore with a cryod of the version that wrote it or newer"));
    }
    return absl::InvalidArgumentError(absl::StrCat("not a cryo manifest (format '", format, "')"));
  }
  Manifest m;
  try {
    m.id = j.at("id").get<std::string>();
    m.workload = j.value("workload", "");
    m.node = j.value("node", "");
    m.created_at = j.value("created_at", "");
    m.kind = j.value("kind", "process");
    const auto& t = j.at("target");
    m.root_pid = t.at("root_pid").get<int>();
    m.pids = t.value("pids", std::vector<int>{});
    m.tids = t.value("tids", std::vector<int>{});
    m.command = t.value("command", "");
    m.cmdline = t.value("cmdline", std::vector<std::string>{});
    const auto& s = j.at("source");
    m.kernel = s.value("kernel", "");
    m.arch = s.value("arch", "");
    m.criu_version = s.value("criu_version", "");
    m.cryo_version = s.value("cryo_version", "");
    if (j.contains("options")) {
      const auto& o = j["options"];
      m.leave_running = o.value("leave_running", false);
      m.tcp_established = o.value("tcp_established", false);
      m.shell_job = o.value("shell_job", false);
    }
    m.labels = j.value("labels", std::map<std::string, std::string>{});
    m.stage_ms = j.value("stage_ms", std::map<std::string, uint64_t>{});
    m.checksum_algorithm = j.value("checksum_algorithm", "");
    for (const auto& f : j.at("files")) {
      ManifestFile mf{f.at("path").get<std::string>(), f.at("size").get<uint64_t>(),
                      f.at("checksum").get<std::string>()};
      if (!SafeRelativePath(mf.path)) {
        return absl::InvalidArgumentError(
            absl::StrCat("manifest lists an unsafe file path '", mf.path, "'"));
      }
      m.files.push_back(std::move(mf));
    }
    m.gpu = j.value("gpu", nlohmann::json());
    m.gpu_processes = j.value("gpu_processes", nlohmann::json());
    m.container = j.value("container", nlohmann::json());
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("manifest is malformed: ", e.what()));
  }
  if (m.root_pid <= 0) return absl::InvalidArgumentError("manifest has no root pid");
  return m;
}

}  // namespace cryo::store
