#include "daemon/records/gpu_process.h"

#include "absl/strings/str_cat.h"
#include "lib/base/json.h"

namespace cryo::gpu {

nlohmann::json ToJson(const std::vector<GpuProcess>& procs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : procs) {
    nlohmann::json e = {{"pid", p.pid}, {"plugin", p.plugin}, {"facts", p.facts}};
    if (p.ns_pid > 0) e["ns_pid"] = p.ns_pid;
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<GpuProcess>> GpuProcessesFromJson(const nlohmann::json& j) {
  std::vector<GpuProcess> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return absl::InvalidArgumentError("gpu_processes is not an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const nlohmann::json& e = j[i];
    const std::string where = absl::StrCat("gpu_processes[", i, "]");
    if (!e.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
    json::Fields f(e, where);
    GpuProcess p;
    int pid = 0, ns_pid = 0;
    if (absl::Status s = f.Int("pid", &pid, true); !s.ok()) return s;
    if (absl::Status s = f.Str("plugin", &p.plugin, true); !s.ok()) return s;
    if (absl::Status s = f.Int("ns_pid", &ns_pid); !s.ok()) return s;
    if (pid <= 0 || p.plugin.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has no pid or plugin"));
    }
    p.pid = pid;
    p.ns_pid = ns_pid;
    if (e.contains("facts") && !e["facts"].is_null()) {
      if (!e["facts"].is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ".facts is not an object"));
      }
      p.facts = e["facts"];
    }
    out.push_back(std::move(p));
  }
  return out;
}

nlohmann::json ToJson(const std::vector<FastpathProcess>& procs) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& p : procs) {
    nlohmann::json e = {
        {"pid", p.pid},     {"ns_pid", p.ns_pid},           {"files", p.files},
        {"bytes", p.bytes}, {"allocations", p.allocations}, {"driver_bytes", p.driver_bytes}};
    if (p.memory) e["memory"] = true;
    if (!p.imports.empty()) {
      nlohmann::json imports = nlohmann::json::array();
      for (const auto& i : p.imports) {
        imports.push_back({{"id", i.id}, {"from", i.from}, {"export", i.export_id}});
      }
      e["imports"] = std::move(imports);
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<std::vector<FastpathProcess>> FastpathProcessesFromJson(const nlohmann::json& j) {
  std::vector<FastpathProcess> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return absl::InvalidArgumentError("gpu_fastpath is not an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const std::string where = absl::StrCat("gpu_fastpath[", i, "]");
    if (!j[i].is_object())
      return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
    json::Fields f(j[i], where);
    FastpathProcess p;
    int pid = 0, ns_pid = 0;
    if (absl::Status s = f.Int("pid", &pid, true); !s.ok()) return s;
    if (absl::Status s = f.Int("ns_pid", &ns_pid, true); !s.ok()) return s;
    if (absl::Status s = f.Int("files", &p.files); !s.ok()) return s;
    if (absl::Status s = f.Uint64("bytes", &p.bytes); !s.ok()) return s;
    if (absl::Status s = f.Uint64("allocations", &p.allocations); !s.ok()) return s;
    if (absl::Status s = f.Uint64("driver_bytes", &p.driver_bytes); !s.ok()) return s;
    if (absl::Status s = f.Bool("memory", &p.memory); !s.ok()) return s;
    // The files' names come from these numbers: bound them.
    if (pid <= 0 || ns_pid <= 0 || p.files < 0 || p.files > 64) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": pid, ns_pid or files out of range"));
    }
    p.pid = pid;
    p.ns_pid = ns_pid;
    if (auto it = j[i].find("imports"); it != j[i].end()) {
      if (!it->is_array() || it->size() > 4096) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": imports is not a short list"));
      }
      for (size_t k = 0; k < it->size(); ++k) {
        const std::string at = absl::StrCat(where, ".imports[", k, "]");
        if (!(*it)[k].is_object()) {
          return absl::InvalidArgumentError(absl::StrCat(at, " is not an object"));
        }
        json::Fields g((*it)[k], at);
        FastpathImport imp;
        int from = 0;
        if (absl::Status s = g.Uint64("id", &imp.id, true); !s.ok()) return s;
        if (absl::Status s = g.Int("from", &from, true); !s.ok()) return s;
        if (absl::Status s = g.Uint64("export", &imp.export_id, true); !s.ok()) return s;
        if (from <= 0) return absl::InvalidArgumentError(absl::StrCat(at, ": from out of range"));
        imp.from = from;
        p.imports.push_back(imp);
      }
    }
    out.push_back(p);
  }
  return out;
}

}  // namespace cryo::gpu
