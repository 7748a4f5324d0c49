#include "hooks/budget/runtime_bindings.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <torch/python.h>

#include "hooks/c10_errors.hpp"
#include "core/errors.hpp"
#include "hooks/budget/budget_api.hpp"
#include "hooks/budget/budget_session.hpp"
#include "hooks/saved_version.hpp"

namespace py = pybind11;

namespace tp::hooks {
namespace {

/// A saved tensor as Python's pack hook returns it: managed by the runtime
/// (its storage may be evicted), or kept as it is (a parameter, a tensor of
/// another allocator or device, anything pack() cannot manage). Either way
/// unpack() checks the version (Note [In-place changes to saved tensors] in
/// hooks/saved_version.hpp).
struct py_saved_tensor {
  std::optional<saved_view> view;  ///< managed
  at::Tensor kept;                 ///< not managed: the tensor itself
  bool fresh = false;              ///< this pack started managing the storage
  saved_version version;

  at::Tensor unpack() const {
    version.check(view ? view->dtype : kept.scalar_type(), view ? c10::IntArrayRef(view->sizes) : kept.sizes());
    if (!view) return kept;
    return with_c10_errors([&] { return view->materialize(); });
  }
  saved_storage& storage() const {
    if (!view) throw invalid_argument("tensorpager: this saved tensor is not managed by the budget runtime");
    return *view->storage;
  }
};

/// A storage the program lends to the runtime (Note [Lent storages] in
/// saved_storage.hpp); give_back() restores it and ends the loan.
struct py_lent_storage {
  std::shared_ptr<saved_storage> storage;

  void give_back() {
    if (!storage) return;
    with_c10_errors([&] { storage->session().give_back(storage); });
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

  template <class... Args>
  at::Tensor operator()(Args... args) const {
    py::gil_scoped_acquire gil;
    py::object result = fn_(args...);
    at::Tensor t = result.cast<at::Tensor>();
    result = py::object();  // so that only t refers to the recomputed storage
    return t;
  }

 private:
  py::object fn_;
};

/// The active budget's runtime, or null (no budget, or none opened yet).
std::shared_ptr<memory_runtime> active_runtime() {
  const auto s = active_session();
  return s ? s->runtime() : nullptr;
}

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
          [](py_saved_tensor& s, py::object fn, std::int64_t cost_ns, std::optional<std::uint32_t> version,
             std::optional<std::int64_t> index, bool whole, std::size_t rerun_bytes) {
            if (fn.is_none()) {
              s.storage().set_recompute({}, 0);
              return;
            }
            auto callable = std::make_shared<gil_safe_callable>(std::move(fn));
            std::function<at::Tensor()> rerun;
            if (index) {
              rerun = [callable, i = *index, whole] { return (*callable)(i, whole); };
            } else {
              rerun = [callable] { return (*callable)(); };
            }
            // A rerun for a saved tensor stops at it unless `whole` (Tracker.post_forward).
            s.storage().set_recompute(std::move(rerun), cost_ns, s.version.at_version(version.value_or(s.version.at())),
                                      rerun_bytes, index.has_value() && !whole);
          },
          py::arg("fn"), py::arg("cost_ns"), py::arg("version") = py::none(), py::arg("index") = py::none(),
          py::arg("whole") = false, py::arg("rerun_bytes") = 0,
          "Makes the managed storage droppable: fn() returns a tensor whose storage holds its bytes again, as "
          "they were at `version` of this tensor's version counter (None: the version at pack). Once the tensor "
          "has moved past that version the storage is never dropped (Note [Recompute reproduces one version]). "
          "With an index, fn(index, whole) instead: one fn serves every tensor of a segment, and no Python "
          "object is made per tensor (Tracker.post_forward). rerun_bytes: what fn holds at its peak when it runs "
          "the whole forward, its inputs included (segment_growth; Note [A rerun's working set] in "
          "runtime/resident_floor.hpp); with an index and not whole, fn(index, False) stops at the tensor, and holds "
          "what the forward held until it made it. A segment's output rerun (\"output\") passes whole=True.")
      .def_property_readonly("managed", [](const py_saved_tensor& s) { return s.view.has_value(); })
      .def_property_readonly(
          "version",
          [](const py_saved_tensor& s) -> std::optional<std::uint32_t> {
            if (!s.version.counter()) return std::nullopt;
            return s.version.counter()->current_version();
          },
          "The tensor's version now (its _version), or None when it has no version counter.")
      .def_property_readonly(
          "key", [](const py_saved_tensor& s) {
            return reinterpret_cast<std::uintptr_t>(s.storage().storage().unsafeGetStorageImpl());
          })
      .def_readonly("fresh", &py_saved_tensor::fresh)
      .def_property_readonly("nbytes", [](const py_saved_tensor& s) { return s.storage().nbytes(); })
      .def_property_readonly("state", [](const py_saved_tensor& s) { return std::string(s.storage().state()); })
      .def_property_readonly("recomputable", [](const py_saved_tensor& s) { return s.storage().recomputable(); })
      .def_property_readonly("can_recompute", [](const py_saved_tensor& s) { return s.storage().can_recompute(); });

  py::class_<py_lent_storage, std::shared_ptr<py_lent_storage>>(
      m, "LentStorage", "A storage the program holds, lent to the budget runtime (Note [Lent storages]).")
      .def("give_back", &py_lent_storage::give_back,
           "Makes the storage resident and ends the loan; idempotent. Raises torch.OutOfMemoryError when it "
           "cannot be brought back (the loan then stands).")
      .def_property_readonly("lent", [](const py_lent_storage& l) { return l.storage != nullptr; })
      .def_property_readonly("state", [](const py_lent_storage& l) {
        return std::string(l.storage ? l.storage->state() : "unmanaged");
      });
  m.def(
      "lend",
      [](const at::Tensor& t) -> std::shared_ptr<py_lent_storage> {
        const auto s = active_session();
        if (!s) return nullptr;
        auto storage = with_c10_errors([&] { return s->lend(t); });
        if (!storage) return nullptr;
        return std::make_shared<py_lent_storage>(py_lent_storage{std::move(storage)});
      },
      py::arg("tensor"),
      "t's storage lent to the active budget's runtime, evictable until give_back() (Note [Lent storages]); "
      "None when there is no budget, t is not manageable, or its storage is managed already.");
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
  m.def(
      "budget_end",
      [](std::optional<std::size_t> previous) { return with_c10_errors([&] { return end_session(previous); }); },
      py::arg("previous"), "Ends the session (always); returns what was lost at the end, or ''.");
  m.def("budget_active", [] { return active_session() != nullptr; });
  m.def(
      "budget_step",
      [](bool resolve_ratio, std::optional<std::size_t> peak) {
        with_c10_errors([&] { session_step(resolve_ratio, peak); });
      },
      py::arg("resolve_ratio") = true, py::arg("peak") = std::nullopt,
      "A step boundary; a pending ratio is resolved only when resolve_ratio (Note [A ratio is a share of a steady "
      "iteration]), on peak bytes where given, else on the peak reserved since the last reset.");
  m.def(
      "budget_remeasure", [] { return with_c10_errors([] { return session_remeasure(); }); },
      "Lifts a resolved ratio budget and measures it again; False when there is nothing to measure again.");
  m.def("runtime_stats", [] { return session_stats(); });
  // Note [A rerun's working set] in runtime/resident_floor.hpp: a segment's
  // forward is measured between the two; nothing without a runtime.
  m.def(
      "segment_started",
      [] {
        if (const auto rt = active_runtime()) rt->segment_started();
      },
      "A segment's forward begins.");
  m.def(
      "segment_growth",
      [] {
        const auto rt = active_runtime();
        return rt ? rt->segment_growth() : std::size_t{0};
      },
      "It has ended: the most bytes held (allocated, less what eviction would free) since segment_started(), "
      "beyond what was held then; 0 without a runtime.");
  m.def(
      "segment_input_saved",
      [] {
        if (const auto rt = active_runtime()) rt->segment_input_saved();
      },
      "The tensor the segment in progress saved last is one of its inputs, which a rerun holds anyway (Note [A "
      "saved operand is held while its operator runs] in runtime/resident_floor.hpp).");
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
      [](const at::Tensor& t, bool manage_storage) {
        auto s = std::make_shared<py_saved_tensor>();
        s->version = saved_version(t);
        if (manage_storage) s->view = with_c10_errors([&] { return manage(t, &s->fresh); });
        if (!s->view) s->kept = t;
        return s;
      },
      py::arg("tensor"), py::arg("manage") = true,
      "A SavedTensor for t: its storage under the active budget (managed) when manage is true and t is "
      "manageable, else t kept as it is; unpack() checks t's version either way.");
}

}  // namespace tp::hooks
