// kubectl cryo list: the checkpoints in cryo's stores.

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

// ---- list

absl::Status List(Ctx& c, const std::vector<std::string>& pos) {
  if (!pos.empty()) return Failure(kExitUsage, "list takes no arguments");
  // kubectl's rule: -A wins over -n.
  const std::string ns = c.o.all_namespaces ? "" : c.Namespace();
  auto cryods = FindCryods(c, c.o.node);
  if (!cryods.ok()) return cryods.status();
  std::string path = kCryodCheckpointsPath;
  if (!c.o.workload.empty()) absl::StrAppend(&path, "?workload=", UrlEncode(c.o.workload));
  std::vector<json> lists;
  std::vector<std::string> problems;
  for (const Cryod& d : *cryods) {
    auto r = CryodGet(c, d, path);
    if (Fatal(r.status())) return r.status();
    if (r.ok() && r->is_array()) {
      lists.push_back(std::move(*r));
    } else {
      problems.push_back(absl::StrCat(
          d.describe, ": ",
          r.ok() ? "answered something other than a list" : std::string(r.status().message()),
          r.ok() ? "" : NoAnswerHint(c, d)));
    }
  }
  for (const auto& p : problems) c.err << "warning: " << p << "\n";
  if (lists.empty()) {
    return Failure(kExitCryodFailed,
                   absl::StrCat("no cryod answered (", problems.size(), " asked)"));
  }
  json items = json::array();
  for (auto& ck : MergeCheckpoints(lists)) {
    if (ns.empty() || SourceOf(ck).namespace_name == ns) items.push_back(std::move(ck));
  }
  if (c.Structured()) {
    c.Print(KubeList(items));
    return absl::OkStatus();
  }
  if (c.o.output == Output::kName) {
    for (const auto& ck : items) c.out << "checkpoint/" << Str(ck, "/checkpoint_id") << "\n";
    return absl::OkStatus();
  }
  if (items.empty()) {
    c.err << (ns.empty() ? "No checkpoints found.\n"
                         : absl::StrCat("No checkpoints found in ", ns, " namespace.\n"));
    return absl::OkStatus();
  }
  const bool all = ns.empty();
  const bool wide = c.o.output == Output::kWide;
  // REASON tells periodic checkpoints from those taken at a stop (preemption) or on demand.
  std::vector<std::string> head = {"ID", "WORKLOAD", "POD", "NODE", "SIZE", "AGE", "REASON"};
  if (all) head.insert(head.begin(), "NAMESPACE");
  if (wide) head.insert(head.end(), {"KIND", "FILES", "CREATED"});
  std::vector<std::vector<std::string>> rows = {head};
  const absl::Time now = absl::Now();
  const std::string reason_label = contract::Key(c.o.prefix, contract::label::kReason);
  for (const auto& ck : items) {
    const absl::Time t = human::ParseRfc3339(Str(ck, "/created_at"));
    const PodRef src = SourceOf(ck);
    std::vector<std::string> row = {
        Str(ck, "/checkpoint_id"),
        Str(ck, "/workload"),
        src.pod.empty() ? "-"
                        : absl::StrCat(src.pod, "/", src.container.empty() ? "?" : src.container),
        Str(ck, "/node_name"),
        human::SizeCell(U64(ck.value("size_bytes", json())),
                        U64(ck.value("referenced_bytes", json()))),
        t == absl::InfinitePast() ? "?" : human::Age(now - t)};
    const json labels = ck.value("labels", json::object());
    const json reason = labels.is_object() ? labels.value(reason_label, json()) : json();
    row.push_back(reason.is_string() ? reason.get<std::string>() : "-");
    if (all) row.insert(row.begin(), src.namespace_name.empty() ? "-" : src.namespace_name);
    if (wide) {
      row.insert(row.end(), {Str(ck, "/kind"), absl::StrCat(U64(ck.value("file_count", json()))),
                             Str(ck, "/created_at")});
    }
    for (auto& cell : row) cell = cell.empty() ? "-" : human::Printable(cell);
    rows.push_back(std::move(row));
  }
  c.out << human::Table(rows);
  return absl::OkStatus();
}

}  // namespace cryo::kubectl
