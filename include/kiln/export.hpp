// kiln/export.hpp: a compiled model behind the C ABI of kiln/export/kiln_model.h, for a shared
// or static library that programs in C, Python (ctypes) or anything with a C FFI use without
// including kiln. Include it in one source file of the library (CMake: kiln_add_model, which
// also hides every symbol but the C API) and name the model's expression there once:
//
//   #include <kiln/export.hpp>
//   #include <kiln/nn/modules.hpp>
//   using X = kiln::input<"x", kiln::f32, kiln::shape<kiln::dyn, 784>>;
//   KILN_EXPORT_MODEL(kiln::nn::mlp<"mlp", 784, 256, 10>{}(X{}))
//
// The expression's inputs are fed at each call, its params are the model's weights (held by a
// kiln_model, loaded from safetensors or set from memory); kiln::outputs(...) exports several
// outputs. The model runs on kiln::default_backend, which must have output_shapes
// (backend/backend.hpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <map>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "export/kiln_model.h"
#include "io/json.hpp"
#include "io/safetensors.hpp"
#include "kiln.hpp"

struct kiln_model {
  std::map<std::string, kiln::any_tensor, std::less<>> params;
};

namespace kiln::exporting {

/// A placeholder or output as the ABI describes it.
struct slot {
  std::string name;
  dtype dt = dtype::f32;
  dims shape;
};

/// What the C functions need of the model, whatever its expression's type.
struct model_base {
  std::vector<slot> inputs, params, outputs;
  std::string json;  ///< kiln_model_describe()
  virtual ~model_base() = default;
  /// Runs on `feeds` (parameters and inputs), into `out` (defined entries: the destinations).
  virtual void run(std::span<const feed> feeds, std::vector<any_tensor>& out) const = 0;
  /// The outputs' shapes for the feeds' shapes (their data are not read).
  virtual std::vector<dims> output_shapes(std::span<const feed> feeds) const = 0;

  const std::vector<slot>& of(int32_t role) const {
    if (role == KILN_INPUT) return inputs;
    if (role == KILN_PARAM) return params;
    if (role == KILN_OUTPUT) return outputs;
    throw std::invalid_argument("kiln: role " + std::to_string(role) + " is not a kiln_role (0 input, 1 param, 2 output)");
  }
  const slot* find(const std::vector<slot>& in, std::string_view name) const {
    for (const slot& s : in)
      if (s.name == name) return &s;
    return nullptr;
  }
};

namespace detail {

inline void describe(std::string& j, const char* key, const std::vector<slot>& slots, bool last) {
  j += '"';
  j += key;
  j += "\": [";
  for (std::size_t i = 0; i < slots.size(); ++i) {
    j += i ? ", {\"name\": " : "{\"name\": ";
    io::json::append_quoted(j, slots[i].name);
    j += ", \"dtype\": \"";
    j += name(slots[i].dt);
    j += "\", \"shape\": [";
    for (int a = 0; a < slots[i].shape.rank; ++a) {
      if (a) j += ", ";
      j += std::to_string(slots[i].shape.e[a] == dyn ? -1 : slots[i].shape.e[a]);
    }
    j += "]}";
  }
  j += last ? "]" : "], ";
}

}  // namespace detail

template <class E, backend_type B = default_backend>
struct model final : model_base {
  static_assert(requires(const std::vector<any_tensor>& l) { B::template output_shapes<program<E>>(l); },
                "kiln: export: the backend has no output_shapes<P>(leaves) (backend/backend.hpp), which "
                "kiln_model_output_shapes needs");
  E e;
  compiled<E, B> f;

  explicit model(const E& x) : e(x), f(x) {
    constexpr const auto& g = traced<E>::value;
    for (const node& n : g.nodes)
      if (n.o == op::input || n.o == op::param)
        (n.o == op::input ? inputs : params).push_back({std::string(n.label()), n.dt, n.shape});
    for (std::size_t q = 0; q < g.outputs.size(); ++q) {
      const node& n = g.nodes[static_cast<std::size_t>(g.outputs[q])];
      outputs.push_back({"output" + std::to_string(q), n.dt, n.shape});
    }
    json = "{\"abi\": " + std::to_string(KILN_ABI_VERSION) + ", ";
    detail::describe(json, "inputs", inputs, false);
    detail::describe(json, "params", params, false);
    detail::describe(json, "outputs", outputs, true);
    json += '}';
  }
  void run(std::span<const feed> feeds, std::vector<any_tensor>& out) const override { f(feeds, out); }
  std::vector<dims> output_shapes(std::span<const feed> feeds) const override {
    constexpr const auto& g = traced<E>::value;
    return B::template output_shapes<program<E>>(bind_leaves(g, e, feeds));
  }
};

/// The library's model: defined by KILN_EXPORT_MODEL.
const model_base& the_model();

namespace detail {

inline std::string& last_error() {
  thread_local std::string message;
  return message;
}

inline int failed(int code, const char* what) {
  try {
    last_error() = what;
  } catch (...) {  // no room for the message: the code still says what happened
  }
  return code;
}

/// Runs f, turning what it throws into a status and kiln_last_error()'s message.
template <class F>
int guarded(F&& f) noexcept {
  try {
    f();
    last_error().clear();
    return KILN_OK;
  } catch (const shape_error& x) {
    return failed(KILN_ERROR_SHAPE, x.what());
  } catch (const dtype_error& x) {
    return failed(KILN_ERROR_DTYPE, x.what());
  } catch (const io::format_error& x) {
    return failed(KILN_ERROR_FILE, x.what());
  } catch (const std::filesystem::filesystem_error& x) {
    return failed(KILN_ERROR_FILE, x.what());
  } catch (const std::bad_alloc&) {
    return failed(KILN_ERROR_MEMORY, "kiln: out of memory");
  } catch (const std::invalid_argument& x) {
    return failed(KILN_ERROR_ARGUMENT, x.what());
  } catch (const std::exception& x) {
    return failed(KILN_ERROR_RUNTIME, x.what());
  } catch (...) {
    return failed(KILN_ERROR_RUNTIME, "kiln: an unknown exception");
  }
}

inline void need(const void* p, const char* what) {
  if (!p) throw std::invalid_argument(std::string("kiln: ") + what + " is a null pointer");
}

/// The shape and strides of a caller's tensor, checked; `who` names it in messages.
inline void read_layout(const kiln_tensor& t, const std::string& who, dtype& dt, dims& shape, dims& strides) {
  if (t.dtype < 0 || t.dtype > static_cast<int32_t>(dtype::f64))
    throw std::invalid_argument("kiln: " + who + ": dtype " + std::to_string(t.dtype) + " is not a kiln_dtype");
  if (t.rank < 0 || t.rank > max_rank)
    throw std::invalid_argument("kiln: " + who + ": rank " + std::to_string(t.rank) + " is not in [0, " +
                                std::to_string(max_rank) + "]");
  if (t.rank > 0) need(t.shape, (who + "'s shape").c_str());
  dt = static_cast<dtype>(t.dtype);
  shape.rank = strides.rank = t.rank;
  for (int i = 0; i < t.rank; ++i) shape.e[i] = t.shape[i];
  if (t.strides)  // (without them: contiguous, computed once the shape is checked)
    for (int i = 0; i < t.rank; ++i) strides.e[i] = t.strides[i];
}

/// Calls f(byte offset of element k in the caller's memory, k) for each element, in row-major order.
template <class F>
void each_offset(const dims& shape, const dims& strides, std::size_t size, F&& f) {
  const index_t n = shape.numel();
  index_t idx[max_rank]{};
  for (index_t k = 0; k < n; ++k) {
    index_t at = 0;
    for (int a = 0; a < shape.rank; ++a) at += idx[a] * strides.e[a];
    f(static_cast<std::size_t>(at) * size, k);
    for (int a = shape.rank - 1; a >= 0 && ++idx[a] == shape.e[a]; --a) idx[a] = 0;
  }
}

/// The caller's tensor as a kiln tensor: a view of its memory, or, where that memory is not
/// aligned to the element size (kiln reads elements through typed pointers), a copy made with
/// memcpy (`aligned` says which).
inline any_tensor borrow(const kiln_tensor& t, const std::string& who, bool& aligned) {
  dtype dt;
  dims shape, strides;
  read_layout(t, who, dt, shape, strides);
  const dims* s = t.strides ? &strides : nullptr;
  aligned = reinterpret_cast<std::uintptr_t>(t.data) % size_of(dt) == 0;
  if (aligned) return any_tensor::from_blob(dt, t.data, shape, s);
  any_tensor copy(dt, shape);
  // the caller's layout, checked as from_blob checks it (over the copy's address: nothing is read)
  const any_tensor layout = any_tensor::from_blob(dt, copy.bytes(), shape, s);
  const std::size_t size = size_of(dt);
  const auto* src = static_cast<const std::byte*>(t.data);
  each_offset(shape, layout.strides(), size,
              [&](std::size_t at, index_t k) { std::memcpy(copy.bytes() + static_cast<std::size_t>(k) * size, src + at, size); });
  return copy;
}

}  // namespace detail
}  // namespace kiln::exporting

#define KILN_API extern "C" __attribute__((visibility("default")))

KILN_API uint32_t kiln_abi_version(void) { return KILN_ABI_VERSION; }

KILN_API const char* kiln_last_error(void) { return kiln::exporting::detail::last_error().c_str(); }

KILN_API const char* kiln_model_describe(void) { return kiln::exporting::the_model().json.c_str(); }

KILN_API size_t kiln_model_count(int32_t role) {
  const auto& m = kiln::exporting::the_model();
  return role == KILN_INPUT ? m.inputs.size() : role == KILN_PARAM ? m.params.size() : role == KILN_OUTPUT ? m.outputs.size() : 0;
}

KILN_API int kiln_model_info(int32_t role, size_t i, const char** name, int32_t* dtype, int32_t* rank, int64_t* shape) {
  return kiln::exporting::detail::guarded([&] {
    const auto& slots = kiln::exporting::the_model().of(role);
    if (i >= slots.size())
      throw std::invalid_argument("kiln: kiln_model_info: index " + std::to_string(i) + " of " +
                                  std::to_string(slots.size()));
    const auto& s = slots[i];
    if (name) *name = s.name.c_str();
    if (dtype) *dtype = static_cast<int32_t>(s.dt);
    if (rank) *rank = s.shape.rank;
    if (shape)
      for (int a = 0; a < s.shape.rank; ++a) shape[a] = s.shape.e[a] == kiln::dyn ? -1 : s.shape.e[a];
  });
}

KILN_API int kiln_model_create(kiln_model** model) {
  return kiln::exporting::detail::guarded([&] {
    kiln::exporting::detail::need(model, "kiln_model_create's model");
    *model = nullptr;
    auto m = std::make_unique<kiln_model>();
    for (const auto& p : kiln::exporting::the_model().params)
      m->params[p.name] = p.shape.is_static() ? kiln::any_tensor(p.dt, p.shape) : kiln::any_tensor{};
    *model = m.release();
  });
}

KILN_API void kiln_model_destroy(kiln_model* model) { delete model; }

namespace kiln::exporting::detail {

/// Reads every parameter with `read(fresh, allow_extra)` into new tensors, then puts them in
/// the model: a file that does not match changes nothing.
template <class Header, class Read>
void load_params(kiln_model* model, Header&& header, Read&& read) {
  need(model, "the model");
  // a training checkpoint (kiln.step in its metadata) also holds the optimizer's state
  const bool checkpoint = header().metadata.count("kiln.step") > 0;
  io::tensor_map fresh;
  for (const auto& p : the_model().params) {
    if (!p.shape.is_static())
      throw std::invalid_argument("kiln: param '" + p.name + "' has a dyn extent: set it with kiln_model_set_param");
    fresh[p.name] = any_tensor(p.dt, p.shape);
  }
  read(fresh, io::load_options{.allow_extra = checkpoint});
  for (auto& [name, t] : fresh) model->params.find(name)->second = t;
}

}  // namespace kiln::exporting::detail

KILN_API int kiln_model_load(kiln_model* model, const char* path) {
  return kiln::exporting::detail::guarded([&] {
    kiln::exporting::detail::need(path, "kiln_model_load's path");
    kiln::exporting::detail::load_params(
        model, [&] { return kiln::io::read_safetensors_header(path); },
        [&](const kiln::io::tensor_map& dst, const kiln::io::load_options& opt) { kiln::io::load_into(path, dst, opt); });
  });
}

KILN_API int kiln_model_load_buffer(kiln_model* model, const void* data, size_t size) {
  return kiln::exporting::detail::guarded([&] {
    if (size) kiln::exporting::detail::need(data, "kiln_model_load_buffer's data");
    const std::span<const std::byte> bytes(static_cast<const std::byte*>(data), size);
    kiln::exporting::detail::load_params(
        model, [&] { return kiln::io::parse_safetensors_header(bytes, "<buffer>"); },
        [&](const kiln::io::tensor_map& dst, const kiln::io::load_options& opt) {
          kiln::io::parse_into(bytes, dst, opt, "<buffer>");
        });
  });
}

KILN_API int kiln_model_set_param(kiln_model* model, const kiln_tensor* value) {
  return kiln::exporting::detail::guarded([&] {
    namespace ex = kiln::exporting;
    ex::detail::need(model, "kiln_model_set_param's model");
    ex::detail::need(value, "kiln_model_set_param's value");
    ex::detail::need(value->name, "kiln_model_set_param's value name");
    const ex::model_base& m = ex::the_model();
    const ex::slot* s = m.find(m.params, value->name);
    if (!s)
      throw std::invalid_argument(std::string("kiln: the model has no param '") + value->name + "'" +
                                  (m.find(m.inputs, value->name) ? " ('" + std::string(value->name) + "' is an input)" : ""));
    bool aligned = true;
    const std::string who = kiln::placeholder_what(kiln::op::param, s->name);
    const kiln::any_tensor v = ex::detail::borrow(*value, who, aligned);
    if (v.dt() != s->dt) throw kiln::dtype_error(who, s->dt, v.dt());
    if (!kiln::fits_declared(s->shape, v.shape())) throw kiln::shape_error(who, s->shape, v.shape(), "differ (declared, given)");
    kiln::any_tensor copy(v.dt(), v.shape());
    copy.copy_from(v);
    model->params.find(s->name)->second = copy;
  });
}

namespace kiln::exporting::detail {

/// The feeds of a call: the model's parameters, then the caller's inputs (each by name, once).
inline std::vector<feed> feeds_of(const kiln_model* model, const kiln_tensor* inputs, std::size_t n,
                                  std::vector<any_tensor>& keep) {
  need(model, "the model");
  if (n) need(inputs, "the inputs");
  const model_base& m = the_model();
  if (n != m.inputs.size())
    throw std::invalid_argument("kiln: the model has " + std::to_string(m.inputs.size()) + " inputs, got " +
                                std::to_string(n));
  std::vector<feed> feeds;
  for (const auto& [name, t] : model->params) feeds.push_back({name, t});
  for (std::size_t i = 0; i < n; ++i) {
    need(inputs[i].name, ("input " + std::to_string(i) + "'s name").c_str());
    const slot* s = m.find(m.inputs, inputs[i].name);
    if (!s)
      throw std::invalid_argument(std::string("kiln: the model has no input '") + inputs[i].name + "'" +
                                  (m.find(m.params, inputs[i].name) ? " (it is a param: kiln_model_set_param sets it)" : ""));
    for (std::size_t j = 0; j < i; ++j)
      if (std::string_view(inputs[j].name) == inputs[i].name)
        throw std::invalid_argument("kiln: input '" + s->name + "' is given twice");
    bool aligned = true;
    keep.push_back(borrow(inputs[i], placeholder_what(op::input, s->name), aligned));
    feeds.push_back({s->name, keep.back()});
  }
  return feeds;
}

}  // namespace kiln::exporting::detail

KILN_API int kiln_model_output_shape(const kiln_model* model, const kiln_tensor* inputs, size_t n_inputs, size_t i,
                                     int32_t* rank, int64_t* shape) {
  return kiln::exporting::detail::guarded([&] {
    namespace ex = kiln::exporting;
    ex::detail::need(rank, "kiln_model_output_shape's rank");
    ex::detail::need(shape, "kiln_model_output_shape's shape");
    if (i >= ex::the_model().outputs.size())
      throw std::invalid_argument("kiln: the model has " + std::to_string(ex::the_model().outputs.size()) +
                                  " outputs; there is no output " + std::to_string(i));
    // shapes only: the inputs' data are never read, so a placeholder address stands in
    std::vector<kiln_tensor> shapes(inputs, inputs + (inputs ? n_inputs : 0));
    alignas(64) static std::byte stand_in[64];
    for (kiln_tensor& t : shapes) t.data = stand_in;
    std::vector<kiln::any_tensor> keep;
    const std::vector<kiln::feed> feeds = ex::detail::feeds_of(model, shapes.data(), n_inputs, keep);
    const kiln::dims d = ex::the_model().output_shapes(feeds)[i];
    *rank = d.rank;
    for (int a = 0; a < d.rank; ++a) shape[a] = d.e[a];
  });
}

KILN_API int kiln_model_run(const kiln_model* model, const kiln_tensor* inputs, size_t n_inputs, kiln_tensor* outputs,
                            size_t n_outputs) {
  return kiln::exporting::detail::guarded([&] {
    namespace ex = kiln::exporting;
    const ex::model_base& m = ex::the_model();
    std::vector<kiln::any_tensor> keep;
    const std::vector<kiln::feed> feeds = ex::detail::feeds_of(model, inputs, n_inputs, keep);
    if (n_outputs != m.outputs.size())
      throw std::invalid_argument("kiln: the model has " + std::to_string(m.outputs.size()) + " outputs, got " +
                                  std::to_string(n_outputs));
    if (n_outputs) ex::detail::need(outputs, "the outputs");
    std::vector<kiln::any_tensor> out(n_outputs);
    std::vector<char> staged(n_outputs, 0);
    for (std::size_t q = 0; q < n_outputs; ++q) {
      bool aligned = true;
      const std::string who = "output " + std::to_string(q);
      out[q] = ex::detail::borrow(outputs[q], who, aligned);
      if (!aligned) {  // computed into kiln's memory, then copied out with memcpy
        if (out[q].dt() != m.outputs[q].dt) throw kiln::dtype_error(who, m.outputs[q].dt, out[q].dt());
        staged[q] = 1;
        out[q] = kiln::any_tensor{};
      }
    }
    // a staged destination's shape is checked before the run writes the others
    if (std::find(staged.begin(), staged.end(), 1) != staged.end()) {
      const std::vector<kiln::dims> shapes = m.output_shapes(feeds);
      for (std::size_t q = 0; q < n_outputs; ++q) {
        if (!staged[q]) continue;
        kiln::dtype dt;
        kiln::dims shape, strides;
        ex::detail::read_layout(outputs[q], "output " + std::to_string(q), dt, shape, strides);
        if (!(shape == shapes[q]))
          throw kiln::shape_error("output " + std::to_string(q), shapes[q], shape, "differ (computed, given)");
      }
    }
    std::vector<kiln::any_tensor> result = out;
    m.run(feeds, result);
    for (std::size_t q = 0; q < n_outputs; ++q) {
      if (!staged[q]) continue;
      const kiln::any_tensor& r = result[q];
      const std::size_t size = kiln::size_of(r.dt());
      kiln::dims strides = kiln::contiguous_strides(r.shape());
      if (outputs[q].strides)
        for (int a = 0; a < r.rank(); ++a) strides.e[a] = outputs[q].strides[a];
      auto* dst = static_cast<std::byte*>(outputs[q].data);
      ex::detail::each_offset(r.shape(), strides, size, [&](std::size_t at, kiln::index_t k) {
        std::memcpy(dst + at, r.bytes() + static_cast<std::size_t>(k) * size, size);
      });
    }
  });
}

KILN_API int kiln_set_num_threads(int n) { return kiln::set_num_threads(n); }

#undef KILN_API

/// Names the library's model (an expression, evaluated once, when first used).
#define KILN_EXPORT_MODEL(...)                                                             \
  const ::kiln::exporting::model_base& ::kiln::exporting::the_model() {                    \
    static const ::kiln::exporting::model<std::remove_cvref_t<decltype(__VA_ARGS__)>> m{   \
        __VA_ARGS__};                                                                      \
    return m;                                                                              \
  }
