#include "daemon/records/gpu_process.h"

#include "absl/strings/str_cat.h"
#include "lib/base/json.h"

namespace cryo::gpu {

namespace {

// The records' tables (lib/base/json_table.h): the one place a field is added.
const json::Table<GpuProcess>& GpuProcessTable() {
  using P = GpuProcess;
  static const json::Table<P> t = {
      json::Member("pid", &P::pid, json::kRequired),
      json::Member("plugin", &P::plugin, json::kRequired),
      json::Member("ns_pid", &P::ns_pid, false, json::Emit::kUnlessEmpty),
      // The plugin's own facts: any object, kept as it is.
      json::Custom<P>(
          "facts", [](const P& p, nlohmann::json& j) { j["facts"] = p.facts; },
          [](const json::Fields& in, P& p) -> absl::Status {
            nlohmann::json v;
            CRYO_RETURN_IF_ERROR(in.Any("facts", &v));
            if (v.is_null()) return absl::OkStatus();
            if (!v.is_object()) {
              return absl::InvalidArgumentError(
                  absl::StrCat(in.Where("facts"), " is not an object"));
            }
            p.facts = std::move(v);
            return absl::OkStatus();
          }),
  };
  return t;
}

const json::Table<FastpathProcess>& FastpathProcessTable() {
  using P = FastpathProcess;
  using I = FastpathImport;
  static const json::Table<P> t = {
      json::Member("pid", &P::pid, json::kRequired),
      json::Member("ns_pid", &P::ns_pid, json::kRequired),
      json::Member("files", &P::files),
      json::Member("bytes", &P::bytes),
      json::Member("allocations", &P::allocations),
      json::Member("driver_bytes", &P::driver_bytes),
      json::Member("memory", &P::memory, false, json::Emit::kUnlessEmpty),
      // Where a restore may read the data into GPU memory ahead of the library
      // (docs/proposals/restore-into-gpu.md).
      json::Member("device", &P::device, false, json::Emit::kUnlessEmpty),
      json::Records(
          "imports", &P::imports,
          {json::Member("id", &I::id, json::kRequired),
           json::Member("from", &I::from, json::kRequired),
           json::Member("export", &I::export_id, json::kRequired)},
          false,
          [](const I& i, const std::string& where) {
            return i.from > 0
                       ? absl::OkStatus()
                       : absl::InvalidArgumentError(absl::StrCat(where, ": from out of range"));
          },
          json::Emit::kUnlessEmpty),
  };
  return t;
}

absl::Status Check(const GpuProcess& p, const std::string& where) {
  if (p.pid <= 0 || p.plugin.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " has no pid or plugin"));
  }
  return absl::OkStatus();
}

absl::Status Check(const FastpathProcess& p, const std::string& where) {
  // The files' names come from these numbers: bound them.
  if (p.pid <= 0 || p.ns_pid <= 0 || p.files < 0 || p.files > 64) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": pid, ns_pid or files out of range"));
  }
  // A PCI bus id ("0000:18:00.0"): it is given to the parking process's command line.
  if (p.device.size() > 32 ||
      p.device.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": device is not a PCI bus id"));
  }
  if (p.imports.size() > 4096) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": imports is not a short list"));
  }
  return absl::OkStatus();
}

template <typename P>
absl::StatusOr<std::vector<P>> ListFromJson(const nlohmann::json& j, const char* name,
                                            const json::Table<P>& table) {
  std::vector<P> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return absl::InvalidArgumentError(absl::StrCat(name, " is not an array"));
  CRYO_RETURN_IF_ERROR(json::ReadList<P>(
      j, name, table, [](const P& p, const std::string& where) { return Check(p, where); }, &out));
  return out;
}

}  // namespace

nlohmann::json ToJson(const std::vector<GpuProcess>& procs) {
  return json::WriteList(procs, GpuProcessTable());
}

absl::StatusOr<std::vector<GpuProcess>> GpuProcessesFromJson(const nlohmann::json& j) {
  return ListFromJson(j, "gpu_processes", GpuProcessTable());
}

nlohmann::json ToJson(const std::vector<FastpathProcess>& procs) {
  return json::WriteList(procs, FastpathProcessTable());
}

absl::StatusOr<std::vector<FastpathProcess>> FastpathProcessesFromJson(const nlohmann::json& j) {
  return ListFromJson(j, "gpu_fastpath", FastpathProcessTable());
}

}  // namespace cryo::gpu
