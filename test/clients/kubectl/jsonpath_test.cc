// kubectl cryo's -o jsonpath templates (clients/kubectl/jsonpath.h): kubectl's meaning for the
// subset it takes, and clear errors for the rest.
#include "clients/kubectl/jsonpath.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace cryo::kubectl {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Apply(const std::string& tpl, const json& data) {
  auto p = JsonPath::Parse(tpl);
  if (!p.ok()) return "PARSE: " + std::string(p.status().message());
  auto out = p->Execute(data);
  return out.ok() ? *out : "RUN: " + std::string(out.status().message());
}

const json kList = json::parse(R"({
  "kind": "List",
  "items": [
    {"checkpoint_id": "a", "size_bytes": "10", "labels": {"cryo.dev/reason": "stop"}, "n": 1,
     "pids": [5, 6]},
    {"checkpoint_id": "b", "size_bytes": "20", "labels": {}, "n": 2, "pids": [7]}
  ]
})");

TEST(JsonPathTest, FieldsIndicesAndEveryElement) {
  EXPECT_EQ(Apply("{.kind}", kList), "List");
  EXPECT_EQ(Apply("{$.kind}", kList), "List");
  EXPECT_EQ(Apply("{.items[0].checkpoint_id}", kList), "a");
  EXPECT_EQ(Apply("{.items[-1].checkpoint_id}", kList), "b");
  EXPECT_EQ(Apply("{.items[*].checkpoint_id}", kList), "a b");
  EXPECT_EQ(Apply("{.items[*].pids[*]}", kList), "5 6 7");
  EXPECT_EQ(Apply("{.items[0]['labels']['cryo.dev/reason']}", kList), "stop");
  EXPECT_EQ(Apply("{.items[0].labels.*}", kList), "stop");
  EXPECT_EQ(Apply("{..checkpoint_id}", kList), "a b");
  // Numbers, arrays and objects as compact JSON; text around blocks as it is.
  EXPECT_EQ(Apply("n={.items[1].n} pids={.items[0].pids}", kList), "n=2 pids=[5,6]");
  EXPECT_EQ(Apply("{.items[1].labels}", kList), "{}");
  EXPECT_EQ(Apply("{.}", json{{"a", 1}}), R"({"a":1})");
}

TEST(JsonPathTest, RangeAndQuotedStrings) {
  EXPECT_EQ(Apply(R"({range .items[*]}{.checkpoint_id}={.size_bytes}{"\n"}{end})", kList),
            "a=10\nb=20\n");
  EXPECT_EQ(Apply(R"({range .items[*]}[{.checkpoint_id}]{end}{'\t'}end)", kList), "[a][b]\tend");
  // A string may hold braces.
  EXPECT_EQ(Apply(R"({"{}"})", kList), "{}");
  // A range over nothing prints nothing, and is no error.
  EXPECT_EQ(Apply("{range .nothing[*]}x{end}", kList), "");
}

TEST(JsonPathTest, WhatFindsNothingAndWhatIsMalformedSayWhy) {
  EXPECT_THAT(Apply("{.items[5].checkpoint_id}", kList),
              HasSubstr(".items[5].checkpoint_id is not found"));
  EXPECT_THAT(Apply("{.items[*}", kList), HasSubstr("'[' without ']'"));
  EXPECT_THAT(Apply("{.items", kList), HasSubstr("'{' without '}'"));
  EXPECT_THAT(Apply("{range .items[*]}{.a}", kList), HasSubstr("{range} without {end}"));
  EXPECT_THAT(Apply("{end}", kList), HasSubstr("{end} without {range}"));
  EXPECT_THAT(Apply("{.items[x]}", kList), HasSubstr("is not an index"));
  EXPECT_THAT(Apply("{items}", kList), HasSubstr("unexpected 'i'"));
  EXPECT_THAT(Apply(R"({"open)", kList), HasSubstr("unterminated string"));
  EXPECT_THAT(Apply("{}", kList), HasSubstr("empty {}"));
}

}  // namespace
}  // namespace cryo::kubectl
