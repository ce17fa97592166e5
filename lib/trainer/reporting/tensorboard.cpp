// Implementation of tensorboard.h: Event protocol buffers framed as TFRecords.
#include "trainer/reporting/tensorboard.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>

#include "core/error.h"
#include "core/strings.h"
#include "proto/tf_summary.pb.h"

namespace dtrain::trainer {
namespace {

constexpr int kDtFloat = 1;          // TensorFlow's DataType DT_FLOAT
constexpr int kDataClassScalar = 1;  // SummaryMetadata's DATA_CLASS_SCALAR

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// <dir>/events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2, the name TensorFlow gives.
std::string event_file_name(const std::string& dir) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw IoError(str("output.dir: cannot create directory '", dir, "': ", ec.message()));
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  return str(dir, "/events.out.tfevents.", static_cast<long long>(now_seconds()), ".", host, ".", ::getpid(), ".",
             counter++, ".v2");
}

std::string serialized(const tf::Event& event) {
  std::string bytes;
  event.SerializeToString(&bytes);
  return bytes;
}

}  // namespace

SummaryWriter::SummaryWriter(const std::string& dir) : file_(event_file_name(dir), "output.dir") {
  tf::Event version;
  version.set_wall_time(now_seconds());
  version.set_file_version("brain.Event:2");
  file_.write(serialized(version));
  file_.flush();
}

SummaryWriter::~SummaryWriter() = default;

void SummaryWriter::scalar(const std::string& tag, int64_t step, double value) {
  tf::Event event;
  event.set_wall_time(now_seconds());
  event.set_step(step);
  tf::Summary::Value* v = event.mutable_summary()->add_value();
  v->set_tag(tag);
  tf::SummaryMetadata* metadata = v->mutable_metadata();
  metadata->mutable_plugin_data()->set_plugin_name("scalars");
  metadata->set_data_class(kDataClassScalar);
  tf::TensorProto* tensor = v->mutable_tensor();
  tensor->set_dtype(kDtFloat);
  tensor->mutable_tensor_shape();  // a scalar: no dimensions
  tensor->add_float_val(static_cast<float>(value));
  file_.write(serialized(event));
}

void SummaryWriter::flush() { file_.flush(); }

TensorBoardLog::TensorBoardLog(std::string dir) : dir_(std::move(dir)) {}
TensorBoardLog::~TensorBoardLog() = default;

SummaryWriter& TensorBoardLog::writer(std::unique_ptr<SummaryWriter>& w, const char* name) {
  if (!w) w = std::make_unique<SummaryWriter>(str(dir_, "/", name));
  return *w;
}

SummaryWriter& TensorBoardLog::train() { return writer(train_, "train"); }
SummaryWriter& TensorBoardLog::validation() { return writer(validation_, "validation"); }
SummaryWriter& TensorBoardLog::evaluation() { return writer(evaluation_, "evaluation"); }

void TensorBoardLog::flush() {
  for (auto* w : {&train_, &validation_, &evaluation_})
    if (*w) (*w)->flush();
}

}  // namespace dtrain::trainer
