// CheckpointStore: save/load round trip, keep-N pruning, that incomplete, corrupt
// and leftover temporary checkpoints are skipped for the previous good one, and
// loads of only some tensors (plain and sharded).
#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>

#include <set>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/durable_file.h"
#include "checkpoint/manifest.h"
#include "core/error.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::checkpoint;
namespace fs = std::filesystem;

namespace {

struct State {
  std::vector<float> kernel, bias, m;
  explicit State(float seed) : kernel(6), bias(3), m(6) {
    for (size_t i = 0; i < kernel.size(); ++i) kernel[i] = seed + 0.25f * static_cast<float>(i);
    for (size_t i = 0; i < bias.size(); ++i) bias[i] = -seed - static_cast<float>(i);
    for (size_t i = 0; i < m.size(); ++i) m[i] = seed * 1e-3f * static_cast<float>(i);
  }
  std::vector<TensorRef> model() const { return {{"dense/kernel", {2, 3}, kernel.data()}, {"dense/bias", {3}, bias.data()}}; }
  std::vector<TensorRef> optimizer() const { return {{"dense/kernel/m", {2, 3}, m.data()}}; }
};

Manifest manifest(int64_t step) {
  Manifest m;
  m.step = step;
  m.epoch = step / 10;
  m.samples_seen = step * 32;
  m.world_size = 2;
  m.config_sha256 = "abc123";
  m.rng_json = R"({"seed":42,"shuffle_epoch":3})";
  return m;
}

std::string save_step(CheckpointStore& store, int64_t step) {
  const State s(static_cast<float>(step));
  return store.save(manifest(step), s.model(), s.optimizer());
}

std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

void flip_byte(const std::string& path, size_t from_end) {
  std::string bytes = test::slurp(path);
  bytes[bytes.size() - 1 - from_end] ^= 0x01;
  test::spit(path, bytes);
}

}  // namespace

TEST_CASE("a saved checkpoint loads back exactly, with its manifest") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  const std::string path = save_step(store, 120);
  CHECK(fs::path(path).filename() == "ckpt-00000120");
  CHECK(names_in(path) == std::vector<std::string>{"DONE", "manifest.json", "model.safetensors", "optimizer.safetensors"});
  CHECK(CheckpointStore::verify(path).empty());

  const LoadedCheckpoint c = CheckpointStore::load(path);
  CHECK(c.manifest.step == 120);
  CHECK(c.manifest.epoch == 12);
  CHECK(c.manifest.samples_seen == 120 * 32);
  CHECK(c.manifest.world_size == 2);
  CHECK(c.manifest.config_sha256 == "abc123");
  CHECK(c.manifest.rng_json == R"({"seed":42,"shuffle_epoch":3})");
  CHECK(c.manifest.dtrain_version == DTRAIN_VERSION);
  REQUIRE(c.manifest.files.count("model.safetensors") == 1);
  CHECK(c.manifest.files.at("model.safetensors").bytes == fs::file_size(fs::path(path) / "model.safetensors"));

  const State s(120.0f);
  const Tensor* k = c.model.find("dense/kernel");
  REQUIRE(k != nullptr);
  CHECK(k->shape() == Shape{2, 3});
  CHECK(std::memcmp(k->data(), s.kernel.data(), 6 * sizeof(float)) == 0);
  REQUIRE(c.optimizer.find("dense/kernel/m") != nullptr);
  CHECK(std::memcmp(c.optimizer.find("dense/kernel/m")->data(), s.m.data(), 6 * sizeof(float)) == 0);
  CHECK(c.model.metadata.at("dtrain_step") == "120");
}

TEST_CASE("saving 5 checkpoints with keep 3 leaves the newest 3, the newest is latest_good") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  for (int64_t step : {10, 20, 30, 40, 50}) save_step(store, step);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"ckpt-00000030", "ckpt-00000040", "ckpt-00000050"});
  std::vector<std::string> skipped;
  const auto latest = store.latest_good(&skipped);
  REQUIRE(latest.has_value());
  CHECK(fs::path(*latest).filename() == "ckpt-00000050");
  CHECK(skipped.empty());
  const auto all = store.list();
  REQUIRE(all.size() == 3);
  CHECK(all[0].step == 30);
  CHECK(all[2].good());
}

TEST_CASE("a checkpoint without DONE is skipped") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  save_step(store, 10);
  const std::string newer = save_step(store, 20);
  fs::remove(fs::path(newer) / "DONE");  // as if the process died between rename and DONE
  std::vector<std::string> skipped;
  const auto latest = store.latest_good(&skipped);
  REQUIRE(latest.has_value());
  CHECK(fs::path(*latest).filename() == "ckpt-00000010");
  REQUIRE(skipped.size() == 1);
  CHECK_THAT(skipped[0], Catch::Contains("ckpt-00000020") && Catch::Contains("no DONE"));
  CHECK_THROWS_AS(CheckpointStore::load(newer), IoError);

  // The next save replaces nothing good and cleans up the incomplete one.
  save_step(store, 30);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"ckpt-00000010", "ckpt-00000030"});
}

TEST_CASE("a corrupted file is skipped with a warning naming it, and the previous one is used") {
  for (const char* file : {"model.safetensors", "optimizer.safetensors", "manifest.json"}) {
    DYNAMIC_SECTION(file) {
      test::TempDir dir;
      CheckpointStore store(dir.path(), 3);
      save_step(store, 10);
      const std::string newer = save_step(store, 20);
      flip_byte((fs::path(newer) / file).string(), 2);
      std::vector<std::string> skipped;
      const auto latest = store.latest_good(&skipped);
      REQUIRE(latest.has_value());
      CHECK(fs::path(*latest).filename() == "ckpt-00000010");
      REQUIRE(skipped.size() == 1);
      CHECK_THAT(skipped[0], Catch::Contains("ckpt-00000020") && Catch::Contains(file) && Catch::Contains("corrupt"));
      CHECK_THROWS_WITH(CheckpointStore::load(newer), Catch::Contains(file));
    }
  }
}

TEST_CASE("a truncated file is reported as truncated") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  const std::string path = save_step(store, 10);
  const fs::path model = fs::path(path) / "model.safetensors";
  fs::resize_file(model, fs::file_size(model) - 4);
  CHECK_THAT(CheckpointStore::verify(path), Catch::Contains("model.safetensors") && Catch::Contains("truncated"));
  CHECK_FALSE(store.latest_good(nullptr).has_value());
}

TEST_CASE("a leftover temporary directory is ignored, then cleaned up by the next save") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  save_step(store, 10);
  // A save of step 20 that crashed before its rename: complete-looking files, even DONE.
  const fs::path tmp = dir.file(".tmp-ckpt-00000020-deadbeef");
  fs::create_directories(tmp);
  fs::copy(dir.file("ckpt-00000010"), tmp, fs::copy_options::recursive);
  std::vector<std::string> skipped;
  const auto latest = store.latest_good(&skipped);
  REQUIRE(latest.has_value());
  CHECK(fs::path(*latest).filename() == "ckpt-00000010");
  CHECK(skipped.empty());
  CHECK(store.list().size() == 1);

  save_step(store, 30);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"ckpt-00000010", "ckpt-00000030"});
}

TEST_CASE("an empty or missing store has no latest checkpoint") {
  test::TempDir dir;
  CHECK_FALSE(CheckpointStore(dir.file("nothing")).latest_good().has_value());
  CHECK(CheckpointStore(dir.file("nothing")).list().empty());
  CHECK_THROWS_AS(CheckpointStore(dir.path(), 0), ConfigError);
}

TEST_CASE("re-saving a step replaces that checkpoint") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  save_step(store, 10);
  State s(99.0f);
  const std::string path = store.save(manifest(10), s.model(), s.optimizer());
  const LoadedCheckpoint c = CheckpointStore::load(path);
  CHECK(c.model.find("dense/kernel")->data()[0] == 99.0f);
  CHECK(names_in(dir.path()) == std::vector<std::string>{"ckpt-00000010"});
}

TEST_CASE("manifest JSON round trip and errors") {
  Manifest m = manifest(5);
  m.dtrain_version = "0.1.0";
  m.files["model.safetensors"] = {"00ff", 12};
  const Manifest back = manifest_from_json(manifest_to_json(m), "m.json");
  CHECK(back.step == 5);
  CHECK(back.files.at("model.safetensors").bytes == 12);
  CHECK(back.files.at("model.safetensors").sha256 == "00ff");
  CHECK_THROWS_WITH(manifest_from_json("{}", "m.json"), Catch::Contains("m.json") && Catch::Contains("format"));
  CHECK_THROWS_AS(manifest_from_json("not json", "m.json"), IoError);
}

// Found by tests/fuzz/fuzz_manifest.cpp.
TEST_CASE("a manifest with a field of the wrong type or out of range is an IoError") {
  Manifest m = manifest(5);
  m.dtrain_version = "0.1.0";
  m.files["model.safetensors"] = {"00ff", 12};
  const std::string good = manifest_to_json(m);
  auto edited = [&](const std::string& from, const std::string& to) {
    std::string text = good;
    REQUIRE(text.find(from) != std::string::npos);
    return text.replace(text.find(from), from.size(), to);
  };
  auto expect_error = [](const std::string& text, const std::string& what) {
    INFO(text);
    CHECK_THROWS_AS(manifest_from_json(text, "ckpt/manifest.json"), IoError);
    CHECK_THROWS_WITH(manifest_from_json(text, "ckpt/manifest.json"),
                      Catch::Contains("bad checkpoint manifest ckpt/manifest.json") && Catch::Contains(what));
  };
  // A "format" that is not a string was nlohmann's type_error 302 ("type must be string").
  for (const char* format : {"1", "null", "[]", "{}"})
    expect_error(edited("\"dtrain-checkpoint\"", format), "\"format\" is not \"dtrain-checkpoint\"");
  expect_error(edited("\"format_version\": 1", "\"format_version\": 4294967297"), "format_version");
  // Numbers that did not fit (world_size became another int) or make no sense.
  expect_error(edited("\"world_size\": 2", "\"world_size\": 4294967298"), "\"world_size\" is 4294967298, not an integer from 1");
  expect_error(edited("\"world_size\": 2", "\"world_size\": 0"), "\"world_size\" is 0");
  expect_error(edited("\"step\": 5", "\"step\": -5"), "\"step\" is -5, not an integer from 0");
  expect_error(edited("\"step\": 5", "\"step\": 18446744073709551615"), "\"step\" is 18446744073709551615");
  // A file name with a control character is quoted escaped.
  std::string named = edited("\"model.safetensors\"", "\"a\\u0001b\"");
  named.replace(named.find("\"bytes\": 12"), 11, "\"bytes\": -1");
  expect_error(named, "files.a\\x01b needs");
}

namespace {

// The State's tensors cut in two parts each (rows of the kernel, halves of the
// bias and the slot) over two files, as two ps tasks write them.
ShardedLayout two_file_layout() {
  auto whole = [](const char* name, std::vector<int64_t> shape, const char* a, int64_t a_at, const char* b,
                  int64_t b_at) {
    return ShardedTensor{name, shape, {{"ps-00000-of-00002.safetensors", a, a_at}, {"ps-00001-of-00002.safetensors", b, b_at}}};
  };
  ShardedLayout l;
  l.model = {whole("dense/kernel", {2, 3}, "dense/kernel/part_0", 0, "dense/kernel/part_1", 3),
             whole("dense/bias", {3}, "dense/bias/part_0", 0, "dense/bias/part_1", 1)};
  std::swap(l.model[1].parts[0], l.model[1].parts[1]);  // parts in any order
  l.optimizer = {whole("dense/kernel/m", {2, 3}, "dense/kernel/part_0/m", 0, "dense/kernel/part_1/m", 3)};
  return l;
}

// Writes the two part files of State `s` into `dir` as two writers (ps tasks) would.
std::map<std::string, FileDigest> write_parts(const std::string& dir, const State& s) {
  const std::vector<std::vector<TensorRef>> files = {
      {{"dense/kernel/part_0", {1, 3}, s.kernel.data()}, {"dense/bias/part_0", {1}, s.bias.data()},
       {"dense/kernel/part_0/m", {1, 3}, s.m.data()}},
      {{"dense/kernel/part_1", {1, 3}, s.kernel.data() + 3}, {"dense/bias/part_1", {2}, s.bias.data() + 1},
       {"dense/kernel/part_1/m", {1, 3}, s.m.data() + 3}}};
  std::map<std::string, FileDigest> out;
  for (int p = 0; p < 2; ++p) {
    const std::string name = "ps-0000" + std::to_string(p) + "-of-00002.safetensors";
    FileDigest d;
    d.sha256 = write_safetensors(dir + "/" + name, files[p], {{"format", "dtrain"}}, &d.bytes);
    out[name] = d;
  }
  return out;
}

}  // namespace

TEST_CASE("a sharded checkpoint (each part file written by another) loads back as whole tensors") {
  test::TempDir tmp;
  CheckpointStore store(tmp.file("ckpts"));
  const State s(3.0f);
  Manifest m = manifest(40);
  m.sharded = two_file_layout();
  std::string seen_tmp;
  const std::string path = store.save_sharded(m, [&](const std::string& dir) {
    seen_tmp = dir;
    CHECK(fs::path(dir).filename().string().rfind(".tmp-ckpt-00000040-", 0) == 0);
    CHECK_FALSE(fs::exists(fs::path(dir) / kManifestFile));  // the manifest comes after the parts
    return write_parts(dir, s);
  });
  CHECK_FALSE(fs::exists(seen_tmp));
  CHECK(names_in(path) == std::vector<std::string>{"DONE", "manifest.json", "ps-00000-of-00002.safetensors",
                                                    "ps-00001-of-00002.safetensors"});
  CHECK(CheckpointStore::verify(path).empty());
  const LoadedCheckpoint c = CheckpointStore::load(path);
  CHECK(c.manifest.step == 40);
  CHECK(c.manifest.sharded.model.size() == 2);
  REQUIRE(c.model.tensors.size() == 2);
  CHECK(c.model.tensors[0].name == "dense/kernel");
  CHECK(c.model.tensors[0].shape == Shape{2, 3});
  CHECK(std::memcmp(c.model.find("dense/kernel")->data(), s.kernel.data(), 6 * sizeof(float)) == 0);
  CHECK(std::memcmp(c.model.find("dense/bias")->data(), s.bias.data(), 3 * sizeof(float)) == 0);
  CHECK(std::memcmp(c.optimizer.find("dense/kernel/m")->data(), s.m.data(), 6 * sizeof(float)) == 0);
  CHECK(c.model.metadata.at("dtrain_step") == "40");

  // A corrupt part file makes the checkpoint not good, naming the file.
  flip_byte(path + "/ps-00001-of-00002.safetensors", 2);
  CHECK_THAT(CheckpointStore::verify(path), Catch::Contains("ps-00001-of-00002.safetensors") && Catch::Contains("SHA-256"));
}

TEST_CASE("a sharded save whose files are not where the chief looks fails and leaves no checkpoint") {
  test::TempDir tmp;
  CheckpointStore store(tmp.file("ckpts"));
  save_step(store, 10);
  Manifest m = manifest(20);
  m.sharded = two_file_layout();
  // The writers wrote elsewhere (a checkpoint.dir that is not shared): only the digests come back.
  fs::create_directories(tmp.file("elsewhere"));
  CHECK_THROWS_WITH(store.save_sharded(m, [&](const std::string&) { return write_parts(tmp.file("elsewhere"), State(1)); }),
                    Catch::Contains("ps-00000-of-00002.safetensors is not in") && Catch::Contains("shared filesystem"));
  CHECK(names_in(tmp.file("ckpts")) == std::vector<std::string>{"ckpt-00000010"});
  CHECK(store.latest_good().value() == tmp.file("ckpts") + "/ckpt-00000010");
}

TEST_CASE("a sharded layout whose parts leave a gap is refused on load, naming the tensor") {
  test::TempDir tmp;
  CheckpointStore store(tmp.file("ckpts"));
  Manifest m = manifest(30);
  m.sharded = two_file_layout();
  m.sharded.model[1].parts[1].offset = 1;  // part_0 at 1 too: element 0 uncovered, element 1 twice
  const std::string path = store.save_sharded(m, [&](const std::string& dir) { return write_parts(dir, State(2)); });
  CHECK_THROWS_WITH(CheckpointStore::load(path),
                    Catch::Contains("dense/bias") && Catch::Contains("do not cover its 3 elements exactly"));
  // A part that names a tensor its file lacks.
  Manifest m2 = manifest(31);
  m2.sharded = two_file_layout();
  m2.sharded.optimizer[0].parts[1].tensor = "dense/kernel/part_1/v";
  const std::string path2 = store.save_sharded(m2, [&](const std::string& dir) { return write_parts(dir, State(2)); });
  CHECK_THROWS_WITH(CheckpointStore::load(path2), Catch::Contains("has no tensor 'dense/kernel/part_1/v'"));
}

TEST_CASE("manifest JSON round trip of a sharded layout") {
  Manifest m = manifest(5);
  m.dtrain_version = "0.1.0";
  m.sharded = two_file_layout();
  const Manifest back = manifest_from_json(manifest_to_json(m), "m.json");
  REQUIRE(back.sharded.model.size() == 2);
  CHECK(back.sharded.model[0].shape == std::vector<int64_t>{2, 3});
  CHECK(back.sharded.model[1].parts[0].tensor == "dense/bias/part_1");
  CHECK(back.sharded.model[1].parts[0].offset == 1);
  CHECK(back.sharded.optimizer[0].parts[1].file == "ps-00001-of-00002.safetensors");
  CHECK(manifest_from_json(manifest_to_json(manifest(5)), "m.json").sharded.empty());
  std::string text = manifest_to_json(m);
  text.replace(text.find("\"offset\": 1"), 11, "\"offset\": -1");
  CHECK_THROWS_WITH(manifest_from_json(text, "m.json"), Catch::Contains("offset"));
}

namespace {

TensorFilter only(std::set<std::string> names) {
  return [names = std::move(names)](const std::string& n) { return names.count(n) > 0; };
}

// A pipeline's layout: stage-0 holds dense/kernel (in two parts) and its slot,
// stage-1 holds dense/bias.
ShardedLayout two_stage_layout() {
  ShardedLayout l;
  l.model = {ShardedTensor{"dense/kernel", {2, 3}, {{"stage-0.safetensors", "kernel@3", 3}, {"stage-0.safetensors", "kernel@0", 0}}},
             ShardedTensor{"dense/bias", {3}, {{"stage-1.safetensors", "bias@0", 0}}}};
  l.optimizer = {ShardedTensor{"dense/kernel/m", {2, 3}, {{"stage-0.safetensors", "kernel/m@0", 0}}}};
  return l;
}

// Writes stage-0's file of State `s` into `dir`, and for stage-1 a file that is
// not safetensors at all (its digest true to it: verify() finds nothing wrong).
std::map<std::string, FileDigest> write_stages(const std::string& dir, const State& s) {
  std::map<std::string, FileDigest> out;
  FileDigest& a = out["stage-0.safetensors"];
  a.sha256 = write_safetensors(dir + "/stage-0.safetensors",
                               {{"kernel@0", {1, 3}, s.kernel.data()}, {"kernel@3", {1, 3}, s.kernel.data() + 3},
                                {"kernel/m@0", {2, 3}, s.m.data()}},
                               {}, &a.bytes);
  const std::string garbage = "not a safetensors file at all";
  out["stage-1.safetensors"] = {write_file_durably(dir + "/stage-1.safetensors", garbage), garbage.size()};
  return out;
}

// Saves State `s` at step 50 as two stages' files, stage-1's garbage (write_stages).
std::string save_two_stages(CheckpointStore& store, const State& s) {
  Manifest m = manifest(50);
  m.sharded = two_stage_layout();
  return store.save_sharded(m, [&](const std::string& dir) { return write_stages(dir, s); });
}

}  // namespace

TEST_CASE("a load of some tensors reads only those, from model and optimizer files") {
  test::TempDir dir;
  CheckpointStore store(dir.path(), 3);
  const std::string path = save_step(store, 7);
  const LoadedCheckpoint c = CheckpointStore::load(path, only({"dense/bias", "dense/kernel/m", "dense/nope"}));
  CHECK(c.manifest.step == 7);
  REQUIRE(c.model.tensors.size() == 1);
  CHECK(c.model.tensors[0].name == "dense/bias");
  CHECK(c.model.find("dense/kernel") == nullptr);
  CHECK(c.model.find("dense/nope") == nullptr);
  REQUIRE(c.optimizer.tensors.size() == 1);
  const State s(7.0f);
  CHECK(std::memcmp(c.model.find("dense/bias")->data(), s.bias.data(), 3 * sizeof(float)) == 0);
  CHECK(std::memcmp(c.optimizer.find("dense/kernel/m")->data(), s.m.data(), 6 * sizeof(float)) == 0);
  CHECK(c.model.metadata.at("dtrain_kind") == "model");
}

TEST_CASE("a sharded load of some tensors opens only the part files that hold them") {
  test::TempDir tmp;
  CheckpointStore store(tmp.file("ckpts"));
  const State s(5.0f);
  const std::string path = save_two_stages(store, s);
  REQUIRE(CheckpointStore::verify(path).empty());

  // stage-1's file is garbage: a load of everything fails on it, stage 0's load
  // never opens it.
  CHECK_THROWS_WITH(CheckpointStore::load(path), Catch::Contains("stage-1.safetensors"));
  CHECK_THROWS_AS(CheckpointStore::load(path), IoError);
  CHECK_THROWS_WITH(CheckpointStore::load(path, only({"dense/bias"})), Catch::Contains("stage-1.safetensors"));
  const LoadedCheckpoint c = CheckpointStore::load(path, only({"dense/kernel", "dense/kernel/m"}));
  REQUIRE(c.model.tensors.size() == 1);
  REQUIRE(c.model.find("dense/kernel") != nullptr);
  CHECK(c.model.find("dense/kernel")->shape() == Shape{2, 3});
  CHECK(std::memcmp(c.model.find("dense/kernel")->data(), s.kernel.data(), 6 * sizeof(float)) == 0);
  CHECK(c.model.find("dense/bias") == nullptr);
  REQUIRE(c.optimizer.tensors.size() == 1);
  CHECK(std::memcmp(c.optimizer.find("dense/kernel/m")->data(), s.m.data(), 6 * sizeof(float)) == 0);
}

TEST_CASE("a sharded load of some tensors checks that their parts cover them, and only theirs") {
  test::TempDir tmp;
  CheckpointStore store(tmp.file("ckpts"));
  Manifest m = manifest(30);
  m.sharded = two_file_layout();
  m.sharded.model[1].parts[1].offset = 1;  // dense/bias: element 0 uncovered, element 1 twice
  const std::string path = store.save_sharded(m, [&](const std::string& dir) { return write_parts(dir, State(2)); });
  CHECK_THROWS_WITH(CheckpointStore::load(path, only({"dense/bias"})),
                    Catch::Contains("dense/bias") && Catch::Contains("do not cover its 3 elements exactly"));
  const LoadedCheckpoint c = CheckpointStore::load(path, only({"dense/kernel"}));
  REQUIRE(c.model.tensors.size() == 1);
  const State s(2.0f);
  CHECK(std::memcmp(c.model.find("dense/kernel")->data(), s.kernel.data(), 6 * sizeof(float)) == 0);
  CHECK(c.optimizer.tensors.empty());
}
