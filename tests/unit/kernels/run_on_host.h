// What launch(body, n) does on the GPU, on the host: body(i) for every i in
// [0, n), for the tests that check the CUDA kernels' bodies against the CPU backend.
#pragma once

#include <cstdint>

namespace dtrain::testing {

template <class Body>
void run_on_host(const Body& body, int64_t n) {
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace dtrain::testing
