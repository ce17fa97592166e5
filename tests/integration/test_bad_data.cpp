// Bad data behind a valid config, run through the real dtrain binary: a missing
// file, a truncated gzip file (a cut copy of the real Fashion-MNIST test images), a
// truncated plain IDX file and image/label files of different lengths (hand-made in
// the test's temporary directory) must be exit 3 naming the file; labels beyond the
// model's classes are a config problem (exit 2) naming the label and the class
// count. `validate` must catch the same problems with the same exit codes.
#include <catch2/catch.hpp>

#include "integration/job_files.h"
#include "integration/run_dtrain.h"

namespace dtrain::integration {
namespace {

constexpr int kConfigError = 2;
constexpr int kDataError = 3;

// The small MLP job with data.test read from `images` and `labels`.
nlohmann::json job_with_test_files(const std::string& images, const std::string& labels) {
  nlohmann::json job = small_mlp_job();
  job["data"]["test"]["images"] = images;
  job["data"]["test"]["labels"] = labels;
  return job;
}

// Runs `command` on `job` and checks the error.
void check_job_error(const std::string& command, const nlohmann::json& job, int exit_code,
                     const std::vector<std::string>& needles) {
  TempDir tmp;
  INFO("dtrain " << command);
  check_error(run_dtrain({command, "--config", write_job(tmp, job)}), exit_code, needles);
}

}  // namespace

TEST_CASE("a missing data file is exit 3 and names the path", "[integration]") {
  TempDir tmp;
  const std::string missing = tmp.file("no-such-images-idx3-ubyte.gz");
  nlohmann::json job = small_mlp_job();
  job["data"]["train"]["images"] = missing;
  for (const char* command : {"run", "validate"})
    check_job_error(command, job, kDataError, {"data.train.images", missing});
}

TEST_CASE("a truncated gzip IDX file is exit 3 and names the path", "[integration]") {
  TempDir tmp;
  const std::string whole = read_file(fashion_mnist_file("t10k-images-idx3-ubyte.gz"));
  REQUIRE(whole.size() > 200000);
  const std::string cut = tmp.write("t10k-images-cut.gz", whole.substr(0, 100000));
  const nlohmann::json job = job_with_test_files(cut, fashion_mnist_file("t10k-labels-idx1-ubyte.gz"));
  for (const char* command : {"run", "validate"})
    check_job_error(command, job, kDataError, {"data.test.images", cut, "truncated"});
}

TEST_CASE("a truncated plain IDX file is exit 3 and names the path", "[integration]") {
  TempDir tmp;
  // The header announces 10 images of 28x28, but only 5 follow.
  const std::string images = tmp.write("images.idx", idx_bytes({10, 28, 28}, 5 * 28 * 28));
  const std::string labels = tmp.write("labels.idx", idx_bytes({10}, 10));
  const nlohmann::json job = job_with_test_files(images, labels);
  for (const char* command : {"run", "validate"})
    check_job_error(command, job, kDataError, {"data.test.images", images, "truncated"});
}

TEST_CASE("an IDX file cut inside its header is exit 3 and names the path", "[integration]") {
  TempDir tmp;
  const std::string labels = tmp.write("labels.idx", idx_bytes({10}, 10).substr(0, 6));
  const nlohmann::json job = job_with_test_files(fashion_mnist_file("t10k-images-idx3-ubyte.gz"), labels);
  for (const char* command : {"run", "validate"})
    check_job_error(command, job, kDataError, {"data.test.labels", labels});
}

TEST_CASE("images and labels of different counts are exit 3 naming both counts", "[integration]") {
  TempDir tmp;
  const std::string images = tmp.write("images.idx", idx_bytes({10, 28, 28}, 10 * 28 * 28));
  const std::string labels = tmp.write("labels.idx", idx_bytes({12}, 12));
  const nlohmann::json job = job_with_test_files(images, labels);
  for (const char* command : {"run", "validate"})
    check_job_error(command, job, kDataError, {"data.test", "10 images", "12 labels"});
}

TEST_CASE("labels outside the class range are exit 2 naming the label and the class count",
          "[integration]") {
  // Fashion-MNIST labels are 0..9; a last Dense layer of 5 units gives 5 classes.
  nlohmann::json job = small_mlp_job();
  job["model"]["layers"].back()["units"] = 5;
  check_job_error("run", job, kConfigError, {"data.train", "label 9", "5 classes"});
}

TEST_CASE("validate reports labels outside the class range like run does", "[integration]") {
  nlohmann::json job = small_mlp_job();
  job["model"]["layers"].back()["units"] = 5;
  check_job_error("validate", job, kConfigError, {"data.train", "label 9", "5 classes"});
}

}  // namespace dtrain::integration
