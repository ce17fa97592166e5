// Gradient checks by finite differences: d objective / d x by a central
// difference, for the unit tests of layers and ops.
#pragma once

namespace dtrain::testing {

// (objective(x + h) - objective(x - h)) / 2h, x restored afterwards.
template <class F>
double central_difference(float& x, const F& objective, float h = 1e-2f) {
  const float saved = x;
  x = saved + h;
  const double up = objective();
  x = saved - h;
  const double down = objective();
  x = saved;
  return (up - down) / (2.0 * h);
}

}  // namespace dtrain::testing
