#include "daemon/termination/azure.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "lib/base/json.h"
#include "lib/base/log.h"
#include "lib/base/status.h"
#include "nlohmann/json.hpp"

namespace cryo::termination {
namespace {

const std::vector<std::pair<std::string, std::string>> kHeaders = {{"Metadata", "true"}};

std::string StringField(const nlohmann::json& j, const char* name) {
  auto it = j.find(name);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

}  // namespace

AzureEventsProvider::AzureEventsProvider(std::shared_ptr<HttpClient> http, Clock* clock,
                                         AzureOptions options)
    : http_(std::move(http)),
      clock_(clock),
      events_url_(std::move(options.events_url)),
      name_url_(std::move(options.name_url)),
      vm_name_(std::move(options.vm_name)) {
  if (name_url_.empty()) {
    // The name lives on the same metadata server as the events.
    auto url = ParseHttpUrl(events_url_);
    if (url.ok()) name_url_ = absl::StrCat("http://", url->authority, kAzureNamePath);
  }
}

void AzureEventsProvider::LearnName() {
  if (!vm_name_.empty() || name_url_.empty()) return;
  HttpRequest req;
  req.url = name_url_;
  req.headers = kHeaders;
  auto resp = http_->Send(req);
  absl::Status why;
  if (!resp.ok()) {
    why = resp.status();
  } else if (resp->status != 200) {
    why = HttpStatusError(req, *resp);
  } else {
    std::string name(absl::StripAsciiWhitespace(resp->body));
    // VM names are short and have no spaces; anything else is not the plain-text answer.
    if (!name.empty() && name.size() <= 128 && !absl::StrContains(name, ' ') &&
        !absl::StrContains(name, '<')) {
      vm_name_ = name;
      CRYO_LOG(Info) << "azure: this VM is '" << vm_name_ << "'";
      return;
    }
    why = absl::FailedPreconditionError(absl::StrCat(name_url_, ": unexpected answer"));
  }
  if (!warned_no_name_ && !absl::IsCancelled(why)) {
    CRYO_LOG(Warning) << "azure: cannot learn this VM's name (" << why.message()
                      << "); every Preempt, Terminate, Reboot or Redeploy event counts until it "
                         "is known";
    warned_no_name_ = true;
  }
}

absl::StatusOr<std::vector<Notice>> AzureEventsProvider::Poll() {
  LearnName();
  HttpRequest req;
  req.url = events_url_;
  req.headers = kHeaders;
  CRYO_ASSIGN_OR_RETURN(HttpResponse resp, http_->Send(req));
  if (resp.status != 200) return HttpStatusError(req, resp);
  // Bounded: the answer comes over the network, from whatever answers at that address.
  auto doc = json::Parse(resp.body, {kMaxMetadataBytes, kMaxMetadataDepth});
  const nlohmann::json* events = nullptr;
  if (doc.ok() && doc->is_object()) {
    auto e = json::Fields(*doc, "").Array("Events", /*required=*/true);
    if (e.ok()) events = *e;
  }
  if (events == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        events_url_, ": not a Scheduled Events document: '", resp.body.substr(0, 120), "'"));
  }
  std::vector<Notice> out;
  for (const auto& ev : *events) {
    if (!ev.is_object()) continue;
    const std::string type = StringField(ev, "EventType");
    std::string kind;
    if (type == "Preempt") {
      kind = "preempt";
    } else if (type == "Terminate") {
      kind = "terminate";
    } else if (type == "Reboot") {
      kind = "reboot";  // the VM restarts: every process is gone
    } else if (type == "Redeploy") {
      kind = "redeploy";  // the VM moves to another host, booted afresh: every process is gone
    } else {
      continue;  // Freeze pauses the VM for seconds and keeps its memory
    }
    std::vector<std::string> resources;
    if (auto it = ev.find("Resources"); it != ev.end() && it->is_array()) {
      for (const auto& r : *it) {
        if (r.is_string()) resources.push_back(r.get<std::string>());
      }
    }
    // Resources empty or the name unknown: cannot tell it is not ours, so it counts.
    bool ours = vm_name_.empty() || resources.empty();
    for (const auto& r : resources) ours = ours || absl::EqualsIgnoreCase(r, vm_name_);
    if (!ours) continue;

    const std::string status = StringField(ev, "EventStatus");
    const std::string not_before = StringField(ev, "NotBefore");
    std::string event_id = StringField(ev, "EventId");
    // An id is always sent; without one, type and time stand in so the notice stays stable.
    if (event_id.empty()) event_id = absl::StrCat(type, "@", not_before);
    Notice n;
    n.provider = "azure";
    n.kind = kind;
    n.id = "azure/" + event_id;
    std::string err;
    absl::Time when;
    if (!not_before.empty() && absl::ParseTime("%a, %d %b %Y %H:%M:%S GMT", not_before,
                                               absl::UTCTimeZone(), &when, &err)) {
      n.deadline = when;
    } else if (status == "Started") {
      n.deadline = clock_->Now();  // under way: Azure clears NotBefore then
    } else {
      n.deadline = absl::InfiniteFuture();
      if (!not_before.empty()) {
        CRYO_LOG(Warning) << "azure: event " << event_id << " NotBefore '" << not_before
                          << "' unreadable: " << err;
      }
    }
    n.detail = absl::StrCat("Azure ", type, " event ", event_id, " (", status, ") for ",
                            absl::StrJoin(resources, ","), " not before ",
                            not_before.empty() ? "-" : not_before);
    if (std::string d = StringField(ev, "Description"); !d.empty()) {
      absl::StrAppend(&n.detail, ": ", d);
    }
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace cryo::termination
