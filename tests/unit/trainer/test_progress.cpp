// The progress bar's text (trainer/reporting/progress.h): Keras' parts (the bar, the ETA,
// the time per step, loss and accuracy) fitted to the terminal's width, the least
// important dropped first on a narrow one.
#include <catch2/catch.hpp>

#include "trainer/reporting/progress.h"

using dtrain::trainer::progress_line;
using dtrain::trainer::StepProgress;

TEST_CASE("the progress bar has an ETA and ms/step, and fits every width") {
  StepProgress p;
  p.epoch = 2;
  p.epochs = 3;
  p.step = 120;
  p.steps = 469;
  p.loss = 0.55771;
  p.accuracy = 0.80684;
  p.samples_per_sec = 7603;
  p.seconds = 0.744;  // 6.2 ms a step: 349 steps left take about 2 s
  const std::string wide = progress_line(p, 200);
  CHECK(wide == "Epoch 2/3 120/469 [=======>......................] ETA 2s 6.2ms/step - loss: 0.5577 - accuracy: "
                "0.8068 - 7603 samples/s");
  for (const int width : {120, 80, 60, 40, 20, 5}) {
    CAPTURE(width);
    const std::string line = progress_line(p, width);
    CHECK(static_cast<int>(line.size()) <= width - 1);  // never wraps
    CHECK((line.rfind("Epoch 2/3 120/469 [", 0) == 0 || line.rfind("2/3 120/469 [", 0) == 0 || width < 14));
  }
  // Narrower: the samples/s go first, then the accuracy, the time per step, the
  // word "Epoch" (the ETA and the loss stay longest), and the bar shrinks.
  CHECK(progress_line(p, 100) == "Epoch 2/3 120/469 [==>.......] ETA 2s 6.2ms/step - loss: 0.5577 - accuracy: "
                                 "0.8068 - 7603 samples/s");
  CHECK(progress_line(p, 90) == "Epoch 2/3 120/469 [====>............] ETA 2s 6.2ms/step - loss: 0.5577 - "
                                "accuracy: 0.8068");
  CHECK(progress_line(p, 60) == "Epoch 2/3 120/469 [====>............] ETA 2s - loss: 0.5577");
  // `dtrain launch` on a 60-column terminal leaves the chief's bar 49 ("[worker:0] " in front).
  CHECK(progress_line(p, 49) == "2/3 120/469 [===>........] ETA 2s - loss: 0.5577");
  CHECK(progress_line(p, 30) == "2/3 120/469 [===>...........]");
  CHECK(progress_line(p, 20) == "2/3 120/469 [==>...");  // no room left: cut to 19 columns
  // The last step shows the epoch's time instead of an ETA.
  p.step = p.steps;
  p.seconds = 125.0;
  CHECK(progress_line(p, 200).find("] 2m05s 266.5ms/step - loss") != std::string::npos);
}

TEST_CASE("an epoch's line: a sequence's adds tokens/s, and MFU where it is known (a GPU)") {
  dtrain::trainer::EpochReport r;
  r.epoch = 1;
  r.epochs = 2;
  r.steps = 750;
  r.seconds = 73.2;
  r.samples_per_sec = 328;
  r.loss = 2.0;
  r.accuracy = 0.5;
  CHECK(dtrain::trainer::epoch_line(r) ==
        "Epoch 1/2: 750 steps, 73.2s, 97.6ms/step, 328 samples/s - loss: 2.0000 - accuracy: 0.5000");
  r.label_width = 128;
  r.tokens_per_sec = 41968;
  CHECK_THAT(dtrain::trainer::epoch_line(r), Catch::Contains("328 samples/s, 41968 tokens/s - loss: 2.0000 - perplexity: 7.3891"));
  r.mfu = 0.41234;
  CHECK_THAT(dtrain::trainer::epoch_line(r), Catch::Contains("41968 tokens/s, MFU 41.2% - loss: 2.0000"));
}
