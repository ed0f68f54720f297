#pragma once

// The one command-line parser of cryo's binaries (cryod, cryo, cryo-cri-shim, the kubectl
// plugin, the tools). Flags are declared against variables, with help text; the parser accepts
// "--name value", "--name=value", "-x value" for declared short names, boolean "--name" and
// "--name=true|false", "--" to end the flags, and treats '-' and '_' in names alike. Usage text
// is generated from the declarations, each default printed once.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cryo::flags {

class FlagSet {
 public:
  FlagSet() = default;
  FlagSet(const FlagSet&) = delete;
  FlagSet& operator=(const FlagSet&) = delete;

  // `value_name` is shown in usage ("--id ID"); `default_text` overrides the printed default
  // (e.g. "<hostname>" where the default is computed later); an empty default prints none.
  FlagSet& String(std::string name, std::string* v, std::string help,
                  std::string value_name = "VALUE");
  FlagSet& Int(std::string name, int* v, std::string help, std::string value_name = "N");
  FlagSet& Int64(std::string name, int64_t* v, std::string help, std::string value_name = "N");
  FlagSet& Bool(std::string name, bool* v, std::string help);
  // "30s", "500ms", "2m", "1h30m" (absl::ParseDuration); a plain number is refused.
  FlagSet& Duration(std::string name, absl::Duration* v, std::string help);
  // Repeatable; each occurrence appends (comma-separated values split when `split_commas`).
  FlagSet& StringList(std::string name, std::vector<std::string>* v, std::string help,
                      std::string value_name = "VALUE", bool split_commas = false);
  // "KEY=VALUE", repeatable.
  FlagSet& KeyValues(std::string name, std::map<std::string, std::string>* v, std::string help,
                     std::string value_name = "KEY=VALUE");
  // Anything else: `set` turns the text into the value (or says why not).
  FlagSet& Custom(std::string name, std::function<absl::Status(absl::string_view)> set,
                  std::string help, std::string value_name = "VALUE",
                  std::string default_text = "");

  // A one-letter name for the flag declared last ("-o" for "--output").
  FlagSet& Short(char c);
  // Overrides the default printed for the flag declared last.
  FlagSet& DefaultText(std::string text);

  struct Result {
    std::vector<std::string> positional;
    // With allow_unknown: unknown flags as given (with their value when "--x=v").
    std::vector<std::string> unknown;
    bool help = false;  // -h or --help was given
  };
  struct Options {
    // Unknown flags are collected instead of refused (a plugin passing them on).
    bool allow_unknown = false;
    // Flags after the first positional are positional too (a command line to run).
    bool stop_at_positional = false;
  };
  // `args` excludes the program name. INVALID_ARGUMENT names the flag and what was wrong.
  absl::StatusOr<Result> Parse(const std::vector<std::string>& args, Options opts) const;
  absl::StatusOr<Result> Parse(const std::vector<std::string>& args) const {
    return Parse(args, Options{});
  }

  // Whether the flag was given in the last Parse (names as declared).
  bool Given(absl::string_view name) const;

  // "  --name VALUE, -n VALUE\n      help (default: x)\n" for every flag, in declaration order.
  std::string Usage(int indent = 2) const;

 private:
  struct Flag {
    std::string name;
    char short_name = 0;
    std::string help;
    std::string value_name;  // empty: boolean
    std::string default_text;
    std::function<absl::Status(absl::string_view)> set;
  };
  FlagSet& Add(Flag f);
  const Flag* Find(absl::string_view name) const;
  const Flag* FindShort(char c) const;

  std::vector<Flag> flags_;
  mutable std::vector<std::string> given_;
};

// Normalises a flag name: '_' -> '-'.
std::string Canonical(absl::string_view name);

}  // namespace cryo::flags
