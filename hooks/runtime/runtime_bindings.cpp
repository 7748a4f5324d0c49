#include "hooks/runtime/runtime_bindings.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <torch/python.h>

#include "hooks/c10_errors.hpp"
#include "hooks/runtime/budget_api.hpp"

namespace py = pybind11;

namespace tp::hooks {
namespace {

/// A saved tensor as Python's pack hook returns it.
///
/// Note [In-place changes to saved tensors]
/// Autograd checks at unpack that a saved tensor was not changed in place
/// since it was saved, and raises otherwise; but with saved-tensor hooks it
/// checks nothing (it holds only what the pack hook returned), so training
/// under tp.budget would compute gradients from the changed data where
/// PyTorch alone raises. The handle therefore keeps the tensor's version
/// counter (shared by every view of it; keeping it holds no memory) and the
/// version at pack, and unpack() raises autograd's error when they differ.
/// The same holds for a segment's inputs, held as handles for its replay
/// (python/tensorpager/_runtime.py): a replay from changed inputs would
/// recompute wrong activations, so it raises instead.
struct py_saved_tensor {
  saved_view view;
  bool fresh = false;  ///< this pack started managing the storage
  std::optional<c10::VariableVersion> version;  ///< the tensor's counter, where it has one
  std::uint32_t saved_version = 0;

  at::Tensor unpack() const {
    if (version && version->current_version() != saved_version) {
      TORCH_CHECK(false,
                  "one of the variables needed for gradient computation has been modified by an inplace "
                  "operation: [",
                  c10::toString(view.dtype), " ", c10::IntArrayRef(view.sizes), "] is at version ",
                  version->current_version(), "; expected version ", saved_version,
                  " instead. tensorpager saved it under tp.budget and, like autograd without hooks, "
                  "refuses to compute gradients from changed data (clone it before changing it in place)");
    }
    return with_c10_errors([&] { return view.materialize(); });
  }
};

/// A Python callable that may be released on a thread without the GIL (a
/// saved storage dies wherever autograd frees its graph).
class gil_safe_callable {
 public:
  explicit gil_safe_callable(py::object fn) : fn_(std::move(fn)) {}
  ~gil_safe_callable() {
    if (!Py_IsInitialized()) {
      (void)fn_.release();  // the interpreter is gone: leak rather than crash
      return;
    }
    py::gil_scoped_acquire gil;
    fn_ = py::object();
  }
  gil_safe_callable(const gil_safe_callable&) = delete;
  gil_safe_callable& operator=(const gil_safe_callable&) = delete;

  at::Tensor operator()() const {
    py::gil_scoped_acquire gil;
    py::object result = fn_();
    at::Tensor t = result.cast<at::Tensor>();
    result = py::object();  // so that only t refers to the recomputed storage
    return t;
  }

 private:
  py::object fn_;
};

std::optional<policy_kind> policy_from(const std::optional<std::string>& name) {
  if (!name) return std::nullopt;
  return parse_policy_kind(*name);
}

}  // namespace

void register_runtime(py::module_& m) {
  py::class_<py_saved_tensor, std::shared_ptr<py_saved_tensor>>(m, "SavedTensor",
                                                               "A saved tensor under the budget runtime.")
      .def("unpack", &py_saved_tensor::unpack,
           "The tensor, its storage made resident (a use the runtime records). Raises RuntimeError when the "
           "tensor was changed in place since it was packed (Note [In-place changes to saved tensors]).")
      .def(
          "set_recompute",
          [](py_saved_tensor& s, py::object fn, std::int64_t cost_ns) {
            if (fn.is_none()) {
              s.view.storage->set_recompute({}, 0);
              return;
            }
            auto callable = std::make_shared<gil_safe_callable>(std::move(fn));
            s.view.storage->set_recompute([callable] { return (*callable)(); }, cost_ns);
          },
          py::arg("fn"), py::arg("cost_ns"),
          "Makes the storage droppable: fn() returns a tensor whose storage holds the same bytes again.")
      .def_property_readonly(
          "key", [](const py_saved_tensor& s) {
            return reinterpret_cast<std::uintptr_t>(s.view.storage->storage().unsafeGetStorageImpl());
          })
      .def_readonly("fresh", &py_saved_tensor::fresh)
      .def_property_readonly("nbytes", [](const py_saved_tensor& s) { return s.view.storage->nbytes(); })
      .def_property_readonly("state", [](const py_saved_tensor& s) { return std::string(s.view.storage->state()); })
      .def_property_readonly("recomputable",
                             [](const py_saved_tensor& s) { return s.view.storage->recomputable(); });

  m.def(
      "budget_begin",
      [](std::optional<std::size_t> bytes, std::optional<double> ratio, std::optional<std::string> policy,
         bool prefetch) {
        session_request req;
        req.bytes = bytes;
        req.ratio = ratio;
        req.policy = policy_from(policy);
        req.prefetch_ahead = prefetch;
        return begin_session(req);
      },
      py::arg("bytes"), py::arg("ratio"), py::arg("policy"), py::arg("prefetch"));
  m.def("budget_end", [](std::optional<std::size_t> previous) { with_c10_errors([&] { end_session(previous); }); },
        py::arg("previous"));
  m.def("budget_active", [] { return active_session() != nullptr; });
  m.def("budget_step", [] { with_c10_errors([] { session_step(); }); });
  m.def("runtime_stats", [] { return session_stats(); });
  m.def(
      "storage_key",
      [](const at::Tensor& t) -> std::optional<std::uintptr_t> {
        if (!t.defined() || !t.has_storage()) return std::nullopt;
        return reinterpret_cast<std::uintptr_t>(t.storage().unsafeGetStorageImpl());
      },
      py::arg("tensor"),
      "The address of t's StorageImpl (SavedTensor.key), or None. Unlike t.untyped_storage(), it creates no "
      "Python storage object, which would hold the storage for as long as it lives.");
  m.def(
      "pack",
      [](const at::Tensor& t) -> py::object {
        bool fresh = false;
        auto view = with_c10_errors([&] { return manage(t, &fresh); });
        if (!view) return py::none();
        auto s = std::make_shared<py_saved_tensor>();
        s->view = std::move(*view);
        s->fresh = fresh;
        if (const c10::VariableVersion& v = t.unsafeGetTensorImpl()->version_counter(); v.enabled()) {
          s->version = v;
          s->saved_version = v.current_version();
        }
        return py::cast(std::move(s));
      },
      py::arg("tensor"), "The tensor's storage under the active budget, or None when it is not manageable.");
}

}  // namespace tp::hooks
