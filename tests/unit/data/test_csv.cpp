// CSV sources: header, label by name or index (negative from the end), regression targets,
// quoting and line-end variants, and every bad-file case with its spreadsheet location.
#include <gtest/gtest.h>

#include "ampctl/data/csv.h"
#include "data_test_util.h"

namespace ampctl::data {
namespace {

using data::LabelColumn;
using testing::expect_input_error;

const LabelColumn kLast{"", -1};

Dataset parse(const std::string& text, LabelColumn label = kLast, bool header = true,
              Task task = Task::classification) {
  return parse_csv(text, "data.csv", task, label, header);
}

TEST(Csv, HeaderAndLabelByName) {
  const Dataset d = parse("a,label,b\n1.5,2,-3\n4,0,5e-1\n", {"label", 0});
  ASSERT_EQ(d.size(), 2);
  EXPECT_EQ(d.features, 2);
  EXPECT_EQ(d.classes, 3);
  EXPECT_EQ(d.x, (std::vector<float>{1.5f, -3.0f, 4.0f, 0.5f}));
  EXPECT_EQ(d.labels, (std::vector<int32_t>{2, 0}));
  EXPECT_TRUE(d.y.empty());
  EXPECT_FALSE(d.pixels);
}

TEST(Csv, LabelByIndexPositiveAndNegative) {
  const std::string text = "7,1,2\n8,0,3\n";
  const Dataset last = parse(text, kLast, false);
  EXPECT_EQ(last.labels, (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(last.x, (std::vector<float>{7, 1, 8, 0}));
  const Dataset first = parse(text, {"", 0}, false);
  EXPECT_EQ(first.labels, (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(first.classes, 9);
  const Dataset middle = parse(text, {"", -2}, false);
  EXPECT_EQ(middle.labels, (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(middle.x, (std::vector<float>{7, 2, 8, 3}));
}

TEST(Csv, RegressionTarget) {
  const Dataset d = parse("x,y\n1,0.25\n2,-1e3\n", {"y", 0}, true, Task::regression);
  EXPECT_EQ(d.task, Task::regression);
  EXPECT_EQ(d.targets, 1);
  EXPECT_EQ(d.classes, 0);
  EXPECT_EQ(d.y, (std::vector<float>{0.25f, -1000.0f}));
  EXPECT_TRUE(d.labels.empty());
}

TEST(Csv, QuotesSpacesCrlfBomAndBlankLines) {
  const Dataset d =
      parse("\xEF\xBB\xBF\"first \"\"col\"\"\", \"label\" \r\n\r\n  +1 , \"2\"\r\n\n\t-0.5,1\r\n",
            {"label", 0});
  EXPECT_EQ(d.x, (std::vector<float>{1.0f, -0.5f}));
  EXPECT_EQ(d.labels, (std::vector<int32_t>{2, 1}));
  const Dataset named = parse("\"a \"\"b\"\"\",y\n1,0\n2,1\n", {"a \"b\"", 0});
  EXPECT_EQ(named.labels, (std::vector<int32_t>{1, 2}));
}

TEST(Csv, IntegralFloatLabelsAreAccepted) {
  EXPECT_EQ(parse("1,2.0\n1,1e1\n", kLast, false).labels, (std::vector<int32_t>{2, 10}));
}

TEST(Csv, BadCellNamesLineAndColumn) {
  // Line numbers count every line (header and blank ones), as an editor shows them.
  expect_input_error([] { parse("a,b,c\n1,2,3\n\n4,abc,6\n"); },
                     {"data.csv:4:2: not a number: 'abc'"});
  expect_input_error([] { parse("1,2,\n", kLast, false); }, {"data.csv:1:3: not a number: ''"});
  expect_input_error([] { parse("1,2,3\n0x10,1,1\n", kLast, false); },
                     {"data.csv:2:1: not a number: '0x10'"});
  expect_input_error([] { parse("1,2 3,4\n", kLast, false); },
                     {"data.csv:1:2: not a number: '2 3'"});
}

TEST(Csv, RaggedRows) {
  expect_input_error([] { parse("a,b,c\n1,2,3\n1,2\n"); },
                     {"data.csv:3: expected 3 columns (as line 1), got 2"});
  expect_input_error([] { parse("1,2\n3,4,5\n", kLast, false); },
                     {"data.csv:2: expected 2 columns (as line 1), got 3"});
}

TEST(Csv, EmptyFileAndHeaderOnly) {
  expect_input_error([] { parse(""); }, {"data.csv: empty file"});
  expect_input_error([] { parse("\n \n\r\n"); }, {"data.csv: empty file"});
  expect_input_error([] { parse("a,b\n"); }, {"data.csv: has a header but no data rows"});
}

TEST(Csv, NonFiniteValuesNameTheSample) {
  expect_input_error([] { parse("a,b\n1,0\n2,1\nnan,0\n"); },
                     {"data.csv:4:1: not finite: 'nan' (sample 2)"});
  expect_input_error([] { parse("1,0\n-inf,1\n", kLast, false); },
                     {"data.csv:2:1: not finite: '-inf' (sample 1)"});
  expect_input_error([] { parse("1,inf\n", kLast, false, Task::regression); },
                     {"data.csv:1:2: not finite: 'inf' (sample 0)"});
  expect_input_error([] { parse("1e39,0\n", kLast, false); },
                     {"data.csv:1:1: out of float range: '1e39' (sample 0)"});
  expect_input_error([] { parse("1e-999,0\n", kLast, false); }, {"out of float range"});
}

TEST(Csv, BadLabels) {
  expect_input_error([] { parse("1,2.5\n", kLast, false); },
                     {"data.csv:1:2: label must be an integer >= 0, got '2.5' (sample 0)"});
  expect_input_error([] { parse("1,0\n1,-1\n", kLast, false); },
                     {"data.csv:2:2: label must be an integer >= 0, got '-1' (sample 1)"});
  expect_input_error([] { parse("1,1e7\n", kLast, false); },
                     {"data.csv:1:2: label '1e7' is beyond the limit of 1048576 classes"});
}

TEST(Csv, LabelColumnProblems) {
  expect_input_error(
      [] {
        parse("a,b\n1,2\n", {"label", 0});
      },
      {"data.csv: no column named 'label' (columns: a, b)"});
  expect_input_error(
      [] {
        parse("y,a,y\n1,2,3\n", {"y", 0});
      },
      {"column name 'y' appears more than once (columns 1 and 3)"});
  expect_input_error(
      [] {
        parse("1,2,3\n", {"", 3}, false);
      },
      {"label_column 3 is out of range for 3 columns (valid: -3 to 2)"});
  expect_input_error([] { parse("1,2,3\n", {"", -4}, false); }, {"label_column -4"});
  expect_input_error([] { parse("1,2\n", {"b", 0}, false); }, {"read without a header"});
  expect_input_error([] { parse("label\n1\n"); }, {"data.csv:1: 1 column"});
}

TEST(Csv, QuotingErrors) {
  expect_input_error([] { parse("1,\"2\n", kLast, false); }, {"data.csv:1:2: unterminated quote"});
  expect_input_error([] { parse("\"1\"x,2\n", kLast, false); },
                     {"data.csv:1:1: unexpected text after a quoted cell"});
}

TEST(Csv, LoadsFilesPlainAndGzip) {
  testing::TempDir dir;
  const std::string text = "f0,f1,label\n0.5,1,1\n2,3,0\n";
  testing::write_text(dir / "d.csv", text);
  testing::write_gz(dir / "d.csv.gz", std::vector<uint8_t>(text.begin(), text.end()));
  for (const char* name : {"d.csv", "d.csv.gz"}) {
    const Dataset d = load_csv(dir / name, Task::classification, {"label", 0}, true);
    EXPECT_EQ(d.origin, (dir / name).string());
    EXPECT_EQ(d.x, (std::vector<float>{0.5f, 1, 2, 3}));
    EXPECT_EQ(d.labels, (std::vector<int32_t>{1, 0}));
  }
  expect_input_error([&] { load_csv(dir / "missing.csv", Task::classification, kLast, true); },
                     {(dir / "missing.csv").string(), "no such file"});
  testing::write_text(dir / "bad.csv", "a,b\n1,x\n");
  expect_input_error([&] { load_csv(dir / "bad.csv", Task::classification, kLast, true); },
                     {(dir / "bad.csv").string() + ":2:2: not a number: 'x'"});
}

// Mutated CSV text (characters replaced, inserted, deleted) parses or fails with
// ampctl::Error, for both tasks; never anything else.
TEST(Csv, MutatedTextFailsCleanly) {
  const std::string base = "a,\"b\",label\n1.5,-2,1\n3e2,4,0\n\n5,6,2\n";
  const std::string alphabet = ",\"\n\r .-+e0123456789xni\t";
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text = base;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !text.empty(); ++e) {
      const size_t at = rng() % text.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          text[at] = c;
          break;
        case 1:
          text.insert(text.begin() + static_cast<long>(at), c);
          break;
        default:
          text.erase(at, 1);
          break;
      }
    }
    const Task task = trial % 2 ? Task::regression : Task::classification;
    const LabelColumn label = trial % 3 ? LabelColumn{"label", 0} : LabelColumn{"", -1};
    testing::expect_only_ampctl_errors(
        [&] { check_dataset(parse_csv(text, "fuzz.csv", task, label, trial % 5 != 0)); },
        "trial " + std::to_string(trial) + ": " + text);
  }
}

}  // namespace
}  // namespace ampctl::data
