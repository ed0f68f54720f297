#include "daemon/termination/http_client.h"

#include <curl/curl.h>

#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "lib/base/status.h"

namespace cryo::termination {
namespace {

struct Transfer {
  HttpResponse response;
  size_t max_response = 0;
  bool too_large = false;
};

size_t OnBody(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t len = size * n;
  if (t->response.body.size() + len > t->max_response) {
    t->too_large = true;
    return 0;  // aborts the transfer
  }
  t->response.body.append(data, len);
  return len;
}

size_t OnHeader(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  absl::string_view line(data, size * n);
  // A new status line (after a 100 Continue, say) starts the headers afresh.
  if (absl::StartsWith(line, "HTTP/")) t->response.headers.clear();
  size_t colon = line.find(':');
  if (colon != absl::string_view::npos) {
    t->response.headers[absl::AsciiStrToLower(absl::StripAsciiWhitespace(line.substr(0, colon)))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return size * n;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_NOTHING); });
}

}  // namespace

std::string HttpResponse::Header(const std::string& name) const {
  auto it = headers.find(name);
  return it == headers.end() ? "" : it->second;
}

absl::Status HttpStatusError(const HttpRequest& request, const HttpResponse& response) {
  // Enough of the body to recognise the server's complaint, on one line.
  std::string body = absl::CEscape(absl::StripAsciiWhitespace(response.body).substr(0, 120));
  std::string msg = absl::StrCat(request.method, " ", request.url, ": HTTP ", response.status,
                                 body.empty() ? "" : ": ", body);
  if (response.status >= 500) return absl::UnavailableError(msg);
  if (response.status == 401 || response.status == 403) return absl::PermissionDeniedError(msg);
  return absl::FailedPreconditionError(msg);
}

absl::StatusOr<HttpUrl> ParseHttpUrl(const std::string& url, absl::string_view scheme) {
  const std::string kScheme = absl::StrCat(scheme, "://");
  if (!absl::StartsWithIgnoreCase(url, kScheme)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", url, "' is not an ", kScheme, " URL",
        scheme == "http" ? " (metadata endpoints are plain http)" : " (this client checks TLS)"));
  }
  absl::string_view rest = absl::string_view(url).substr(kScheme.size());
  size_t slash = rest.find_first_of("/?");
  HttpUrl out;
  out.authority = std::string(rest.substr(0, slash));
  out.target = slash == absl::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (out.target[0] == '?') out.target = "/" + out.target;
  absl::string_view auth = out.authority;
  if (auth.empty() || absl::StrContains(auth, '@')) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad host"));
  }
  absl::string_view port;
  if (auth[0] == '[') {
    size_t close = auth.find(']');
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad IPv6 host"));
    }
    out.host = std::string(auth.substr(1, close - 1));
    absl::string_view after = auth.substr(close + 1);
    if (!after.empty()) {
      if (after[0] != ':') return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad host"));
      port = after.substr(1);
    }
  } else {
    size_t colon = auth.find(':');
    out.host = std::string(auth.substr(0, colon));
    if (colon != absl::string_view::npos) port = auth.substr(colon + 1);
  }
  int port_num = scheme == "https" ? 443 : 80;
  if (!port.empty() && (!absl::SimpleAtoi(port, &port_num) || port_num <= 0 || port_num > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad port"));
  }
  if (out.host.empty()) return absl::InvalidArgumentError(absl::StrCat("'", url, "': no host"));
  out.port = std::to_string(port_num);
  return out;
}

absl::StatusOr<std::unique_ptr<CurlHttpClient>> CurlHttpClient::Create(absl::Duration timeout) {
  Options o;
  o.timeout = timeout;
  return Create(std::move(o));
}

absl::StatusOr<std::unique_ptr<CurlHttpClient>> CurlHttpClient::Create(Options options) {
  GlobalInit();
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("an HTTP client needs a positive timeout");
  }
  return std::unique_ptr<CurlHttpClient>(new CurlHttpClient(std::move(options)));
}

CurlHttpClient::~CurlHttpClient() { Shutdown(); }

void CurlHttpClient::Shutdown() {
  absl::MutexLock l(&mu_);
  shut_ = true;
  for (void* m : in_flight_) curl_multi_wakeup(static_cast<CURLM*>(m));
}

absl::StatusOr<HttpResponse> CurlHttpClient::Send(const HttpRequest& request) {
  // The URL is checked by our own rules first: the one scheme allowed, no credentials in it.
  const bool https = !o_.https_ca_file.empty();
  if (auto u = ParseHttpUrl(request.url, https ? "https" : "http"); !u.ok()) return u.status();
  CURL* e = curl_easy_init();
  CURLM* m = curl_multi_init();
  if (e == nullptr || m == nullptr) {
    if (e) curl_easy_cleanup(e);
    if (m) curl_multi_cleanup(m);
    return absl::ResourceExhaustedError("libcurl: out of memory");
  }
  curl_slist* headers = nullptr;
  for (const auto& [k, v] : request.headers) {
    headers = curl_slist_append(headers, absl::StrCat(k, ": ", v).c_str());
  }
  // No default content type on a PUT or POST: metadata servers want exactly what we send.
  headers = curl_slist_append(headers, "Content-Type:");
  headers = curl_slist_append(headers, "Expect:");
  Transfer t;
  t.max_response = o_.max_response;
  char err[CURL_ERROR_SIZE] = {0};
  curl_easy_setopt(e, CURLOPT_URL, request.url.c_str());
  curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, request.method.c_str());
  if (request.method != "GET" && request.method != "HEAD") {
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, static_cast<long>(request.body.size()));
    curl_easy_setopt(e, CURLOPT_COPYPOSTFIELDS, request.body.c_str());
  }
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
  // A metadata request must never go through a proxy from the environment, nor anywhere but
  // where it was sent.
  curl_easy_setopt(e, CURLOPT_PROXY, "");
  curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, https ? "https" : "http");
  if (https) {
    curl_easy_setopt(e, CURLOPT_CAINFO, o_.https_ca_file.c_str());
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  }
  curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(absl::ToInt64Milliseconds(o_.timeout)));
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, err);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &OnBody);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &OnHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
  curl_multi_add_handle(m, e);
  {
    absl::MutexLock l(&mu_);
    if (shut_) {
      curl_multi_remove_handle(m, e);
      curl_easy_cleanup(e);
      curl_multi_cleanup(m);
      curl_slist_free_all(headers);
      return absl::CancelledError("http client shut down");
    }
    in_flight_.insert(m);
  }
  CURLcode result = CURLE_OK;
  bool cancelled = false;
  for (;;) {
    int running = 0;
    curl_multi_perform(m, &running);
    if (running == 0) {
      int left = 0;
      while (CURLMsg* msg = curl_multi_info_read(m, &left)) {
        if (msg->msg == CURLMSG_DONE) result = msg->data.result;
      }
      break;
    }
    curl_multi_poll(m, nullptr, 0, 1000, nullptr);
    absl::MutexLock l(&mu_);
    if (shut_) {
      cancelled = true;
      break;
    }
  }
  {
    absl::MutexLock l(&mu_);
    in_flight_.erase(m);
  }
  long code = 0;
  curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &code);
  curl_multi_remove_handle(m, e);
  curl_easy_cleanup(e);
  curl_multi_cleanup(m);
  curl_slist_free_all(headers);
  const std::string what = absl::StrCat(request.method, " ", request.url);
  if (cancelled) return absl::CancelledError(absl::StrCat(what, ": http client shut down"));
  if (t.too_large) {
    return absl::UnavailableError(
        absl::StrCat(what, ": answer larger than ", o_.max_response, " bytes"));
  }
  if (result != CURLE_OK) {
    const std::string why = err[0] ? err : curl_easy_strerror(result);
    switch (result) {
      case CURLE_OPERATION_TIMEDOUT:
        return absl::DeadlineExceededError(absl::StrCat(what, ": timed out: ", why));
      case CURLE_URL_MALFORMAT:
        return absl::InvalidArgumentError(absl::StrCat(what, ": ", why));
      default:
        return absl::UnavailableError(absl::StrCat(what, ": ", why));
    }
  }
  t.response.status = static_cast<int>(code);
  return std::move(t.response);
}

}  // namespace cryo::termination
