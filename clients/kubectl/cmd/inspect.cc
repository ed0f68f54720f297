// kubectl cryo inspect ID: one checkpoint.

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "clients/kubectl/context.h"
#include "clients/kubectl/errors.h"
#include "clients/kubectl/kubectl.h"
#include "clients/kubectl/objects.h"
#include "lib/base/flags.h"
#include "lib/base/human.h"
#include "lib/base/ids.h"
#include "lib/contract/annotations.h"
#include "lib/contract/labels.h"

namespace cryo::kubectl {

// ---- inspect ID

std::string JoinMs(const json& stage_ms) {
  std::vector<std::string> parts;
  if (stage_ms.is_object()) {
    for (auto it = stage_ms.begin(); it != stage_ms.end(); ++it) {
      parts.push_back(absl::StrCat(it.key(), " ", U64(it.value()), "ms"));
    }
  }
  return parts.empty() ? "-" : absl::StrJoin(parts, ", ");
}

absl::Status Inspect(Ctx& c, const std::vector<std::string>& pos) {
  if (pos.size() != 1) return Failure(kExitUsage, "inspect takes one checkpoint ID");
  auto ck = FetchCheckpoint(c, pos[0], c.o.node);
  if (!ck.ok()) return ck.status();
  const json& j = *ck;
  if (c.Structured()) {
    c.Print(j);
    return absl::OkStatus();
  }
  if (c.o.output == Output::kName) {
    c.out << "checkpoint/" << Str(j, "/checkpoint_id") << "\n";
    return absl::OkStatus();
  }
  const json m = j.value("manifest", json::object());
  auto line = [&c](const std::string& k, const std::string& v) {
    if (v.empty()) return;
    c.out << k << std::string(k.size() < 12 ? 12 - k.size() : 1, ' ') << human::Printable(v)
          << "\n";
  };
  const absl::Time t = human::ParseRfc3339(Str(j, "/created_at"));
  std::string command = Str(j, "/command");
  if (m.contains("target") && m["target"].contains("cmdline") &&
      m["target"]["cmdline"].is_array() && !m["target"]["cmdline"].empty()) {
    std::vector<std::string> argv;
    for (const auto& a : m["target"]["cmdline"]) {
      if (a.is_string()) argv.push_back(a.get<std::string>());
    }
    command = absl::StrJoin(argv, " ");
  }
  size_t processes = j.contains("pids") && j["pids"].is_array() ? j["pids"].size() : 0;
  line("ID:", Str(j, "/checkpoint_id"));
  line("Workload:", Str(j, "/workload"));
  line("Kind:", Str(j, "/kind"));
  line("Pod:", SourceOf(j).ToString());
  line("Node:", Str(j, "/node_name"));
  line("Created:",
       absl::StrCat(Str(j, "/created_at"),
                    t == absl::InfinitePast() ? "" : " (" + human::Age(absl::Now() - t) + " ago)"));
  line("Command:", absl::StrCat(command, " (pid ", U64(j.value("root_pid", json())), ", ",
                                processes, processes == 1 ? " process)" : " processes)"));
  line("Size:", absl::StrCat(human::Bytes(U64(j.value("size_bytes", json()))), " in ",
                             U64(j.value("file_count", json())), " files"));
  std::vector<std::string> source;
  if (auto k = Str(m, "/source/kernel"); !k.empty()) source.push_back("kernel " + k);
  if (auto a = Str(m, "/source/arch"); !a.empty()) source.push_back(a);
  if (auto v = Str(m, "/source/criu_version"); !v.empty()) source.push_back("CRIU " + v);
  if (auto v = Str(m, "/source/cryo_version"); !v.empty()) source.push_back("cryo " + v);
  line("Source:", absl::StrJoin(source, ", "));
  line("Image:", Str(m, "/container/image"));
  if (m.contains("gpu") && m["gpu"].is_object() && !m["gpu"].empty()) {
    std::vector<std::string> plugins;
    for (auto it = m["gpu"].begin(); it != m["gpu"].end(); ++it) plugins.push_back(it.key());
    size_t n = m.contains("gpu_processes") && m["gpu_processes"].is_array()
                   ? m["gpu_processes"].size()
                   : 0;
    line("GPU:", absl::StrCat(absl::StrJoin(plugins, ", "), " (", n,
                              n == 1 ? " GPU process)" : " GPU processes)"));
  }
  std::vector<std::string> options;
  if (m.value("/options/leave_running"_json_pointer, false)) options.push_back("left running");
  if (m.value("/options/tcp_established"_json_pointer, false)) options.push_back("established TCP");
  if (m.value("/options/shell_job"_json_pointer, false)) options.push_back("shell job");
  line("Options:", absl::StrJoin(options, ", "));
  line("Stages:", JoinMs(j.value("stage_ms", json::object())));
  line("Store:", Str(j, "/store_path"));
  const json labels = j.value("labels", json::object());
  bool first = true;
  for (auto it = labels.begin(); it != labels.end(); ++it) {
    if (!it.value().is_string()) continue;
    line(first ? "Labels:" : " ", absl::StrCat(it.key(), "=", it.value().get<std::string>()));
    first = false;
  }
  return absl::OkStatus();
}

}  // namespace cryo::kubectl
