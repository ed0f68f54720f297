#include "daemon/termination/gce.h"

#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "lib/base/status.h"

namespace cryo::termination {
namespace {

std::string WithSlash(std::string base) {
  if (base.empty() || base.back() != '/') base += '/';
  return base;
}

// GETs one metadata value; the trimmed body of a 200, an error otherwise.
absl::StatusOr<std::string> GetValue(HttpClient& http, const std::string& url) {
  HttpRequest req;
  req.url = url;
  req.headers = {{"Metadata-Flavor", "Google"}};
  CRYO_ASSIGN_OR_RETURN(HttpResponse resp, http.Send(req));
  if (resp.status != 200) return HttpStatusError(req, resp);
  // A proxy or captive portal answers 200 too, but never with this header.
  if (resp.Header("metadata-flavor") != "" && resp.Header("metadata-flavor") != "Google") {
    return absl::FailedPreconditionError(
        absl::StrCat("GET ", url, ": answer is not from the GCE metadata server"));
  }
  return std::string(absl::StripAsciiWhitespace(resp.body));
}

absl::Status BadAnswer(const std::string& url, const std::string& value) {
  return absl::FailedPreconditionError(
      absl::StrCat("GET ", url, ": unexpected answer '", absl::CEscape(value.substr(0, 80)), "'"));
}

}  // namespace

GcePreemptedProvider::GcePreemptedProvider(std::shared_ptr<HttpClient> http, std::string base_url)
    : http_(std::move(http)), url_(WithSlash(std::move(base_url)) + "preempted") {}

absl::StatusOr<std::vector<Notice>> GcePreemptedProvider::Poll() {
  CRYO_ASSIGN_OR_RETURN(std::string value, GetValue(*http_, url_));
  if (value == "FALSE") return std::vector<Notice>{};
  if (value != "TRUE") return BadAnswer(url_, value);
  Notice n;
  n.provider = "gce";
  n.kind = "preempt";
  n.id = "gce/preempted";
  n.detail = "GCE is preempting this VM (about 30 s before it stops)";
  return std::vector<Notice>{n};
}

GceMaintenanceProvider::GceMaintenanceProvider(std::shared_ptr<HttpClient> http,
                                               std::string base_url)
    : http_(std::move(http)), url_(WithSlash(std::move(base_url)) + "maintenance-event") {}

absl::StatusOr<std::vector<Notice>> GceMaintenanceProvider::Poll() {
  CRYO_ASSIGN_OR_RETURN(std::string value, GetValue(*http_, url_));
  // Values are upper-case identifiers; anything else (an HTML page, empty) is not an answer.
  if (value.empty()) return BadAnswer(url_, value);
  for (char c : value) {
    if (!absl::ascii_isupper(c) && c != '_') return BadAnswer(url_, value);
  }
  // NONE, MIGRATE_ON_HOST_MAINTENANCE (live migration: the VM keeps running) and values added
  // later are not a termination.
  if (value != "TERMINATE_ON_HOST_MAINTENANCE") return std::vector<Notice>{};
  Notice n;
  n.provider = "gce";
  n.kind = "maintenance-terminate";
  n.id = "gce/maintenance-event/" + value;
  n.detail = "GCE host maintenance will stop this VM (" + value + ")";
  return std::vector<Notice>{n};
}

}  // namespace cryo::termination
