// Bindings of the features kernels (filled in by the features issue).
#include "bind.h"

namespace specops {

void bind_features(pybind11::module_& m) { (void)m; }

}  // namespace specops
