#include "clients/kubectl/kubectl.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "clients/kubectl/errors.h"
#include "clients/kubectl/objects.h"

namespace cryo::kubectl {
namespace {

std::string Trim(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }

// klog's line prefix ("I1124 10:00:00.123456 ..."): kubectl's log with -v, and its warnings.
bool IsKlogLine(absl::string_view l) {
  return l.size() > 14 && absl::StrContains("IWEF", l[0]) && absl::ascii_isdigit(l[1]) &&
         absl::ascii_isdigit(l[4]) && l[5] == ' ' && l[8] == ':';
}

// kubectl's message without its log lines (when there is anything else).
std::string WithoutLog(const std::string& text) {
  std::vector<absl::string_view> keep;
  for (absl::string_view l : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    if (!IsKlogLine(l)) keep.push_back(l);
  }
  return keep.empty() ? Trim(text) : Trim(absl::StrJoin(keep, "\n"));
}

}  // namespace

KubectlError ClassifyKubectlError(const std::string& stderr_text) {
  KubectlError e;
  e.message = WithoutLog(stderr_text);
  if (e.message.empty()) e.message = "kubectl failed without a message";
  const std::string& m = stderr_text;
  // kubectl's wording for server errors: "Error from server (Reason): message".
  if (auto p = m.find("Error from server ("); p != std::string::npos) {
    auto start = p + 19;
    auto end = m.find(')', start);
    if (end != std::string::npos) e.reason = m.substr(start, end - start);
  }
  if (e.reason == "NotFound") {
    e.kind = KubectlError::kNotFound;
  } else if (e.reason == "Forbidden") {
    e.kind = KubectlError::kForbidden;
  } else if (e.reason == "Unauthorized" || absl::StrContains(m, "You must be logged in") ||
             absl::StrContains(m, "(Unauthorized)")) {
    e.kind = KubectlError::kUnauthorized;
  } else if (!e.reason.empty()) {
    e.kind = KubectlError::kServer;
  } else if (absl::StrContains(m, "Unable to connect to the server") ||
             absl::StrContains(m, "The connection to the server") ||
             absl::StrContains(m, "connection refused") || absl::StrContains(m, "no such host") ||
             absl::StrContains(m, "i/o timeout") || absl::StrContains(m, "dial tcp") ||
             absl::StrContains(m, "TLS handshake timeout")) {
    e.kind = KubectlError::kUnreachable;
  }
  return e;
}

absl::Status KubectlStatus(const KubectlError& e) {
  switch (e.kind) {
    case KubectlError::kUnreachable:
      return Failure(kExitApiUnreachable,
                     absl::StrCat("cannot reach the Kubernetes API server: ", e.message));
    case KubectlError::kUnauthorized:
      return Failure(kExitUnauthorized,
                     absl::StrCat("the API server did not accept your credentials: ", e.message));
    case KubectlError::kForbidden:
      return Failure(
          kExitUnauthorized,
          absl::StrCat("not allowed (see the RBAC section of docs/kubectl.md): ", e.message));
    case KubectlError::kNotFound:
      return absl::NotFoundError(e.message);
    default:
      return absl::UnknownError(e.message);
  }
}

absl::StatusOr<RunOutput> Kubectl::Run(const std::vector<std::string>& args,
                                       const std::string& input) const {
  std::vector<std::string> argv = {o_.kubectl};
  argv.insert(argv.end(), o_.global_flags.begin(), o_.global_flags.end());
  argv.insert(argv.end(), args.begin(), args.end());
  RunOptions ro;
  ro.argv = std::move(argv);
  ro.input = input;
  auto r = cryo::Run(ro);
  if (absl::IsNotFound(r.status()) || absl::IsPermissionDenied(r.status())) {
    return Failure(
        kExitKubectlMissing,
        absl::StrCat("cannot run kubectl (", r.status().message(),
                     "): kubectl cryo makes every API call through your kubectl ($KUBECTL, "
                     "else kubectl on PATH)"));
  }
  if (r.ok() && o_.log != nullptr) *o_.log << r->err;
  return r;
}

absl::StatusOr<nlohmann::json> Kubectl::RunJson(const std::vector<std::string>& args,
                                                const std::string& input) const {
  auto r = Run(args, input);
  if (!r.ok()) return r.status();
  if (r->exit.ShellCode() != 0) return KubectlStatus(ClassifyKubectlError(r->err));
  nlohmann::json j = nlohmann::json::parse(r->out, nullptr, false);
  if (j.is_discarded()) {
    std::string head = r->out.substr(0, 200);
    return absl::DataLossError(
        absl::StrCat("kubectl ", args.empty() ? "" : args[0], " did not answer JSON: ", head));
  }
  return j;
}

absl::StatusOr<nlohmann::json> Kubectl::GetRaw(const std::string& path) const {
  return RunJson({"get", "--raw", path}, "");
}

absl::StatusOr<nlohmann::json> Kubectl::PostRaw(const std::string& path,
                                                const std::string& body) const {
  return RunJson({"create", "--raw", path, "-f", "-"}, body);
}

absl::StatusOr<nlohmann::json> Kubectl::Create(const nlohmann::json& object,
                                               const std::string& namespace_name) const {
  std::vector<std::string> args = {"create", "-f", "-", "-o", "json"};
  if (!namespace_name.empty()) args.push_back("--namespace=" + namespace_name);
  return RunJson(args, object.dump());
}

absl::StatusOr<nlohmann::json> Kubectl::MergePatch(const std::string& resource,
                                                   const std::string& name,
                                                   const std::string& namespace_name,
                                                   const nlohmann::json& patch) const {
  std::vector<std::string> args = {
      "patch", resource + "/" + name, "--type=merge", "--patch=" + patch.dump(), "-o", "json"};
  if (!namespace_name.empty()) args.push_back("--namespace=" + namespace_name);
  return RunJson(args, "");
}

absl::StatusOr<nlohmann::json> Kubectl::ReadObjectFile(const std::string& path) const {
  // `annotate --local` reads JSON or YAML and prints JSON without asking the server. Removing
  // an annotation nobody sets is its no-op; several objects in one file fail to parse below.
  auto j = RunJson(
      {"annotate", "--local", "-f", path, "-o", "json", absl::StrCat(kNoopAnnotation, "-")}, "");
  if (absl::IsDataLoss(j.status())) {
    return absl::InvalidArgumentError(absl::StrCat(path, " must hold exactly one object"));
  }
  return j;
}

std::string Kubectl::ContextNamespace() const {
  auto r = Run({"config", "view", "--minify", "-o", "jsonpath={..namespace}"});
  if (!r.ok() || r->exit.ShellCode() != 0) return "";
  return Trim(r->out);
}

absl::StatusOr<std::string> Kubectl::ClientVersion() const {
  auto j = RunJson({"version", "--client", "-o", "json"}, "");
  if (!j.ok()) return j.status();
  std::string v = j->value("/clientVersion/gitVersion"_json_pointer, "");
  if (v.empty()) return absl::UnknownError("kubectl version --client named no gitVersion");
  return v;
}

absl::StatusOr<bool> Kubectl::HasBuiltin(const std::string& command) const {
  auto r = Run({"help", command});
  if (!r.ok()) return r.status();
  // kubectl answers an unknown topic with "Unknown help topic [`X`]" and its general help,
  // still exiting 0; a built-in gets its own help.
  if (r->exit.ShellCode() != 0) return absl::UnknownError(Trim(r->err));
  return !absl::StrContains(r->out + r->err, "Unknown help topic") && !Trim(r->out).empty();
}

std::string UrlEncode(const std::string& s) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out.push_back(c);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

}  // namespace cryo::kubectl
