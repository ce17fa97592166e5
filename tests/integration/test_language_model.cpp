// A byte-level language model through the dtrain binary (job_files.h's
// language_model_job: a text source, 16 labels per sample): it learns, and it
// reports per token (loss, perplexity = exp(loss), tokens/s) on its epoch lines,
// in metrics.jsonl and in the summary; `validate` shows the labels per sample; a
// model whose output does not give one row of logits per label is exit 2 naming
// both; a parameter_server job's work units carry the tokens to the coordinator;
// a GPT's bench train --json and run summary report FLOPs per token and MFU.
#include <catch2/catch.hpp>
#include <cmath>
#include <nlohmann/json.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

constexpr int64_t kTokensPerSample = 16;
constexpr int64_t kTrainWindows = (5600 - 17) / 8 + 1;  // the first 80% of 7000 bytes

}  // namespace

TEST_CASE("a byte-level language model learns and reports loss, perplexity and tokens per token", "[integration]") {
  TempDir tmp;
  const std::string summary_path = tmp.file("summary.json");
  const RunOutput run =
      run_dtrain({"run", "--config", write_job(tmp, language_model_job(tmp)), "--threads", "1", "--summary",
                  summary_path},
                 {120.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains(" tokens/s - loss: ") && Catch::Contains(" - perplexity: ") &&
                          Catch::Contains(" - val_perplexity: "));
  CHECK_THAT(run.out, Catch::Contains("Test: loss ") && Catch::Contains(", perplexity "));
  CHECK_THAT(run.out, Catch::Contains(" tokens/s, params_sha256 "));

  const nlohmann::json s = read_json_file(summary_path);
  INFO(s.dump(2));
  CHECK(s["tokens_per_sample"] == kTokensPerSample);
  CHECK(s["train_perplexity"].get<double>() == Approx(std::exp(s["train_loss"].get<double>())));
  CHECK(s["test_perplexity"].get<double>() == Approx(std::exp(s["test_loss"].get<double>())));
  CHECK(s["train_tokens_per_sec"].get<double>() ==
        Approx(kTokensPerSample * s["train_samples_per_sec"].get<double>()));
  // A bigram model of this text is far better than a uniform guess over 256 bytes.
  CHECK(s["test_loss"].get<double>() < std::log(256.0) - 2.0);

  std::vector<double> step_losses_seen, epoch_losses;
  for (const nlohmann::json& r : read_json_lines(tmp.file("out/metrics.jsonl"))) {
    INFO(r.dump());
    CHECK(r["perplexity"].get<double>() == Approx(std::exp(r["loss"].get<double>())));
    CHECK(r["tokens_per_sec"].get<double>() == Approx(kTokensPerSample * r["samples_per_sec"].get<double>()));
    if (r["kind"] == "step") step_losses_seen.push_back(r["loss"]);
    if (r["kind"] == "epoch") {
      epoch_losses.push_back(r["loss"]);
      CHECK(r["val_perplexity"].get<double>() == Approx(std::exp(r["val_loss"].get<double>())));
    }
  }
  REQUIRE(epoch_losses.size() == 2);
  REQUIRE(step_losses_seen.size() >= 8);  // 43 steps an epoch, a record every 5
  CHECK(step_losses_seen.front() > std::log(256.0) - 1.0);  // it starts near a uniform guess
  CHECK(epoch_losses[1] < epoch_losses[0]);
}

TEST_CASE("dtrain validate shows a text source's windows and labels per sample", "[integration]") {
  TempDir tmp;
  const RunOutput run = run_dtrain({"validate", "--config", write_job(tmp, language_model_job(tmp))});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  CHECK_THAT(run.out, Catch::Contains("ok   data.train: text, " + std::to_string(kTrainWindows) + " samples of shape"));
  CHECK_THAT(run.out, Catch::Contains(", 16 per sample"));
}

TEST_CASE("a model without one row of logits per label position is exit 2 naming both", "[integration]") {
  TempDir tmp;
  nlohmann::json job = language_model_job(tmp);
  job["model"]["layers"] = {{{"type", "Flatten"}}, {{"type", "Dense"}, {"units", 256}}};
  const RunOutput run = run_dtrain({"run", "--config", write_job(tmp, job)});
  check_error(run, 2, {"model: the last layer outputs (256,) per sample", "data.train has 16 labels per sample",
                       "(16, classes)"});
}

TEST_CASE("parameter_server work units carry the tokens: the coordinator reports the loss per token",
          "[integration]") {
  TempDir tmp;
  nlohmann::json job = language_model_job(tmp, 1);
  job["strategy"] = {{"type", "parameter_server"}, {"mode", "sync"}};
  const std::string summary_path = tmp.file("launch.json");
  const RunOutput run = run_dtrain({"launch", "--workers", "2", "--chief", "--ps", "1", "--config",
                                    write_job(tmp, job), "--threads", "1", "--summary", summary_path},
                                   {180.0, ""});
  INFO(describe(run));
  REQUIRE(run.exit_code == 0);
  const nlohmann::json chief = read_json_file(summary_path)["tasks"]["chief:0"];
  INFO(chief.dump(2));
  CHECK(chief["tokens_per_sample"] == kTokensPerSample);
  // Per token: neither 0 (no tokens counted) nor per sample (16 tokens' losses, about 100).
  const double loss = chief["train_loss"];
  CHECK(loss > 0.5);
  CHECK(loss < 10.0);
  CHECK(chief["train_perplexity"].get<double>() == Approx(std::exp(loss)));
}

}  // namespace dtrain::integration

namespace dtrain::integration {

TEST_CASE("bench train --json of a GPT reports tokens/s, its FLOPs per token (6N + 12LdT) and MFU against the measured "
          "GEMM",
          "[integration]") {
  TempDir tmp;
  const RunOutput r = run_dtrain({"bench", "train", "--config", write_job(tmp, tiny_gpt_job(tmp)), "--steps", "3",
                                  "--warmup", "1", "--threads", "1", "--json"},
                                 {120.0, ""});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);
  const nlohmann::json j = nlohmann::json::parse(r.out);
  // (the tiny GPT: sequence 16, width 16, two blocks)
  CHECK(j.at("tokens_per_sec").get<double>() == Approx(16 * j.at("samples_per_sec").get<double>()));
  CHECK(j.at("layers") == 2);
  CHECK(j.at("width") == 16);
  CHECK(j.at("sequence") == 16);
  const double n = j.at("params").get<double>();
  CHECK(n > 1000);
  CHECK(j.at("model_flops_per_token").get<double>() == Approx(6 * n + 12.0 * 2 * 16 * 16));
  const double achieved = j.at("achieved_tflops").get<double>();
  CHECK(achieved == Approx(j.at("tokens_per_sec").get<double>() * j.at("model_flops_per_token").get<double>() / 1e12));
  // On the CPU the peak is the GEMM it measured on the job's thread.
  CHECK(j.at("datasheet_tflops") == 0.0);
  CHECK(j.at("peak_tflops").get<double>() == j.at("measured_gemm_tflops").get<double>());
  CHECK(j.at("peak_tflops").get<double>() > 0.0);
  CHECK_THAT(j.at("peak_source").get<std::string>(), Catch::Contains("oneDNN 2048x2048x2048 float32 GEMM, 1 thread"));
  CHECK(j.at("mfu").get<double>() == Approx(achieved / j.at("peak_tflops").get<double>()));
  CHECK(j.at("mfu").get<double>() > 0.0);
  CHECK(j.at("peak_memory_bytes").get<double>() > 0);
}

TEST_CASE("a GPT's run says its utilization in the summary and after the Done line, and a model without attention does "
          "not",
          "[integration]") {
  TempDir tmp;
  const std::string summary_path = tmp.file("summary.json");
  const RunOutput gpt = run_dtrain({"run", "--config", write_job(tmp, tiny_gpt_job(tmp)), "--threads", "1",
                                    "--summary", summary_path},
                                   {120.0, ""});
  INFO(describe(gpt));
  REQUIRE(gpt.exit_code == 0);
  CHECK_THAT(gpt.out, Catch::Contains("Utilization: ") && Catch::Contains("6N + 12LdT") && Catch::Contains(", MFU "));
  const nlohmann::json u = read_json_file(summary_path).at("utilization");
  INFO(u.dump(2));
  CHECK(u.at("tokens_per_sec").get<double>() ==
        Approx(read_json_file(summary_path).at("train_tokens_per_sec").get<double>()));
  CHECK(u.at("mfu").get<double>() > 0.0);
  CHECK(u.at("peak_memory_kind") == "process resident");
  CHECK_THAT(u.at("peak_source").get<std::string>(), Catch::Contains("oneDNN 1024x1024x1024 float32 GEMM"));
  // The epoch lines say MFU on a GPU only (the CPU's peak is measured after the loop).
  CHECK_THAT(gpt.out, !Catch::Contains("tokens/s, MFU"));

  TempDir other;
  const std::string lm_summary = other.file("summary.json");
  const RunOutput lm = run_dtrain({"run", "--config", write_job(other, language_model_job(other, 1)), "--threads", "1",
                                   "--summary", lm_summary},
                                  {120.0, ""});
  REQUIRE(lm.exit_code == 0);
  CHECK_THAT(lm.out, !Catch::Contains("Utilization: "));
  CHECK_FALSE(read_json_file(lm_summary).contains("utilization"));
}

}  // namespace dtrain::integration
