#include "plugins/common/device_plan.h"

#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace cryo::gpu {

std::vector<CheckpointedGpu> CheckpointedGpus(const nlohmann::json& section) {
  std::vector<CheckpointedGpu> out;
  if (!section.is_object()) return out;
  auto it = section.find("devices");
  if (it == section.end() || !it->is_array()) return out;
  auto str = [](const nlohmann::json& d, const char* k) {
    auto f = d.find(k);
    return f != d.end() && f->is_string() ? f->get<std::string>() : std::string();
  };
  for (const auto& d : *it) {
    if (!d.is_object()) continue;
    CheckpointedGpu c;
    c.uuid = str(d, "uuid");
    c.name = str(d, "name");
    c.chip = str(d, "chip");
    if (auto m = d.find("memory_used_bytes"); m != d.end() && m->is_number_unsigned()) {
      c.need_bytes = m->get<uint64_t>();
    }
    if (!c.uuid.empty()) out.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveVisibleDevices(
    absl::string_view value, const std::vector<std::string>& base) {
  absl::string_view v = absl::StripAsciiWhitespace(value);
  if (v == "all") return base;
  std::vector<std::string> out;
  if (v.empty() || v == "none" || v == "void" || v == "NoDevFiles") return out;
  for (absl::string_view raw : absl::StrSplit(v, ',')) {
    absl::string_view e = absl::StripAsciiWhitespace(raw);
    if (absl::StartsWith(e, "MIG-")) {
      return absl::FailedPreconditionError(
          absl::StrCat("MIG device ", e, " is visible: the driver cannot checkpoint MIG"));
    }
    int index = 0;
    std::string found;
    if (absl::SimpleAtoi(e, &index)) {
      if (index >= 0 && static_cast<size_t>(index) < base.size()) found = base[index];
    } else if (!e.empty()) {
      int matches = 0;
      for (const std::string& uuid : base) {
        if (absl::StartsWith(uuid, e)) {
          found = uuid;
          ++matches;
        }
      }
      if (matches != 1) found.clear();
    }
    if (found.empty()) break;
    bool dup = false;
    for (const std::string& u : out) dup = dup || u == found;
    if (dup) break;
    out.push_back(found);
  }
  return out;
}

namespace {

std::string Human(uint64_t bytes) { return absl::StrCat(bytes / (1024 * 1024), " MiB"); }

}  // namespace

absl::StatusOr<DeviceMap> PlanDeviceMap(const std::vector<CheckpointedGpu>& checkpointed,
                                        const std::vector<NodeGpu>& node,
                                        const std::optional<std::vector<std::string>>& allowed,
                                        const DeviceMap& requested) {
  std::map<std::string, const NodeGpu*> by_uuid;
  for (const NodeGpu& g : node) by_uuid[g.uuid] = &g;

  DeviceMap map;
  if (!requested.empty()) {
    std::vector<std::string> missing;
    for (const CheckpointedGpu& c : checkpointed) {
      auto it = requested.find(c.uuid);
      if (it == requested.end()) {
        missing.push_back(c.uuid);
      } else {
        map[c.uuid] = it->second;
      }
    }
    if (!missing.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("GPU map lacks checkpointed GPU(s) ",
                                                     absl::StrJoin(missing, ", "),
                                                     ": every checkpointed GPU must be mapped"));
    }
  } else {
    std::vector<std::string> targets;
    if (allowed.has_value()) {
      targets = *allowed;
    } else {
      bool all_here = true;
      for (const CheckpointedGpu& c : checkpointed) all_here = all_here && by_uuid.count(c.uuid);
      if (all_here) {
        for (const CheckpointedGpu& c : checkpointed) targets.push_back(c.uuid);
      } else {
        for (const NodeGpu& g : node) targets.push_back(g.uuid);
      }
    }
    if (targets.size() < checkpointed.size()) {
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint used ", checkpointed.size(),
                       " GPU(s) but the restored job may use ", targets.size(),
                       allowed.has_value() ? " (the GPUs it is given)" : " (GPUs on this node)"));
    }
    for (size_t i = 0; i < checkpointed.size(); ++i) map[checkpointed[i].uuid] = targets[i];
  }

  // Every pair: target exists, not shared, same chip, and fits in free memory.
  std::map<std::string, uint64_t> need_on;
  std::map<std::string, bool> need_unknown;
  std::set<std::string> used;
  for (const CheckpointedGpu& c : checkpointed) {
    const std::string& to = map[c.uuid];
    auto it = by_uuid.find(to);
    if (it == by_uuid.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat("target GPU ", to, " (for ", c.uuid, ") is not on this node"));
    }
    if (!used.insert(to).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("two checkpointed GPUs map onto ", to, ": each needs its own GPU"));
    }
    const NodeGpu& n = *it->second;
    if (!c.chip.empty() && c.chip != n.chip) {
      return absl::FailedPreconditionError(absl::StrCat(
          "GPU chip differs: checkpointed ", c.uuid, " is ", c.chip, " (", c.name, "), target ",
          n.uuid, " is ", n.chip, " (", n.name, "); the driver restores onto the same chip only"));
    }
    if (c.need_bytes.has_value()) {
      need_on[to] += *c.need_bytes;
    } else {
      need_unknown[to] = true;
    }
  }
  for (const auto& [to, need] : need_on) {
    const NodeGpu& n = *by_uuid[to];
    if (n.free_bytes.has_value() && need > *n.free_bytes) {
      return absl::FailedPreconditionError(absl::StrCat("not enough free memory on GPU ", to,
                                                        ": the checkpoint needs ", Human(need),
                                                        ", ", Human(*n.free_bytes), " free"));
    }
  }
  return map;
}

}  // namespace cryo::gpu
