#include "clients/kubectl/jsonpath.h"

#include <cctype>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cryo::kubectl {

using nlohmann::json;

// Named, not anonymous: Node holds it, and Node is not in an anonymous namespace.
namespace jsonpath_detail {

struct Step {
  enum Kind { kField, kIndex, kAll, kRecursive } kind = kField;
  std::string name;  // kField, kRecursive
  long index = 0;    // kIndex
};

}  // namespace jsonpath_detail

struct JsonPath::Node {
  enum Kind { kText, kPath, kRange } kind = kText;
  std::string text;                          // kText (literal text and quoted strings)
  std::string source;                        // kPath, kRange: the expression as written
  std::vector<jsonpath_detail::Step> steps;  // kPath, kRange
  std::vector<JsonPath::Node> body;          // kRange
};

namespace {

using jsonpath_detail::Step;
using Node = JsonPath::Node;

absl::Status Bad(const std::string& text, size_t at, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("jsonpath '", text, "': ", why, " at character ", at + 1));
}

// Parses a path ("$.a[0].b[*]", ".a..b", "{.a.*}") into steps.
absl::StatusOr<std::vector<Step>> ParsePath(const std::string& tpl, size_t base,
                                            const std::string& p) {
  std::vector<Step> out;
  size_t i = 0;
  if (i < p.size() && p[i] == '$') ++i;
  auto ident = [&](size_t from) {
    size_t j = from;
    while (j < p.size() && (std::isalnum(static_cast<unsigned char>(p[j])) || p[j] == '_' ||
                            p[j] == '-' || p[j] == '/')) {
      ++j;
    }
    return j;
  };
  while (i < p.size()) {
    if (p.compare(i, 2, "..") == 0) {
      const size_t j = ident(i + 2);
      if (j == i + 2) return Bad(tpl, base + i, "'..' needs a field name");
      out.push_back({Step::kRecursive, p.substr(i + 2, j - i - 2), 0});
      i = j;
    } else if (p[i] == '.') {
      if (i + 1 < p.size() && p[i + 1] == '*') {
        out.push_back({Step::kAll, "", 0});
        i += 2;
        continue;
      }
      const size_t j = ident(i + 1);
      if (j == i + 1) {
        if (i + 1 == p.size() && out.empty()) break;  // "." alone: the object itself
        return Bad(tpl, base + i, "'.' needs a field name");
      }
      out.push_back({Step::kField, p.substr(i + 1, j - i - 1), 0});
      i = j;
    } else if (p[i] == '[') {
      const size_t close = p.find(']', i);
      if (close == std::string::npos) return Bad(tpl, base + i, "'[' without ']'");
      std::string in = p.substr(i + 1, close - i - 1);
      if (in == "*") {
        out.push_back({Step::kAll, "", 0});
      } else if (in.size() >= 2 && (in.front() == '\'' || in.front() == '"') &&
                 in.back() == in.front()) {
        out.push_back({Step::kField, in.substr(1, in.size() - 2), 0});
      } else {
        long n = 0;
        if (!absl::SimpleAtoi(in, &n)) {
          return Bad(tpl, base + i,
                     absl::StrCat("'[", in, "]' is not an index, '*' or a quoted name"));
        }
        out.push_back({Step::kIndex, "", n});
      }
      i = close + 1;
    } else {
      return Bad(tpl, base + i, absl::StrCat("unexpected '", std::string(1, p[i]), "' in a path"));
    }
  }
  return out;
}

void Recurse(const json& v, const std::string& name, std::vector<const json*>* out) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() == name) out->push_back(&it.value());
      Recurse(it.value(), name, out);
    }
  } else if (v.is_array()) {
    for (const auto& e : v) Recurse(e, name, out);
  }
}

std::vector<const json*> Eval(const std::vector<Step>& steps, const json& root) {
  std::vector<const json*> cur = {&root};
  for (const Step& s : steps) {
    std::vector<const json*> next;
    for (const json* v : cur) {
      switch (s.kind) {
        case Step::kField:
          if (v->is_object()) {
            auto it = v->find(s.name);
            if (it != v->end()) next.push_back(&*it);
          }
          break;
        case Step::kIndex:
          if (v->is_array()) {
            const long size = static_cast<long>(v->size());
            const long k = s.index < 0 ? size + s.index : s.index;
            if (k >= 0 && k < size) next.push_back(&(*v)[static_cast<size_t>(k)]);
          }
          break;
        case Step::kAll:
          if (v->is_array() || v->is_object()) {
            for (const auto& e : *v) next.push_back(&e);
          }
          break;
        case Step::kRecursive:
          Recurse(*v, s.name, &next);
          break;
      }
    }
    cur = std::move(next);
  }
  return cur;
}

std::string Show(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Parses template text from `i` until the end, or until an {end} when `in_range`.
absl::Status ParseNodes(const std::string& t, size_t& i, bool in_range, std::vector<Node>* out) {
  while (i < t.size()) {
    const size_t open = t.find('{', i);
    if (open == std::string::npos) {
      out->push_back({Node::kText, t.substr(i), "", {}, {}});
      i = t.size();
      break;
    }
    if (open > i) out->push_back({Node::kText, t.substr(i, open - i), "", {}, {}});
    // A quoted string may hold a '}'.
    size_t close = open + 1;
    while (close < t.size() && std::isspace(static_cast<unsigned char>(t[close]))) ++close;
    if (close < t.size() && (t[close] == '"' || t[close] == '\'')) {
      const char q = t[close];
      std::string lit;
      size_t j = close + 1;
      for (; j < t.size() && t[j] != q; ++j) {
        if (t[j] == '\\' && j + 1 < t.size()) {
          const char e = t[++j];
          lit += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        } else {
          lit += t[j];
        }
      }
      if (j >= t.size()) return Bad(t, close, "unterminated string");
      size_t k = j + 1;
      while (k < t.size() && std::isspace(static_cast<unsigned char>(t[k]))) ++k;
      if (k >= t.size() || t[k] != '}') return Bad(t, k, "'}' expected after a string");
      out->push_back({Node::kText, lit, "", {}, {}});
      i = k + 1;
      continue;
    }
    close = t.find('}', open);
    if (close == std::string::npos) return Bad(t, open, "'{' without '}'");
    std::string expr = t.substr(open + 1, close - open - 1);
    const size_t lead = expr.find_first_not_of(" \t");
    expr = lead == std::string::npos ? "" : expr.substr(lead);
    while (!expr.empty() && std::isspace(static_cast<unsigned char>(expr.back()))) expr.pop_back();
    i = close + 1;
    if (expr == "end") {
      if (!in_range) return Bad(t, open, "{end} without {range}");
      return absl::OkStatus();
    }
    if (expr.rfind("range ", 0) == 0) {
      std::string path = expr.substr(6);
      path = path.substr(path.find_first_not_of(' '));
      auto steps = ParsePath(t, open + 1, path);
      if (!steps.ok()) return steps.status();
      Node r{Node::kRange, "", path, *std::move(steps), {}};
      // Returns OK only at its {end}.
      if (absl::Status s = ParseNodes(t, i, true, &r.body); !s.ok()) return s;
      out->push_back(std::move(r));
      continue;
    }
    if (expr.empty()) return Bad(t, open, "empty {}");
    auto steps = ParsePath(t, open + 1, expr);
    if (!steps.ok()) return steps.status();
    out->push_back({Node::kPath, "", expr, *std::move(steps), {}});
  }
  if (in_range) return Bad(t, t.size() - 1, "{range} without {end}");
  return absl::OkStatus();
}

absl::Status Run(const std::vector<Node>& nodes, const json& data, std::string* out) {
  for (const Node& n : nodes) {
    switch (n.kind) {
      case Node::kText:
        *out += n.text;
        break;
      case Node::kPath: {
        std::vector<const json*> found = Eval(n.steps, data);
        if (found.empty()) {
          return absl::NotFoundError(absl::StrCat("jsonpath: ", n.source, " is not found"));
        }
        std::vector<std::string> shown;
        for (const json* v : found) shown.push_back(Show(*v));
        *out += absl::StrJoin(shown, " ");
        break;
      }
      case Node::kRange:
        for (const json* v : Eval(n.steps, data)) {
          // Inside a range a path starts from the element ({.name}), as kubectl's does.
          if (absl::Status s = Run(n.body, *v, out); !s.ok()) return s;
        }
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<JsonPath> JsonPath::Parse(const std::string& text) {
  auto nodes = std::make_shared<std::vector<Node>>();
  size_t i = 0;
  if (absl::Status s = ParseNodes(text, i, false, nodes.get()); !s.ok()) return s;
  JsonPath p;
  p.nodes_ = std::move(nodes);
  return p;
}

absl::StatusOr<std::string> JsonPath::Execute(const json& data) const {
  std::string out;
  if (absl::Status s = Run(*nodes_, data, &out); !s.ok()) return s;
  return out;
}

}  // namespace cryo::kubectl
