// One output vocabulary (docs/outputs.md): every name that the console's epoch
// and step lines, metrics.jsonl, the run summary and `bench train --json` print
// is in the table of docs/outputs.md, marked for that output; the step line's
// parts are the summary's step_ms_parts; step_ms is one number wherever it is.
#include <catch2/catch.hpp>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

// docs/outputs.md's table: name -> the outputs (column headers) it is marked for.
std::map<std::string, std::set<std::string>> vocabulary() {
  std::istringstream doc(read_file(std::string(DTRAIN_SOURCE_DIR) + "/docs/outputs.md"));
  std::vector<std::string> columns;
  std::map<std::string, std::set<std::string>> names;
  const auto cells_of = [](const std::string& line) {
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 1; i < line.size(); ++i) {
      if (line[i] != '|') {
        cell += line[i];
        continue;
      }
      const size_t a = cell.find_first_not_of(' '), b = cell.find_last_not_of(' ');
      cells.push_back(a == std::string::npos ? "" : cell.substr(a, b - a + 1));
      cell.clear();
    }
    return cells;
  };
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("| name |", 0) == 0) columns = cells_of(line);
    if (columns.empty() || line.rfind("| `", 0) != 0) continue;
    const std::vector<std::string> cells = cells_of(line);
    const std::string name = cells[0].substr(1, cells[0].find('`', 1) - 1);
    for (size_t c = 1; c < cells.size() && c < columns.size(); ++c)
      if (cells[c] == "✓") names[name].insert(columns[c]);
  }
  return names;
}

void check_named(const std::map<std::string, std::set<std::string>>& table, const std::string& output,
                 const std::set<std::string>& names) {
  for (const std::string& name : names) {
    INFO(output << " prints '" << name << "'; docs/outputs.md must list it, marked for " << output);
    REQUIRE(table.count(name) == 1);
    CHECK(table.at(name).count(output) == 1);
  }
}

std::set<std::string> keys_of(const nlohmann::json& object) {
  std::set<std::string> keys;
  for (const auto& [key, value] : object.items()) keys.insert(key);
  return keys;
}

}  // namespace

TEST_CASE("every name in the console, metrics.jsonl, the summary and bench --json is docs/outputs.md's",
          "[integration]") {
  const auto table = vocabulary();
  REQUIRE(table.size() > 40);
  TempDir tmp;
  // A sequence job (perplexity, tokens) with a validation, a summary and per-step records.
  const nlohmann::json job = tiny_gpt_job(tmp, 6);
  const std::string summary_path = tmp.file("summary.json");
  const RunOutput r = run_dtrain({"run", "--config", write_job(tmp, job), "--summary", summary_path});
  INFO(describe(r));
  REQUIRE(r.exit_code == 0);

  std::set<std::string> metrics_names;
  for (const nlohmann::json& record : read_json_lines(tmp.file("out/metrics.jsonl"))) {
    const auto keys = keys_of(record);
    metrics_names.insert(keys.begin(), keys.end());
  }
  CHECK(metrics_names.count("val_loss") == 1);
  check_named(table, "metrics.jsonl", metrics_names);

  const nlohmann::json summary = read_json_file(summary_path);
  std::set<std::string> summary_names = keys_of(summary);
  summary_names.erase(summary.at("strategy").get<std::string>());  // the strategy's own section, named after it
  check_named(table, "summary", summary_names);
  CHECK(summary.at("step_ms").is_number());  // one meaning: the mean step time, as in metrics.jsonl

  // The console's epoch line: "... - loss: 4.1 - perplexity: 60.2 - ... - val_accuracy: 0.2".
  std::set<std::string> console_names;
  const std::regex labelled(" - ([a-z_]+): ");
  for (auto it = std::sregex_iterator(r.out.begin(), r.out.end(), labelled); it != std::sregex_iterator(); ++it)
    console_names.insert((*it)[1]);
  CHECK(console_names.count("val_perplexity") == 1);
  check_named(table, "console", console_names);
  // The step line's parts are the summary's step_ms_parts, in its order of the table.
  const std::smatch parts = [&] {
    std::smatch m;
    std::regex_search(r.out, m, std::regex("Step: [0-9.]+ ms = data [0-9.]+ \\+ compute [0-9.]+ \\+ gradient_wait "
                                           "[0-9.]+ \\+ update [0-9.]+ \\+ metrics [0-9.]+ \\+ other [0-9.]+"));
    return m;
  }();
  CHECK_FALSE(parts.empty());
  CHECK(keys_of(summary.at("step_ms_parts")) ==
        std::set<std::string>{"data", "compute", "gradient_wait", "update", "metrics", "other"});

  const RunOutput bench = run_dtrain({"bench", "train", "--config", write_job(tmp, job, "bench.json"), "--steps", "2",
                                      "--warmup", "1", "--json"});
  INFO(describe(bench));
  REQUIRE(bench.exit_code == 0);
  const std::string last_line = bench.out.substr(bench.out.rfind('{'));
  check_named(table, "bench train --json", keys_of(nlohmann::json::parse(last_line)));
}

}  // namespace dtrain::integration
