#include "daemon/termination/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "lib/base/status.h"

namespace cryo::termination {
namespace {

// Metadata answers are a few hundred bytes; anything near this is not a metadata server.
constexpr size_t kMaxResponse = 1 << 20;

// Network failures are UNAVAILABLE (worth retrying), whatever errno says, except timeouts.
absl::Status NetError(int err, absl::string_view what) {
  if (err == ETIMEDOUT) return absl::DeadlineExceededError(absl::StrCat(what, ": timed out"));
  return absl::UnavailableError(absl::StrCat(what, ": ", strerror(err)));
}

// Waits until `fd` is ready for `events`, the deadline passes or the client is shut down.
absl::Status Wait(int fd, short events, int cancel_fd, absl::Time deadline) {
  for (;;) {
    absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError("timed out");
    pollfd p[2] = {{fd, events, 0}, {cancel_fd, POLLIN, 0}};
    // Round up so a sub-millisecond remainder does not spin.
    int ms = static_cast<int>(absl::ToInt64Milliseconds(left)) + 1;
    int n = ::poll(p, 2, ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "poll");
    if (p[1].revents & POLLIN) return absl::CancelledError("http client shut down");
    if (p[0].revents) return absl::OkStatus();
  }
}

// Parses a chunked body from `in`. Sets *complete when the last chunk and trailers are in.
absl::Status DecodeChunked(absl::string_view in, std::string* out, bool* complete) {
  *complete = false;
  out->clear();
  size_t pos = 0;
  for (;;) {
    size_t eol = in.find("\r\n", pos);
    if (eol == absl::string_view::npos) return absl::OkStatus();
    absl::string_view line = in.substr(pos, eol - pos);
    line = line.substr(0, line.find(';'));  // chunk extensions
    line = absl::StripAsciiWhitespace(line);
    uint64_t size = 0;
    if (line.empty() || line.size() > 8 || !absl::SimpleHexAtoi(line, &size)) {
      return absl::UnavailableError("malformed chunked body");
    }
    pos = eol + 2;
    if (size == 0) {
      // Trailers end with an empty line.
      for (;;) {
        size_t e = in.find("\r\n", pos);
        if (e == absl::string_view::npos) return absl::OkStatus();
        if (e == pos) {
          *complete = true;
          return absl::OkStatus();
        }
        pos = e + 2;
      }
    }
    if (in.size() < pos + size + 2) return absl::OkStatus();
    out->append(in.data() + pos, size);
    if (in.substr(pos + size, 2) != "\r\n") return absl::UnavailableError("malformed chunk");
    pos += size + 2;
  }
}

// Parsed response head, once the blank line after the headers has arrived.
struct Head {
  int status = 0;
  std::map<std::string, std::string> headers;
  size_t body_start = 0;
};

absl::StatusOr<bool> ParseHead(absl::string_view data, Head* head) {
  size_t end = data.find("\r\n\r\n");
  if (end == absl::string_view::npos) return false;
  std::vector<absl::string_view> lines = absl::StrSplit(data.substr(0, end), "\r\n");
  // "HTTP/1.1 200 OK"
  std::vector<absl::string_view> status_line = absl::StrSplit(lines[0], absl::MaxSplits(' ', 2));
  if (status_line.size() < 2 || !absl::StartsWith(status_line[0], "HTTP/1.") ||
      !absl::SimpleAtoi(status_line[1], &head->status) || head->status < 100 ||
      head->status > 999) {
    return absl::UnavailableError(
        absl::StrCat("not an HTTP response: '", absl::CEscape(lines[0].substr(0, 80)), "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos) continue;
    head->headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
  }
  head->body_start = end + 4;
  return true;
}

// Whether `data` holds the whole response; fills *out when it does. At EOF (`eof`) a response
// without length or chunking ends there.
absl::StatusOr<bool> TryComplete(absl::string_view data, bool eof, HttpResponse* out) {
  Head head;
  CRYO_ASSIGN_OR_RETURN(bool have_head, ParseHead(data, &head));
  if (!have_head) {
    if (eof) return absl::UnavailableError("connection closed before the response headers");
    return false;
  }
  absl::string_view rest = data.substr(head.body_start);
  auto te = head.headers.find("transfer-encoding");
  auto cl = head.headers.find("content-length");
  std::string body;
  if (head.status == 204 || head.status == 304) {
    // No body by definition.
  } else if (te != head.headers.end() &&
             absl::StrContains(absl::AsciiStrToLower(te->second), "chunked")) {
    bool complete = false;
    CRYO_RETURN_IF_ERROR(DecodeChunked(rest, &body, &complete));
    if (!complete) {
      if (eof) return absl::UnavailableError("connection closed inside a chunked body");
      return false;
    }
  } else if (cl != head.headers.end()) {
    size_t len = 0;
    if (!absl::SimpleAtoi(cl->second, &len) || len > kMaxResponse) {
      return absl::UnavailableError(absl::StrCat("bad Content-Length '", cl->second, "'"));
    }
    if (rest.size() < len) {
      if (eof) return absl::UnavailableError("connection closed inside the body");
      return false;
    }
    body = std::string(rest.substr(0, len));
  } else {
    if (!eof) return false;
    body = std::string(rest);
  }
  out->status = head.status;
  out->headers = std::move(head.headers);
  out->body = std::move(body);
  return true;
}

// Connects to one of the host's addresses within the deadline.
absl::StatusOr<int> Connect(const HttpUrl& url, int cancel_fd, absl::Time deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  int rc = ::getaddrinfo(url.host.c_str(), url.port.c_str(), &hints, &res);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("resolve ", url.host, ": ", gai_strerror(rc)));
  }
  absl::Cleanup free_res = [res] { ::freeaddrinfo(res); };
  absl::Status last = absl::UnavailableError(absl::StrCat("no address for ", url.host));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last = ErrnoStatus(errno, "socket");
      continue;
    }
    absl::Status st;
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        st = NetError(errno, absl::StrCat("connect to ", url.authority));
      } else {
        st = Wait(fd, POLLOUT, cancel_fd, deadline);
        if (st.ok()) {
          int err = 0;
          socklen_t len = sizeof(err);
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          if (err != 0) st = NetError(err, absl::StrCat("connect to ", url.authority));
        } else if (absl::IsDeadlineExceeded(st)) {
          st = absl::DeadlineExceededError(
              absl::StrCat("connect to ", url.authority, ": timed out"));
        }
      }
    }
    if (st.ok()) return fd;
    ::close(fd);
    if (absl::IsCancelled(st) || absl::IsDeadlineExceeded(st)) return st;
    last = st;
  }
  return last;
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

absl::StatusOr<HttpUrl> ParseHttpUrl(const std::string& url) {
  constexpr absl::string_view kScheme = "http://";
  if (!absl::StartsWithIgnoreCase(url, kScheme)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", url, "' is not an http:// URL (metadata endpoints are plain http)"));
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
  int port_num = 80;
  if (!port.empty() && (!absl::SimpleAtoi(port, &port_num) || port_num <= 0 || port_num > 65535)) {
    return absl::InvalidArgumentError(absl::StrCat("'", url, "': bad port"));
  }
  if (out.host.empty()) return absl::InvalidArgumentError(absl::StrCat("'", url, "': no host"));
  out.port = std::to_string(port_num);
  return out;
}

absl::StatusOr<std::unique_ptr<SocketHttpClient>> SocketHttpClient::Create(absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("http request timeout must be positive");
  }
  int fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0) return ErrnoStatus(errno, "eventfd");
  return std::unique_ptr<SocketHttpClient>(new SocketHttpClient(fd, timeout));
}

SocketHttpClient::~SocketHttpClient() { ::close(cancel_fd_); }

void SocketHttpClient::Shutdown() {
  // Never read back: the eventfd stays readable, so every later Wait() sees it too.
  uint64_t one = 1;
  ssize_t unused = ::write(cancel_fd_, &one, sizeof(one));
  (void)unused;
}

absl::StatusOr<HttpResponse> SocketHttpClient::Send(const HttpRequest& request) {
  CRYO_ASSIGN_OR_RETURN(HttpUrl url, ParseHttpUrl(request.url));
  pollfd cancelled = {cancel_fd_, POLLIN, 0};
  if (::poll(&cancelled, 1, 0) > 0) return absl::CancelledError("http client shut down");
  const absl::Time deadline = absl::Now() + timeout_;
  const std::string what = absl::StrCat(request.method, " ", request.url);

  auto fd_or = Connect(url, cancel_fd_, deadline);
  if (!fd_or.ok()) return Annotate(fd_or.status(), what);
  const int fd = *fd_or;
  absl::Cleanup close_fd = [fd] { ::close(fd); };

  std::string out =
      absl::StrCat(request.method, " ", url.target, " HTTP/1.1\r\nHost: ", url.authority, "\r\n");
  for (const auto& [name, value] : request.headers)
    absl::StrAppend(&out, name, ": ", value, "\r\n");
  // Metadata servers want an explicit length on PUT (IMDS answers 411 without one).
  if (!request.body.empty() || request.method != "GET") {
    absl::StrAppend(&out, "Content-Length: ", request.body.size(), "\r\n");
  }
  absl::StrAppend(&out, "Connection: close\r\n\r\n", request.body);

  size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += n;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      CRYO_RETURN_IF_ERROR(Annotate(Wait(fd, POLLOUT, cancel_fd_, deadline), what));
      continue;
    }
    return Annotate(NetError(errno, "send"), what);
  }

  std::string data;
  char buf[8192];
  HttpResponse response;
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      CRYO_RETURN_IF_ERROR(Annotate(Wait(fd, POLLIN, cancel_fd_, deadline), what));
      continue;
    }
    if (n < 0) return Annotate(NetError(errno, "recv"), what);
    data.append(buf, n);
    if (data.size() > kMaxResponse) {
      return Annotate(absl::UnavailableError("response too large"), what);
    }
    auto done = TryComplete(data, /*eof=*/n == 0, &response);
    if (!done.ok()) return Annotate(done.status(), what);
    if (*done) return response;
  }
}

}  // namespace cryo::termination
