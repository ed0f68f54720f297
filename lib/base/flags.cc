#include "lib/base/flags.h"

#include <algorithm>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cryo::flags {
namespace {

absl::Status Bad(absl::string_view flag, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(absl::StrCat("--", flag, ": '", value, "' is not ", want));
}

}  // namespace

std::string Canonical(absl::string_view name) {
  std::string n(name);
  std::replace(n.begin(), n.end(), '_', '-');
  return n;
}

FlagSet& FlagSet::Add(Flag f) {
  f.name = Canonical(f.name);
  flags_.push_back(std::move(f));
  return *this;
}

FlagSet& FlagSet::String(std::string name, std::string* v, std::string help,
                         std::string value_name) {
  return Add({name, 0, std::move(help), std::move(value_name), *v, [v](absl::string_view s) {
                *v = std::string(s);
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Int(std::string name, int* v, std::string help, std::string value_name) {
  std::string n = Canonical(name);
  return Add({name, 0, std::move(help), std::move(value_name), absl::StrCat(*v),
              [v, n](absl::string_view s) {
                int x;
                if (!absl::SimpleAtoi(s, &x)) return Bad(n, s, "an integer");
                *v = x;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Int64(std::string name, int64_t* v, std::string help, std::string value_name) {
  std::string n = Canonical(name);
  return Add({name, 0, std::move(help), std::move(value_name), absl::StrCat(*v),
              [v, n](absl::string_view s) {
                int64_t x;
                if (!absl::SimpleAtoi(s, &x)) return Bad(n, s, "an integer");
                *v = x;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Bool(std::string name, bool* v, std::string help) {
  std::string n = Canonical(name);
  return Add({name, 0, std::move(help), "", *v ? "true" : "", [v, n](absl::string_view s) {
                bool b;
                if (!absl::SimpleAtob(s, &b)) return Bad(n, s, "true or false");
                *v = b;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Duration(std::string name, absl::Duration* v, std::string help) {
  std::string n = Canonical(name);
  std::string def = *v == absl::ZeroDuration() ? "" : absl::FormatDuration(*v);
  return Add({name, 0, std::move(help), "DURATION", def, [v, n](absl::string_view s) {
                absl::Duration d;
                // ParseDuration takes "0" alone without a unit; everything else needs one.
                if (!absl::ParseDuration(s, &d) || d < absl::ZeroDuration() ||
                    d == absl::InfiniteDuration()) {
                  return Bad(n, s, "a duration such as 30s, 500ms or 2m");
                }
                *v = d;
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::StringList(std::string name, std::vector<std::string>* v, std::string help,
                             std::string value_name, bool split_commas) {
  // The first occurrence replaces the default list; later ones append.
  auto fresh = std::make_shared<bool>(true);
  return Add({name, 0, std::move(help), std::move(value_name), "",
              [v, split_commas, fresh](absl::string_view s) {
                if (*fresh) {
                  v->clear();
                  *fresh = false;
                }
                if (split_commas) {
                  for (absl::string_view p : absl::StrSplit(s, ',', absl::SkipWhitespace())) {
                    v->emplace_back(absl::StripAsciiWhitespace(p));
                  }
                } else {
                  v->emplace_back(s);
                }
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::KeyValues(std::string name, std::map<std::string, std::string>* v,
                            std::string help, std::string value_name) {
  std::string n = Canonical(name);
  return Add({name, 0, std::move(help), std::move(value_name), "", [v, n](absl::string_view s) {
                auto eq = s.find('=');
                if (eq == absl::string_view::npos || eq == 0) return Bad(n, s, "KEY=VALUE");
                (*v)[std::string(s.substr(0, eq))] = std::string(s.substr(eq + 1));
                return absl::OkStatus();
              }});
}

FlagSet& FlagSet::Custom(std::string name, std::function<absl::Status(absl::string_view)> set,
                         std::string help, std::string value_name, std::string default_text) {
  return Add(
      {name, 0, std::move(help), std::move(value_name), std::move(default_text), std::move(set)});
}

FlagSet& FlagSet::Short(char c) {
  if (!flags_.empty()) flags_.back().short_name = c;
  return *this;
}

FlagSet& FlagSet::DefaultText(std::string text) {
  if (!flags_.empty()) flags_.back().default_text = std::move(text);
  return *this;
}

const FlagSet::Flag* FlagSet::Find(absl::string_view name) const {
  std::string n = Canonical(name);
  for (const Flag& f : flags_) {
    if (f.name == n) return &f;
  }
  return nullptr;
}

const FlagSet::Flag* FlagSet::FindShort(char c) const {
  for (const Flag& f : flags_) {
    if (f.short_name == c) return &f;
  }
  return nullptr;
}

bool FlagSet::Given(absl::string_view name) const {
  std::string n = Canonical(name);
  return std::find(given_.begin(), given_.end(), n) != given_.end();
}

absl::StatusOr<FlagSet::Result> FlagSet::Parse(const std::vector<std::string>& args,
                                               Options opts) const {
  Result r;
  given_.clear();
  bool flags_done = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (flags_done || a.size() < 2 || a[0] != '-') {
      r.positional.push_back(a);
      if (opts.stop_at_positional) flags_done = true;
      continue;
    }
    if (a == "--") {
      flags_done = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      r.help = true;
      continue;
    }
    std::string name, value;
    bool has_value = false;
    const Flag* f = nullptr;
    if (a[1] == '-') {
      name = a.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
      }
      f = Find(name);
    } else if (a.size() == 2) {
      f = FindShort(a[1]);
      name = a.substr(1);
    } else if (FindShort(a[1]) != nullptr && !FindShort(a[1])->value_name.empty()) {
      // "-ojson": a short flag with its value attached.
      f = FindShort(a[1]);
      value = a.substr(2);
      has_value = true;
    } else {
      name = a.substr(1);
    }
    if (f == nullptr) {
      if (!opts.allow_unknown) {
        return absl::InvalidArgumentError(absl::StrCat("unknown flag ", a, " (see --help)"));
      }
      r.unknown.push_back(a);
      continue;
    }
    if (f->value_name.empty()) {  // boolean
      absl::Status s = f->set(has_value ? value : "true");
      if (!s.ok()) return s;
    } else {
      if (!has_value) {
        if (i + 1 >= args.size()) {
          return absl::InvalidArgumentError(
              absl::StrCat(a, " needs a value (", f->value_name, ")"));
        }
        value = args[++i];
      }
      absl::Status s = f->set(value);
      if (!s.ok()) return s;
    }
    given_.push_back(f->name);
  }
  return r;
}

std::string FlagSet::Usage(int indent) const {
  std::string out;
  const std::string pad(indent, ' ');
  for (const Flag& f : flags_) {
    std::string head = absl::StrCat(pad, "--", f.name);
    if (!f.value_name.empty()) absl::StrAppend(&head, " ", f.value_name);
    if (f.short_name) {
      absl::StrAppend(&head, ", -", std::string(1, f.short_name));
      if (!f.value_name.empty()) absl::StrAppend(&head, " ", f.value_name);
    }
    absl::StrAppend(&out, head, "\n", pad, "    ", f.help);
    if (!f.default_text.empty()) absl::StrAppend(&out, " (default: ", f.default_text, ")");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace cryo::flags
