// The rules docs/architecture.md states about the code, checked over the source
// tree (DTRAIN_SOURCE_DIR): a rule broken by a change fails here, naming the file
// and line. Each rule's scanner is first shown a line that breaks it, so a
// scanner that matches nothing fails too.
//   - no communicator is split outside comm/ (the backends), runtime/ (which
//     builds every group once) and strategy/parallel/grid_groups.cpp (the one function
//     that makes a grid's groups, the runtime's and in-process tests');
//   - the process environment is read in runtime/environment.cpp only, besides
//     the few places listed below, each for its stated reason;
//   - Asio appears only in rendezvous/ and ps/ sources;
//   - no layer, loss or strategy type is compared by its name outside the
//     readers (the Keras file readers, the strategy section's reader): after
//     parsing they are LayerKind values and registry facts.
// (The direction of dependencies between modules is the build's: each module
// sees only the include roots of what it links, docs/architecture.md.)
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// "path:line: text" of every line of the .h/.cpp/.inc files under `dirs` (from
// the source root) that matches `pattern`, outside `allowed` (path prefixes),
// comment lines left out.
std::vector<std::string> find_lines(const std::vector<std::string>& dirs, const std::regex& pattern,
                                    const std::vector<std::string>& allowed) {
  const fs::path root = DTRAIN_SOURCE_DIR;
  std::vector<std::string> found;
  for (const std::string& dir : dirs)
    for (const auto& entry : fs::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".inc")) continue;
      const std::string rel = fs::relative(entry.path(), root).string();
      bool skip = false;
      for (const std::string& a : allowed) skip = skip || rel.rfind(a, 0) == 0;
      if (skip) continue;
      std::ifstream in(entry.path());
      std::string line;
      for (int n = 1; std::getline(in, line); ++n) {
        const size_t text = line.find_first_not_of(" \t");
        if (text == std::string::npos || line.compare(text, 2, "//") == 0) continue;
        if (std::regex_search(line, pattern)) found.push_back(rel + ":" + std::to_string(n) + ": " + line);
      }
    }
  return found;
}

// A Communicator::split call: `x->split(` or `x.split(`, but not a layer's
// split (nn::Dense, Embedding, attention: tensor_parallel.cpp's `dense->split(`).
const std::regex kSplitCall(R"((->|\.)split\()");
const std::regex kLayerSplit(R"(\b(dense|table|tokens|attention)->split\()");
std::vector<std::string> communicator_splits(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  for (const std::string& l : lines)
    if (!std::regex_search(l, kLayerSplit)) out.push_back(l);
  return out;
}

std::string lines_text(const std::vector<std::string>& lines) {
  std::string s;
  for (const std::string& l : lines) s += l + "\n";
  return s;
}

}  // namespace

TEST_CASE("architecture: no communicator is split outside the runtime, the backends and the grid's one function") {
  // The scanner sees a split, and tells a layer's from a communicator's.
  CHECK(std::regex_search("  peers_ = workers_->split(color, key);", kSplitCall));
  CHECK(communicator_splits({"a.cpp:1:   dense->split({kind, parts});"}).empty());
  CHECK(communicator_splits({"a.cpp:1:   auto g = workers.split(c, i);"}).size() == 1);
  const std::vector<std::string> found = communicator_splits(find_lines(
      {"lib", "apps"}, kSplitCall, {"lib/comm/", "lib/runtime/", "lib/strategy/parallel/grid_groups.cpp"}));
  INFO("communicator splits outside runtime/, comm/ and strategy/parallel/grid_groups.cpp:\n" << lines_text(found));
  CHECK(found.empty());
}

TEST_CASE("architecture: the environment is read once, by runtime::Environment, but for the listed exceptions") {
  const std::regex reads(R"(\bgetenv\s*\(|\benviron\b)");
  CHECK(std::regex_search("  const char* id = std::getenv(\"NCCL_HOSTID\");", reads));
  CHECK_FALSE(std::regex_search("  env.host.nccl_hostid = id;", reads));
  const std::vector<std::string> allowed = {
      "lib/runtime/environment.",  // the one reader
      "lib/launch/",               // dtrain launch hands its environment on to the tasks it starts
      "apps/dtrain/openmp_wait.cpp",      // before main(): whether to re-exec with an OpenMP wait policy
      "apps/dtrain/bench_rendezvous.cpp",  // hands the environment on to the tasks it starts
  };
  const std::vector<std::string> found = find_lines({"lib", "apps"}, reads, allowed);
  INFO("environment read outside runtime/environment.cpp:\n" << lines_text(found));
  CHECK(found.empty());
}

TEST_CASE("architecture: Asio only inside the rendezvous module's transport, out of every public header") {
  const std::regex asio(R"(#include\s*[<"]asio)");
  CHECK(std::regex_search("#include <asio.hpp>", asio));
  // Its sources and the one internal header that holds the Asio objects.
  std::vector<std::string> found = find_lines({"lib", "apps"}, asio, {"lib/rendezvous/"});
  for (const std::string& line : find_lines({"lib/rendezvous"}, asio, {}))
    if (line.find(".h:") != std::string::npos && line.rfind("lib/rendezvous/asio_transport.h:", 0) != 0)
      found.push_back(line);
  INFO("Asio included outside lib/rendezvous's sources and asio_transport.h:\n" << lines_text(found));
  CHECK(found.empty());
  const std::regex internal(R"(#include\s*"rendezvous/asio_transport\.h")");
  const std::vector<std::string> reached = find_lines({"lib", "apps"}, internal, {"lib/rendezvous/"});
  INFO("rendezvous/asio_transport.h included outside lib/rendezvous:\n" << lines_text(reached));
  CHECK(reached.empty());
}

TEST_CASE("architecture: layer, loss and strategy types are compared as kinds and facts, not names, after parsing") {
  const std::regex by_name(
      R"re([!=]=\s*"(Dense|Conv2D|MaxPooling2D|AveragePooling2D|GlobalAveragePooling2D|Flatten|Dropout|)re"
      R"re(BatchNormalization|Activation|Residual|Embedding|TokenAndPositionEmbedding|PositionEmbedding|)re"
      R"re(LayerNormalization|MultiHeadAttention|TransformerDecoder|sparse_categorical_crossentropy|)re"
      R"re(categorical_crossentropy|mse|one_device|mirrored|multi_worker_mirrored|central_storage|)re"
      R"re(parameter_server|pipeline)")re");
  CHECK(std::regex_search(R"(    if (layer.type == "TransformerDecoder"))", by_name));
  CHECK(std::regex_search(R"(  if (type != "one_device" && type != "mirrored"))", by_name));
  CHECK_FALSE(std::regex_search(R"(    if (layer.kind == nn::LayerKind::kTransformerDecoder))", by_name));
  const std::vector<std::string> found = find_lines(
      {"lib", "apps"}, by_name, {"lib/nn/keras_model.cpp", "lib/nn/keras_graph.cpp", "lib/strategy/registry.cpp"});
  INFO("type names compared outside the readers:\n" << lines_text(found));
  CHECK(found.empty());
}

TEST_CASE("architecture: task types are compared as config::TaskType kinds outside the cluster readers") {
  const std::regex by_name(R"re(([!=]=\s*"(chief|worker|ps|evaluator)")|(count\("(chief|worker|ps|evaluator)"\)))re");
  CHECK(std::regex_search(R"(    if (t.type == "evaluator" || workers))", by_name));
  CHECK(std::regex_search(R"(  const int ps = cluster.count("ps");)", by_name));
  CHECK_FALSE(std::regex_search(R"(    if (t.is(config::TaskType::kEvaluator)))", by_name));
  const std::vector<std::string> found = find_lines({"lib", "apps"}, by_name, {"lib/config/"});
  INFO("task type names compared outside lib/config/:\n" << lines_text(found));
  CHECK(found.empty());
}

TEST_CASE("architecture: strategy/planning/ is a floor: the rules read specs and registry facts, no strategy code") {
  // What a planning rule may include of strategy/: its own folder, the specs and
  // the registry's facts; never the Strategy interface, a strategy, a sync or a
  // parallel part (what the execution plan applies must not need them).
  const std::regex strategy_include(R"re(#include\s*"strategy/)re");
  const std::regex allowed(R"re(#include\s*"strategy/(planning/[a-z_]+\.h|strategy_spec\.h|registry\.h)")re");
  CHECK(std::regex_search(R"(#include "strategy/sync/gradient_sync.h")", strategy_include));
  CHECK(std::regex_search(R"(#include "strategy/planning/parallel_grid.h")", allowed));
  CHECK_FALSE(std::regex_search(R"(#include "strategy/strategy.h")", allowed));
  std::vector<std::string> found;
  for (const std::string& line : find_lines({"lib/strategy/planning"}, strategy_include, {}))
    if (!std::regex_search(line, allowed)) found.push_back(line);
  INFO("strategy/planning/ including strategy code:\n" << lines_text(found));
  CHECK(found.empty());
  // registry.h's facts stand without the Strategy interface.
  for (const std::string& line : find_lines({"lib/strategy"}, strategy_include, {}))
    if (line.rfind("lib/strategy/registry.h:", 0) == 0) CHECK(std::regex_search(line, allowed));
}
