#include "cri-shim/flags.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace cryo::shim {

std::string UsageText() {
  return "usage: cryo-cri-shim [flags]\n"
         "  --listen PATH              unix socket to serve CRI on (default "
         "/run/cryo/cri-shim.sock)\n"
         "  --runtime-endpoint ADDR    containerd/CRI-O socket, unix:///path or /path (default\n"
         "                             unix:///run/containerd/containerd.sock)\n"
         "  --cryod-socket PATH        cryod's socket (default /run/cryo/cryod.sock)\n"
         "  --annotation-prefix P      pod annotations P/checkpoint-on-stop, P/resume, ...\n"
         "                             (default cryo.dev)\n"
         "  --init-path PATH           host path of cryo-init, mounted into opted-in containers\n"
         "                             (default /usr/local/lib/cryo/cryo-init)\n"
         "  --metrics-address H:P      Prometheus endpoint, empty to disable (default "
         "127.0.0.1:9466)\n"
         "  --log-level LEVEL          debug, info, warn or error (default info)\n";
}

absl::StatusOr<std::string> UnixEndpointPath(absl::string_view endpoint) {
  absl::string_view path = endpoint;
  if (absl::ConsumePrefix(&path, "unix://")) {
    // unix:///abs/path: what remains starts with '/'.
  } else if (absl::ConsumePrefix(&path, "unix:")) {
  }
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(absl::StrCat(
        "endpoint \"", endpoint, "\" is not a unix socket (want unix:///path or /path)"));
  }
  return std::string(path);
}

absl::StatusOr<std::string> NormalizeUnixEndpoint(absl::string_view endpoint) {
  absl::StatusOr<std::string> path = UnixEndpointPath(endpoint);
  if (!path.ok()) return path.status();
  return absl::StrCat("unix://", *path);
}

absl::StatusOr<Options> ParseFlags(const std::vector<std::string>& args) {
  Options opts;
  for (size_t i = 0; i < args.size(); ++i) {
    absl::string_view arg = args[i];
    if (arg == "-h" || arg == "--help") {
      opts.show_help = true;
      continue;
    }
    if (!absl::ConsumePrefix(&arg, "--")) {
      return absl::InvalidArgumentError(absl::StrCat("unexpected argument \"", arg, "\""));
    }
    std::string name;
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != absl::string_view::npos) {
      name = std::string(arg.substr(0, eq));
      value = std::string(arg.substr(eq + 1));
      has_value = true;
    } else {
      name = std::string(arg);
    }
    name = absl::StrReplaceAll(name, {{"_", "-"}});
    std::string* target = nullptr;
    std::string level;
    if (name == "listen") {
      target = &opts.listen;
    } else if (name == "runtime-endpoint") {
      target = &opts.runtime_endpoint;
    } else if (name == "cryod-socket") {
      target = &opts.cryod_socket;
    } else if (name == "annotation-prefix") {
      target = &opts.annotation_prefix;
    } else if (name == "init-path") {
      target = &opts.init_path;
    } else if (name == "metrics-address") {
      target = &opts.metrics_address;
    } else if (name == "log-level") {
      target = &level;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!has_value) {
      if (i + 1 >= args.size()) {
        return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
      }
      value = args[++i];
    }
    *target = value;
    if (name == "log-level") {
      absl::StatusOr<LogLevel> parsed = ParseLogLevel(level);
      if (!parsed.ok()) return parsed.status();
      opts.log_level = *parsed;
    }
  }
  if (opts.listen.empty()) return absl::InvalidArgumentError("--listen must not be empty");
  if (opts.annotation_prefix.empty() || opts.annotation_prefix.find('/') != std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("--annotation-prefix \"",
                                                   opts.annotation_prefix,
                                                   "\" must be a non-empty DNS-style prefix"));
  }
  if (opts.init_path.empty() || opts.init_path[0] != '/') {
    return absl::InvalidArgumentError("--init-path must be an absolute path");
  }
  absl::StatusOr<std::string> listen_path = UnixEndpointPath(opts.listen);
  if (!listen_path.ok()) return listen_path.status();
  opts.listen = *listen_path;
  absl::StatusOr<std::string> runtime = NormalizeUnixEndpoint(opts.runtime_endpoint);
  if (!runtime.ok()) return runtime.status();
  opts.runtime_endpoint = *runtime;
  return opts;
}

}  // namespace cryo::shim
