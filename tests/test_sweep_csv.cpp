// sweep/csv.hpp and core/suggest.hpp: RFC 4180 writing and reading, the
// shortest round-trip numbers, "did you mean".

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "expect_input_error.hpp"
#include "sweep/csv.hpp"
#include "core/suggest.hpp"

namespace pipegrid {
namespace {

using testutil::input_error_of;

TEST(SweepCsv, FormatNumberIntegersWithoutFraction) {
  EXPECT_EQ(format_number(16), "16");
  EXPECT_EQ(format_number(0), "0");
  EXPECT_EQ(format_number(-0.0), "-0");
  EXPECT_EQ(format_number(-42), "-42");
  EXPECT_EQ(format_number(1e15), "1000000000000000");
  EXPECT_EQ(format_number(9007199254740991.0), "9007199254740991");
  EXPECT_EQ(format_number(9007199254740992.0), "9007199254740992");  // 2^53: fmt's shortest form
  EXPECT_EQ(format_number(1e16), "1e+16");
}

TEST(SweepCsv, FormatNumberShortestRoundTrip) {
  EXPECT_EQ(format_number(0.1), "0.1");
  EXPECT_EQ(format_number(1.5e-5), "1.5e-05");
  EXPECT_EQ(format_number(123456789012.5), "123456789012.5");
  EXPECT_EQ(format_number(std::nan("")), "nan");
  EXPECT_EQ(format_number(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_number(-std::numeric_limits<double>::infinity()), "-inf");
  // Round trip over awkward values.
  for (const double v : {0.1 + 0.2, 1.0 / 3.0, 2.0 / 3.0 * 1e-300, 5e-324, 1.7976931348623157e308, 0.30000000000000004,
                         123.456, 8.5e15, -1e-7}) {
    const std::string text = format_number(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
  }
}

TEST(SweepCsv, FieldQuotesOnlyWhenNeeded) {
  EXPECT_EQ(csv_field("plain"), "plain");
  EXPECT_EQ(csv_field(""), "");
  EXPECT_EQ(csv_field("a,b"), "\"a,b\"");
  EXPECT_EQ(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(csv_field("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(csv_field(" padded"), "\" padded\"");
  EXPECT_EQ(csv_field("0-14:3|15-39:1"), "0-14:3|15-39:1");
  EXPECT_EQ(csv_record({"a", "b,c", ""}), "a,\"b,c\",\n");
}

TEST(SweepCsv, ParsesWhatItWrites) {
  const std::vector<std::vector<std::string>> records = {
      {"run_key", "label", "reason", "empty"},
      {"0123456789abcdef", "gnmt|M=16", "out of memory: 12 GiB, \"stage 0\"\nsecond line", ""},
      {"fedcba9876543210", " x ", "", ""},
  };
  std::string text;
  for (const auto& r : records) text += csv_record(r);
  const CsvTable table = parse_csv(text, "runs.csv");
  EXPECT_EQ(table.header, records[0]);
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0], records[1]);
  EXPECT_EQ(table.rows[1], records[2]);
  EXPECT_EQ(table.row_lines, (std::vector<std::size_t>{2, 4}));
  EXPECT_EQ(table.column("reason"), 2u);
  EXPECT_FALSE(table.column("nope"));
  EXPECT_CONTAINS(input_error_of([&] { table.require_column("nope"); }), "runs.csv: no column 'nope'");
}

TEST(SweepCsv, AcceptsCrlfAndNoFinalLineBreak) {
  const CsvTable table = parse_csv("a,b\r\n1,\"2\"\r\n3,4", "f.csv");
  ASSERT_EQ(table.rows.size(), 2u);
  EXPECT_EQ(table.rows[0], (std::vector<std::string>{"1", "2"}));
  EXPECT_EQ(table.rows[1], (std::vector<std::string>{"3", "4"}));
  const CsvTable trailing = parse_csv("a,b\n1,", "f.csv");
  EXPECT_EQ(trailing.rows.at(0), (std::vector<std::string>{"1", ""}));
  EXPECT_TRUE(parse_csv("a,b\n", "f.csv").rows.empty());
}

TEST(SweepCsv, MalformedInputNamesFileAndLine) {
  EXPECT_CONTAINS(input_error_of([] { parse_csv("", "r.csv"); }), "r.csv: empty file");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,b\n1,2\n3\n", "r.csv"); }),
                  "r.csv:3: expected 2 fields (as in the header), found 1");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,b\n1,\"2\n\n", "r.csv"); }), "r.csv:2: unterminated quoted field");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,b\n1,x\"y\n", "r.csv"); }), "r.csv:2: a quote inside an unquoted field");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,b\n\"1\"x,2\n", "r.csv"); }),
                  "r.csv:2: expected ',' or the end of the line after a closing quote, found 'x'");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,a\n", "r.csv"); }), "r.csv:1: column 'a' appears twice");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,,b\n", "r.csv"); }), "r.csv:1: header column 2 has no name");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,b\n\"x\ny\",1\n2\n", "r.csv"); }), "r.csv:4: expected 2 fields");
  EXPECT_CONTAINS(input_error_of([] { parse_csv("a,b\n1\r2,3\n", "r.csv"); }), "r.csv:2: a carriage return");
}

TEST(SweepCsv, WholeRecordsCutsATornLine) {
  EXPECT_EQ(csv_whole_records("a,b\n1,2\n3,"), "a,b\n1,2\n");
  EXPECT_EQ(csv_whole_records("a,b\n1,\"x\ny\"\n"), "a,b\n1,\"x\ny\"\n");
  EXPECT_EQ(csv_whole_records("a,b\n1,\"x\ny"), "a,b\n");
  EXPECT_EQ(csv_whole_records("abc"), "");
}

TEST(SweepSuggest, DidYouMean) {
  const std::vector<std::string> keys = {"name", "rows", "cols", "value", "relative_to", "format", "annotate", "paper"};
  EXPECT_EQ(did_you_mean("colums", keys), " (did you mean 'cols'?)");
  EXPECT_EQ(did_you_mean("relative-to", keys), " (did you mean 'relative_to'?)");
  EXPECT_EQ(did_you_mean("annotation", keys), " (did you mean 'annotate'?)");
  EXPECT_EQ(did_you_mean("completely_different", keys), "");
  EXPECT_EQ(closest_match("netwrok", {"network", "memory"}), "network");
  EXPECT_FALSE(closest_match(std::string(100000, 'a'), keys));
}

}  // namespace
}  // namespace pipegrid
