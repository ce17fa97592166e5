// Resuming reads only the tensors the strategy says it loads
// (Strategy::state_names_to_load): a strategy that loads one layer resumes from a
// sharded checkpoint whose other layer's file is garbage, with that layer's saved
// values; a name it did not list is an InternalError (it was not read), and a
// listed name the checkpoint lacks is still the strategy's clear ConfigError.
// one_device's default list is every tensor of its checkpoint.
#include <catch2/catch.hpp>
#include <functional>
#include <set>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/durable_file.h"
#include "core/error.h"
#include "support/temp_dir.h"
#include "support/tiny_dense_job.h"
#include "trainer/checkpointing.h"

using namespace dtrain;

namespace {

// one_device that says it loads only `names`, and loads with `load`.
class Narrowed : public strategy::Strategy {
 public:
  using Load = std::function<void(const TensorLookup& model, const TensorLookup& optimizer)>;
  Narrowed(std::unique_ptr<strategy::Strategy> inner, std::vector<std::string> names, Load load)
      : inner_(std::move(inner)), names_(std::move(names)), load_(std::move(load)) {}

  std::vector<std::string> state_names_to_load() override { return names_; }
  void load_state(const TensorLookup& model, const TensorLookup& optimizer) override { load_(model, optimizer); }

  std::string name() const override { return "narrowed"; }
  int num_replicas_in_sync() const override { return inner_->num_replicas_in_sync(); }
  int local_replicas() const override { return inner_->local_replicas(); }
  void train_step(const std::vector<data::Batch>& micro_batches, int64_t step, nn::LossStats& stats,
                  const std::vector<data::Batch>* upcoming) override {
    inner_->train_step(micro_batches, step, stats, upcoming);
  }
  void request_stop() override { inner_->request_stop(); }
  bool stop_agreed() const override { return inner_->stop_agreed(); }
  void eval_step(const data::Batch& batch, nn::LossStats& stats) override { inner_->eval_step(batch, stats); }
  void sync_state() override { inner_->sync_state(); }
  nn::Sequential& model() override { return inner_->model(); }
  optim::Optimizer& optimizer() override { return inner_->optimizer(); }
  strategy::StepTimings timings() const override { return inner_->timings(); }

 private:
  std::unique_ptr<strategy::Strategy> inner_;
  std::vector<std::string> names_;
  Load load_;
};

// The params (or slots) of `all` whose names start with `prefix`.
std::vector<nn::Param*> starting_with(const std::vector<nn::Param*>& all, const std::string& prefix) {
  std::vector<nn::Param*> out;
  for (nn::Param* p : all)
    if (p->name.rfind(prefix, 0) == 0) out.push_back(p);
  return out;
}

std::vector<std::string> names_of(const std::vector<nn::Param*>& params) {
  std::vector<std::string> out;
  for (const nn::Param* p : params) out.push_back(p->name);
  return out;
}

// The checkpoint at `path` again, as a sharded one at `step` in `dir`: dense_1's
// tensors in stage-1.safetensors and, in place of dense's, a stage-0.safetensors
// that is not safetensors at all (verify() passes: the manifest has its digest).
void save_with_garbage_first_layer(const std::string& dir, const std::string& path, int64_t step) {
  const checkpoint::LoadedCheckpoint c = checkpoint::CheckpointStore::load(path);
  checkpoint::Manifest m = c.manifest;
  m.step = step;
  std::vector<checkpoint::TensorRef> second;
  for (const auto& [file, layout] : {std::pair{&c.model, &m.sharded.model}, std::pair{&c.optimizer, &m.sharded.optimizer}})
    for (const checkpoint::NamedTensor& t : file->tensors) {
      const bool first = t.name.rfind("dense/", 0) == 0;
      layout->push_back({t.name, t.shape, {{first ? "stage-0.safetensors" : "stage-1.safetensors", t.name, 0}}});
      if (!first) second.push_back({t.name, t.shape, t.tensor.data()});
    }
  checkpoint::CheckpointStore(dir).save_sharded(m, [&](const std::string& tmp) {
    std::map<std::string, checkpoint::FileDigest> files;
    checkpoint::FileDigest& d = files["stage-1.safetensors"];
    d.sha256 = checkpoint::write_safetensors(tmp + "/stage-1.safetensors", second, {}, &d.bytes);
    const std::string garbage = "not a safetensors file";
    files["stage-0.safetensors"] = {checkpoint::write_file_durably(tmp + "/stage-0.safetensors", garbage),
                                    garbage.size()};
    return files;
  });
}

}  // namespace

TEST_CASE("resuming reads only the tensors the strategy lists") {
  test::TempDir dir;
  job::JobConfig job = test::tiny_dense_job("one_device");
  job.checkpoint.dir = dir.path();
  const strategy::StrategyContext context{nullptr, 1};

  // Train a few steps and save; keep dense_1/kernel's and its slot's values.
  std::vector<float> saved_kernel, saved_m;
  std::set<std::string> in_checkpoint;
  {
    auto s = strategy::make_strategy(job.strategy_job(), context);
    for (int64_t step = 0; step < 3; ++step) {
      nn::LossStats stats;
      s->train_step({test::tiny_dense_batch(step, 0, 4)}, step, stats);
    }
    trainer::Checkpointer checkpointer(job, *s, nullptr);
    const std::string path = checkpointer.save_now(3, 0, 3, 4);
    REQUIRE(!path.empty());
    const Tensor& k = starting_with(s->model().params(), "dense_1/kernel").at(0)->value;
    saved_kernel.assign(k.data(), k.data() + k.numel());
    const Tensor& m = starting_with(s->optimizer().state(), "dense_1/kernel/m").at(0)->value;
    saved_m.assign(m.data(), m.data() + m.numel());
    for (const char* file : {checkpoint::kModelFile, checkpoint::kOptimizerFile})
      for (const auto& t : checkpoint::read_safetensors_header(path + "/" + file).tensors) in_checkpoint.insert(t.name);

    // one_device's default: every tensor its checkpoint holds.
    const std::vector<std::string> defaults = s->state_names_to_load();
    CHECK(std::set<std::string>(defaults.begin(), defaults.end()) == in_checkpoint);
    CHECK(defaults.size() == in_checkpoint.size());
    save_with_garbage_first_layer(dir.path(), path, 5);
  }
  job.checkpoint.resume = true;

  SECTION("a strategy that loads everything fails on the garbage file") {
    auto s = strategy::make_strategy(job.strategy_job(), context);
    trainer::Checkpointer checkpointer(job, *s, nullptr);
    CHECK_THROWS_WITH(checkpointer.resume(4, 100), Catch::Contains("stage-0.safetensors"));
  }

  SECTION("a strategy that loads one layer gets that layer, and only what it listed was read") {
    auto inner = strategy::make_strategy(job.strategy_job(), context);
    const std::vector<nn::Param*> params = starting_with(inner->model().params(), "dense_1/");
    const std::vector<nn::Param*> slots = starting_with(inner->optimizer().state(), "dense_1/");
    REQUIRE(params.size() == 2);
    REQUIRE(slots.size() == 4);  // Adam: m and v of kernel and bias
    std::vector<std::string> names = names_of(params);
    for (const std::string& n : names_of(slots)) names.push_back(n);
    bool loaded = false;
    Narrowed narrowed(std::move(inner), names, [&](const auto& model, const auto& optimizer) {
      strategy::load_named(params, model, "model");
      strategy::load_named(slots, optimizer, "optimizer state");
      // dense/kernel is in the checkpoint but was not asked for: never read.
      CHECK_THROWS_WITH(model("dense/kernel"), Catch::Contains("dense/kernel") &&
                                                   Catch::Contains("state_names_to_load() does not list"));
      CHECK_THROWS_AS(optimizer("dense/kernel/m"), InternalError);
      loaded = true;
    });
    trainer::Checkpointer checkpointer(job, narrowed, nullptr);
    const trainer::ResumePoint point = checkpointer.resume(4, 100);
    CHECK(point.resumed);
    CHECK(point.global_step == 5);
    CHECK(loaded);
    const Tensor& k = params[0]->value;
    CHECK(std::vector<float>(k.data(), k.data() + k.numel()) == saved_kernel);
    REQUIRE(slots[0]->name == "dense_1/kernel/m");
    CHECK(std::vector<float>(slots[0]->value.data(), slots[0]->value.data() + slots[0]->value.numel()) == saved_m);
  }

  SECTION("a listed name the checkpoint lacks is the strategy's ConfigError naming it") {
    nn::Param other{"dense_2/kernel", Tensor({8, 3}), Tensor()};
    Narrowed narrowed(strategy::make_strategy(job.strategy_job(), context), {"dense_1/kernel", "dense_2/kernel"},
                      [&](const auto& model, const auto&) { strategy::load_named({&other}, model, "model"); });
    trainer::Checkpointer checkpointer(job, narrowed, nullptr);
    CHECK_THROWS_WITH(checkpointer.resume(4, 100),
                      Catch::Contains("the checkpoint's model has no tensor 'dense_2/kernel'"));
    CHECK_THROWS_AS(checkpointer.resume(4, 100), ConfigError);
  }
}
