// TensorBoard event files, as Keras' TensorBoard callback writes them.
//
// An event file is a TFRecord file (data/tfrecord.h) of Event protocol buffers
// (proto/tf_summary.proto): first {file_version: "brain.Event:2"}, then one
// Event per scalar with a Summary value {tag, tensor: float32 scalar, metadata:
// plugin "scalars"}, exactly what tf.summary.scalar writes. Each writer makes
// its own file, events.out.tfevents.<seconds>.<host>.<pid>.<n>.v2, in its
// directory; TensorBoard merges the files of one directory.
//
// TensorBoardLog lays the directories out like Keras' callback: <dir>/train
// (batch_* tags at the global step, epoch_* tags at the 0-based epoch) and
// <dir>/validation (epoch_loss, epoch_accuracy of the test data), plus
// <dir>/evaluation for an evaluator task (evaluation_*_vs_iterations at the
// checkpoint's step, the tags Keras uses for the same figures).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/tfrecord.h"

namespace dtrain::trainer {

class SummaryWriter {
 public:
  // Creates `dir` and a new event file in it. IoError when either fails.
  explicit SummaryWriter(const std::string& dir);
  ~SummaryWriter();
  SummaryWriter(const SummaryWriter&) = delete;
  SummaryWriter& operator=(const SummaryWriter&) = delete;

  // One scalar (stored as float32, as tf.summary.scalar does).
  void scalar(const std::string& tag, int64_t step, double value);
  void flush();  // to the operating system, so TensorBoard sees it while training runs
  const std::string& path() const { return file_.path(); }

 private:
  data::TfRecordWriter file_;
};

class TensorBoardLog {
 public:
  // Writes under `dir` (e.g. <output.dir>/tensorboard); the sub-directories are
  // made when first written to.
  explicit TensorBoardLog(std::string dir);
  ~TensorBoardLog();

  SummaryWriter& train();
  SummaryWriter& validation();
  SummaryWriter& evaluation();
  void flush();

 private:
  SummaryWriter& writer(std::unique_ptr<SummaryWriter>& w, const char* name);
  std::string dir_;
  std::unique_ptr<SummaryWriter> train_, validation_, evaluation_;
};

}  // namespace dtrain::trainer
