// kubectl cryo list: the checkpoints in cryo's stores.

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
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

namespace {

// One requirement of a label selector, kubectl's equality-based forms.
struct Requirement {
  std::string key;
  enum Op { kEquals, kNotEquals, kExists, kNotExists } op;
  std::string value;
};

absl::StatusOr<std::vector<Requirement>> ParseSelector(absl::string_view text) {
  std::vector<Requirement> out;
  if (absl::StripAsciiWhitespace(text).empty()) return out;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    part = absl::StripAsciiWhitespace(part);
    Requirement r;
    if (size_t i = part.find("!="); i != absl::string_view::npos) {
      r = {std::string(part.substr(0, i)), Requirement::kNotEquals,
           std::string(part.substr(i + 2))};
    } else if (size_t j = part.find("=="); j != absl::string_view::npos) {
      r = {std::string(part.substr(0, j)), Requirement::kEquals, std::string(part.substr(j + 2))};
    } else if (size_t k = part.find('='); k != absl::string_view::npos) {
      r = {std::string(part.substr(0, k)), Requirement::kEquals, std::string(part.substr(k + 1))};
    } else if (absl::ConsumePrefix(&part, "!")) {
      r = {std::string(part), Requirement::kNotExists, ""};
    } else {
      r = {std::string(part), Requirement::kExists, ""};
    }
    r.key = std::string(absl::StripAsciiWhitespace(r.key));
    r.value = std::string(absl::StripAsciiWhitespace(r.value));
    if (r.key.empty() || absl::StrContains(r.key, " ") || absl::StrContains(r.key, "(") ||
        absl::StrContains(r.value, "(")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "-l/--selector: '", part,
          "' is not a requirement this plugin reads (k=v, k==v, k!=v, k or !k; set-based "
          "'in (...)' is not supported)"));
    }
    out.push_back(std::move(r));
  }
  return out;
}

bool Matches(const json& checkpoint, const std::vector<Requirement>& selector) {
  const json labels = checkpoint.value("labels", json::object());
  for (const Requirement& r : selector) {
    const bool has = labels.is_object() && labels.contains(r.key) && labels[r.key].is_string();
    const std::string v = has ? labels[r.key].get<std::string>() : "";
    switch (r.op) {
      case Requirement::kEquals:
        if (!has || v != r.value) return false;
        break;
      case Requirement::kNotEquals:  // kubectl's meaning: a missing label is not equal
        if (has && v == r.value) return false;
        break;
      case Requirement::kExists:
        if (!has) return false;
        break;
      case Requirement::kNotExists:
        if (has) return false;
        break;
    }
  }
  return true;
}

}  // namespace

absl::Status List(Ctx& c, const std::vector<std::string>& pos) {
  if (!pos.empty()) return Failure(kExitUsage, "list takes no arguments");
  auto selector = ParseSelector(c.o.selector);
  if (!selector.ok()) return Failure(kExitUsage, std::string(selector.status().message()));
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
    if ((ns.empty() || SourceOf(ck).namespace_name == ns) && Matches(ck, *selector)) {
      items.push_back(std::move(ck));
    }
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
  std::vector<std::vector<std::string>> rows;
  if (!c.o.no_headers) rows.push_back(head);
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
