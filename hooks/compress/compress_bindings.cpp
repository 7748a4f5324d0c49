// tensorpager._C's activation codec, for tensorpager.compress.

#include "hooks/compress/compress_bindings.hpp"

#include <memory>
#include <string>

#include <torch/python.h>

#include "hooks/compress/activation_codec.hpp"

namespace py = pybind11;

namespace tp::hooks {

void register_compress(py::module_& m) {
  using compress::packed_activation;

  py::class_<packed_activation, std::shared_ptr<packed_activation>>(
      m, "PackedActivation", "A saved tensor in compressed form (hooks/compress/activation_codec.hpp).")
      .def_property_readonly("method",
                             [](const packed_activation& p) { return std::string(compress::to_string(p.kind())); })
      .def_property_readonly("original_bytes", &packed_activation::original_bytes)
      .def_property_readonly("packed_bytes", &packed_activation::packed_bytes)
      .def_property_readonly("payload", &packed_activation::payload)
      .def("restore", &packed_activation::restore, py::call_guard<py::gil_scoped_release>(),
           "A new tensor of the original shape, dtype, device and memory format.");

  m.def(
      "compress_pack",
      [](const at::Tensor& t, const std::string& method) { return compress::pack(t, compress::parse_method(method)); },
      py::arg("tensor"), py::arg("method"), py::call_guard<py::gil_scoped_release>(),
      "Compresses tensor by method ('pool2', 'bf16', 'fp8'); ValueError when it cannot.");
  m.def(
      "compress_why_not",
      [](const at::Tensor& t, const std::string& method) {
        return compress::why_not_packable(t, compress::parse_method(method));
      },
      py::arg("tensor"), py::arg("method"), "Why tensor cannot be packed by method, or None when it can.");
  m.def("compress_stats", &compress::stats, "Counters under 'tensorpager.compress.*' keys.");
  m.def("compress_reset_stats", &compress::reset_stats, "Zeroes the counters (live_bytes stays).");
}

}  // namespace tp::hooks
