// What a less accurate kernel would trade: planning's error budget (graph/error_budget.h) weighs,
// per node, the error a faster kernel brings against the time it saves, and gives the error to
// the nodes where it saves most. A backend describes those kernels without creating them.
#pragma once

#include <string>
#include <vector>

namespace kiln {

struct ApproximateForm {
  std::string name;  // as notes name it: "F(4x4,3x3)"
  // Its error on the node's own weights, relative to the output's scale (the backend's probe).
  double error = 0;
  // Its predicted time, as a share of the exact kernel's (a direct convolution's).
  double share = 1;
};

struct ApproximateForms {
  // The exact kernel's predicted time, in the backend's unit (direct multiply-adds for Winograd):
  // what makes savings comparable between nodes.
  double exact_cost = 0;
  // What runs without a budget: the form the backend takes within its own bound (error and share),
  // or the exact kernel (error 0, share 1).
  ApproximateForm baseline{"exact", 0, 1};
  // Forms above that bound predicted faster than the baseline, fastest first.
  std::vector<ApproximateForm> forms;
};

}  // namespace kiln
