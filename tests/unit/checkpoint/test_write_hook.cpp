// The crash-during-save test hook (set_write_hook): it fires at exactly the chosen
// byte, counted over every DurableFile of the process; and a process SIGKILLed by it
// in the middle of its second save leaves the first checkpoint loadable.
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <stdexcept>

#include "checkpoint/checkpoint_store.h"
#include "checkpoint/durable_file.h"
#include "support/temp_dir.h"

using namespace dtrain;
using namespace dtrain::checkpoint;
namespace fs = std::filesystem;

namespace {

struct HookFired : std::runtime_error {
  HookFired() : std::runtime_error("hook fired") {}
};

std::vector<TensorRef> model_refs(const std::vector<float>& kernel) { return {{"dense/kernel", {4, 8}, kernel.data()}}; }
std::vector<TensorRef> optimizer_refs(const std::vector<float>& m) { return {{"dense/kernel/m", {4, 8}, m.data()}}; }

Manifest manifest(int64_t step) {
  Manifest m;
  m.step = step;
  m.world_size = 1;
  m.config_sha256 = "abc";
  return m;
}

uint64_t dir_bytes(const fs::path& dir) {
  uint64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) total += fs::file_size(e.path());
  return total;
}

}  // namespace

TEST_CASE("the write hook fires once, at exactly its byte, counted across files") {
  test::TempDir dir;
  const std::string payload(100, 'x');
  int calls = 0;
  uint64_t seen = 0, on_disk = 0;
  const uint64_t at = total_bytes_written() + 130;  // 30 bytes into the second file
  set_write_hook(at, [&](uint64_t bytes) {
    ++calls;
    seen = bytes;
    CHECK(total_bytes_written() == bytes);
    on_disk = fs::file_size(dir.file("b"));
  });
  {
    DurableFile a(dir.file("a"));
    a.write(payload);
    a.close();
  }
  CHECK(calls == 0);
  DurableFile b(dir.file("b"));
  b.write(payload);
  CHECK(calls == 1);
  CHECK(seen == at);
  CHECK(on_disk == 30);
  b.write(payload);  // the hook has gone
  CHECK(calls == 1);
  b.close();
  CHECK(fs::file_size(dir.file("b")) == 200);  // a hook that returns lets the write finish
}

TEST_CASE("a write stopped by the hook leaves exactly the bytes before it on disk") {
  test::TempDir dir;
  set_write_hook(total_bytes_written() + 37, [](uint64_t) { throw HookFired(); });
  {
    DurableFile f(dir.file("partial"));
    CHECK_THROWS_AS(f.write(std::string(1000, 'y')), HookFired);
  }
  CHECK(fs::file_size(dir.file("partial")) == 37);
  set_write_hook(0, nullptr);  // an empty hook is "none"
  DurableFile g(dir.file("whole"));
  g.write(std::string(10, 'z'));
  g.close();
  CHECK(fs::file_size(dir.file("whole")) == 10);
}

TEST_CASE("SIGKILL in the middle of the second save leaves the first checkpoint loadable") {
  std::vector<float> kernel(32), m(32);
  for (size_t i = 0; i < kernel.size(); ++i) {
    kernel[i] = 0.5f * static_cast<float>(i);
    m[i] = -0.25f * static_cast<float>(i);
  }
  // The size of one checkpoint (every file), from a save into a directory of its own.
  test::TempDir probe;
  const std::string one = CheckpointStore(probe.path()).save(manifest(10), model_refs(kernel), optimizer_refs(m));
  const uint64_t one_bytes = dir_bytes(one);
  const uint64_t model_bytes = fs::file_size(fs::path(one) / kModelFile);

  test::TempDir dir;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child: two saves, killed halfway through the second one's model file.
    try {
      set_write_hook(total_bytes_written() + one_bytes + model_bytes / 2, [](uint64_t) { std::raise(SIGKILL); });
      CheckpointStore store(dir.path());
      store.save(manifest(10), model_refs(kernel), optimizer_refs(m));
      store.save(manifest(20), model_refs(kernel), optimizer_refs(m));
    } catch (...) {
      ::_exit(3);
    }
    ::_exit(0);  // not killed: the parent fails the test
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);

  std::vector<std::string> tmp_dirs;
  for (const auto& e : fs::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(".tmp-ckpt-00000020-", 0) == 0) tmp_dirs.push_back(e.path().string());
  REQUIRE(tmp_dirs.size() == 1);
  CHECK(fs::file_size(fs::path(tmp_dirs[0]) / kModelFile) == model_bytes / 2);
  CHECK_FALSE(fs::exists(fs::path(tmp_dirs[0]) / kOptimizerFile));
  CHECK_FALSE(fs::exists(dir.file("ckpt-00000020")));

  const CheckpointStore store(dir.path());
  std::vector<std::string> skipped;
  const auto latest = store.latest_good(&skipped);
  REQUIRE(latest.has_value());
  CHECK(fs::path(*latest).filename() == "ckpt-00000010");
  CHECK(skipped.empty());
  const LoadedCheckpoint c = CheckpointStore::load(*latest);
  REQUIRE(c.model.find("dense/kernel") != nullptr);
  CHECK(c.model.find("dense/kernel")->data()[31] == kernel[31]);
}
