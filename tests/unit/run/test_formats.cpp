// The run directory's formats (run/): each writer's output read back by its reader, the exact
// text a metrics line has (what report and resume parse), the non-finite encodings, and the
// readers' errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ampctl/core/error.h"
#include "ampctl/run/checkpoint_metrics.h"
#include "ampctl/run/metrics_line.h"
#include "ampctl/run/numbers.h"
#include "ampctl/run/summary.h"

namespace ampctl::run {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(RunNumbers, NonFiniteIsNullInLinesAndSpelledInCheckpoints) {
  EXPECT_TRUE(finite_or_null(kInf).is_null());
  EXPECT_TRUE(finite_or_null(kNaN).is_null());
  EXPECT_EQ(finite_or_null(2.5), 2.5);
  EXPECT_EQ(encode_double(kInf), ".inf");
  EXPECT_EQ(encode_double(-kInf), "-.inf");
  EXPECT_EQ(encode_double(kNaN), ".nan");
  EXPECT_EQ(encode_double(0.1), 0.1);
  EXPECT_EQ(*decode_double(encode_double(kInf)), kInf);
  EXPECT_EQ(*decode_double(encode_double(-kInf)), -kInf);
  EXPECT_TRUE(std::isnan(*decode_double(encode_double(kNaN))));
  EXPECT_EQ(*decode_double(encode_double(0.1)), 0.1);
  EXPECT_FALSE(decode_double("inf").has_value());
  EXPECT_FALSE(decode_double("1.5").has_value());  // a number is written as a number
  EXPECT_FALSE(decode_double(nullptr).has_value());
  EXPECT_FALSE(finite_number(nlohmann::json("1")).has_value());
}

TEST(MetricsLine, TrainLineHasItsFieldsAndReadsBack) {
  TrainLine l;
  l.step = 7;
  l.loss = 0.5;
  l.scale = 32768.0;
  l.found_inf = true;
  l.growth_tracker = 0;
  l.hysteresis_tracker = 1;
  l.lr = 0.25;
  l.time_s = 1.5;
  l.grad_norm = 2.5;
  l.overflow_tensors = std::vector<std::string>{"layers.0.weight"};
  EXPECT_EQ(to_json(l).dump(),
            R"({"found_inf":true,"grad_norm":2.5,"growth_tracker":0,"hysteresis_tracker":1,)"
            R"("kind":"train",)"
            R"("loss":0.5,"lr":0.25,"overflow_tensors":["layers.0.weight"],"scale":32768.0,)"
            R"("skipped":true,"step":7,"time_s":1.5})");
  const auto r = read_metrics_line(to_json(l).dump());
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->is_train());
  EXPECT_EQ(*r->step, 7);
  EXPECT_TRUE(r->step_is_integer);
  EXPECT_EQ(*r->loss, 0.5);
  EXPECT_EQ(*r->scale, 32768.0);
  EXPECT_TRUE(r->overflowed);

  TrainLine quiet;
  quiet.step = 8;
  quiet.loss = kNaN;
  const nlohmann::json j = to_json(quiet);
  EXPECT_TRUE(j.at("loss").is_null());
  EXPECT_FALSE(j.contains("hysteresis_tracker"));
  EXPECT_FALSE(j.contains("overflow_tensors"));
  const auto q = read_metrics_line(j.dump());
  EXPECT_FALSE(q->loss.has_value());
  EXPECT_FALSE(q->overflowed);
}

TEST(MetricsLine, EvalLineAndWhatReadersTolerate) {
  EvalLine e;
  e.step = 100;
  e.loss = 0.75;
  e.accuracy = 0.5;
  e.time_s = 2.0;
  EXPECT_EQ(to_json(e).dump(),
            R"({"accuracy":0.5,"kind":"eval","loss":0.75,"step":100,"time_s":2.0})");
  const auto r = read_metrics_line(to_json(e).dump());
  EXPECT_TRUE(r->is_eval());
  EXPECT_EQ(*r->accuracy, 0.5);
  e.accuracy.reset();
  EXPECT_FALSE(to_json(e).contains("accuracy"));

  EXPECT_FALSE(read_metrics_line(R"({"kind":"train","st)").has_value());  // a torn last line
  EXPECT_FALSE(read_metrics_line("[1, 2]").has_value());
  const auto bare = read_metrics_line(R"({"step": 3.0, "loss": 1})");
  EXPECT_TRUE(bare->is_train());  // no kind: a train line
  EXPECT_EQ(*bare->step, 3);
  EXPECT_FALSE(bare->step_is_integer);
  EXPECT_FALSE(read_metrics_line(R"({"loss": 1})")->step.has_value());
}

TEST(MetricsLine, ATrainLinesDamagedFieldIsNamed) {
  TrainLine l;
  l.step = 4;
  l.scale = 1024.0;
  l.grad_amax = 0.5;
  l.grad_amax_exact = false;
  const auto ok = read_metrics_line(to_json(l).dump());
  EXPECT_EQ(ok->defect, "");
  EXPECT_TRUE(ok->has_grad_amax);
  EXPECT_EQ(*ok->grad_amax, 0.5);
  EXPECT_EQ(ok->grad_amax_exact, std::optional<bool>(false));
  TrainLine unknown = l;
  unknown.grad_amax = kInf;  // written as null: no finite value reached a rounding
  const auto u = read_metrics_line(to_json(unknown).dump());
  EXPECT_EQ(u->defect, "");
  EXPECT_TRUE(u->has_grad_amax);
  EXPECT_FALSE(u->grad_amax.has_value());
  EXPECT_FALSE(read_metrics_line(R"({"kind":"train","step":1})")->has_grad_amax);
  // One damaged field at a time, in a line the trainer wrote.
  const struct {
    const char* key;
    nlohmann::json value;
    const char* defect;
  } bad[] = {{"step", "4", "step must be a positive integer, got \"4\""},
             {"step", 4.5, "step must be a positive integer, got 4.5"},
             {"step", 0, "step must be a positive integer, got 0"},
             {"scale", "big", "scale must be a positive number or null, got \"big\""},
             {"scale", -1.0, "scale must be a positive number or null, got -1.0"},
             {"found_inf", 1, "found_inf must be true or false, got 1"},
             {"skipped", "no", "skipped must be true or false, got \"no\""},
             {"grad_amax_exact", 3, "grad_amax_exact must be true or false, got 3"},
             {"grad_amax", -0.5, "grad_amax must be a non-negative number or null, got -0.5"},
             {"grad_amax", "x", "grad_amax must be a non-negative number or null, got \"x\""},
             {"retries", -1, "retries must be a non-negative integer, got -1"}};
  for (const auto& b : bad) {
    nlohmann::json j = to_json(l);
    j[b.key] = b.value;
    EXPECT_EQ(read_metrics_line(j.dump())->defect, b.defect) << b.key;
  }
  nlohmann::json no_step = to_json(l);
  no_step.erase("step");
  EXPECT_EQ(read_metrics_line(no_step.dump())->defect, "step is missing");
  // Eval lines are not train lines: no defect is looked for.
  EXPECT_EQ(read_metrics_line(R"({"kind":"eval","step":"x"})")->defect, "");
}

TEST(CheckpointMetrics, RoundTripsExactlyWithNonFiniteValuesAndStreaks) {
  const std::vector<std::string> names = {"a.weight", "a.bias", "b.weight"};
  CheckpointMetrics m;
  m.totals.steps_done = 40;
  m.totals.skipped = 3;
  m.totals.samples = 1280;
  m.totals.final_loss = kNaN;
  m.totals.best_loss = kInf;
  m.totals.final_scale = 0.125;
  m.totals.min_scale = 1.0 / 3.0;
  m.totals.max_scale = 65536.0;
  m.totals.train_seconds = 1.25;
  m.totals.steady = true;
  m.totals.steady_samples = 640;
  m.totals.last_eval = {{"kind", "eval"}, {"step", 40}};
  m.totals.best_eval_accuracy = 0.875;
  m.wall_time_s = 3.5;
  m.pending_eval = true;
  m.overflow_counts = {2, 0, 1};
  m.floor_streak = {2, 38, {1, 0, 1}};
  m.loss_streak = {0, 0, {0, 0, 0}};
  const nlohmann::json j = to_json(m, names);
  EXPECT_EQ(j.at("final_loss"), ".nan");
  EXPECT_EQ(j.at("best_loss"), ".inf");
  EXPECT_FALSE(j.contains("last_loss"));  // only a finite final loss
  EXPECT_EQ(j.at("overflow_counts"), (nlohmann::json{{"a.weight", 2}, {"b.weight", 1}}));

  const CheckpointMetrics r = read_checkpoint_metrics(j, names);
  EXPECT_EQ(r.totals.steps_done, 40);
  EXPECT_EQ(r.totals.skipped, 3);
  EXPECT_EQ(r.totals.samples, 1280);
  EXPECT_TRUE(std::isnan(r.totals.final_loss));
  EXPECT_EQ(r.totals.best_loss, kInf);
  EXPECT_EQ(r.totals.min_scale, 1.0 / 3.0);
  EXPECT_TRUE(r.totals.steady);
  EXPECT_EQ(r.totals.steady_samples, 640);
  EXPECT_EQ(r.totals.last_eval, m.totals.last_eval);
  EXPECT_FALSE(r.totals.best_eval_loss.has_value());
  EXPECT_EQ(*r.totals.best_eval_accuracy, 0.875);
  EXPECT_EQ(r.wall_time_s, 3.5);
  EXPECT_TRUE(r.pending_eval);
  EXPECT_EQ(r.overflow_counts, m.overflow_counts);
  EXPECT_EQ(r.floor_streak.length, 2);
  EXPECT_EQ(r.floor_streak.first_step, 38);
  EXPECT_EQ(r.floor_streak.counts, m.floor_streak.counts);
  EXPECT_EQ(to_json(r, names), j);
}

TEST(CheckpointMetrics, DamageIsNamed) {
  const std::vector<std::string> names = {"w"};
  CheckpointMetrics m;
  m.overflow_counts = {0};
  m.floor_streak.counts = m.loss_streak.counts = {0};
  const nlohmann::json good = to_json(m, names);
  auto message = [&](nlohmann::json j) {
    try {
      read_checkpoint_metrics(j, names);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::input);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  nlohmann::json j = good;
  j.erase("samples");
  EXPECT_EQ(message(j), "checkpoint metrics: missing key 'samples'");
  j = good;
  j["best_loss"] = "inf";
  EXPECT_NE(message(j).find("'best_loss' must be a number"), std::string::npos);
  j = good;
  j["steady"] = 1;
  EXPECT_EQ(message(j), "checkpoint metrics: 'steady' must be a boolean");
  j = good;
  j["overflow_counts"] = {{"v", 1}};
  EXPECT_NE(message(j).find("entry 'v' is not a parameter"), std::string::npos);
  j = good;
  j["floor_streak"]["length"] = -1;
  EXPECT_EQ(message(j), "checkpoint floor_streak: negative length or step");
  // A checkpoint from before attribution: no counts, no streaks, read as zero.
  j = good;
  j.erase("overflow_counts");
  j.erase("floor_streak");
  j.erase("loss_streak");
  const CheckpointMetrics old = read_checkpoint_metrics(j, names);
  EXPECT_EQ(old.overflow_counts, std::vector<int64_t>{0});
  EXPECT_EQ(old.floor_streak.length, 0);
}

TEST(Summary, WritesItsFieldsAndReadersFindThem) {
  Summary s;
  s.name = "r";
  s.totals.steps_done = 10;
  s.totals.skipped = 2;
  s.totals.final_loss = 0.5;
  s.totals.samples = 100;
  s.totals.train_seconds = 2.0;
  s.most_overflowing = {"w"};
  s.overflow_counts = {{"w", 2}};
  const nlohmann::json j = to_json(s);
  EXPECT_EQ(j.at(summary_key::kSteps), 10);
  EXPECT_EQ(j.at(summary_key::kSkippedSteps), 2);
  EXPECT_EQ(j.at(summary_key::kFinalLoss), 0.5);
  EXPECT_TRUE(j.at(summary_key::kBestLoss).is_null());  // +inf before a finite loss: null
  EXPECT_EQ(j.at(summary_key::kSamplesPerS), 50.0);
  EXPECT_TRUE(j.at(summary_key::kSteadyStepMs).is_null());
  EXPECT_FALSE(j.contains(summary_key::kDivergence));
  EXPECT_EQ(summary_status(j), kStatusOk);
  EXPECT_EQ(summary_field(j, summary_key::kName), "r");
  EXPECT_TRUE(summary_field(j, "no such key").is_null());
  EXPECT_EQ(summary_status(nlohmann::json::object()), kStatusOk);

  s.status = kStatusDiverged;
  s.divergence = SummaryDivergence{5, 7, "nonfinite_loss", {"w"}, std::nullopt, 4, "m"};
  const nlohmann::json d = to_json(s);
  EXPECT_EQ(summary_status(d), "diverged");
  EXPECT_EQ(d.at("divergence").at("detected_at_step"), 7);
  EXPECT_TRUE(d.at("divergence").at("checkpoint").is_null());
  EXPECT_EQ(d.at("divergence").at("checkpoint_step"), 4);
}

}  // namespace
}  // namespace ampctl::run
