#include "decode/dnnl_gemm.h"

#if PPO_WITH_DNNL
#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <map>
#include <mutex>
#include <tuple>
#include <unordered_map>

namespace ppo {

#if PPO_WITH_DNNL

namespace {

using Tag = dnnl::memory::format_tag;
constexpr auto kF32 = dnnl::memory::data_type::f32;
// The row count the weight's layout is chosen for: the layout is the same for every row count (it blocks the columns),
// so any fixed one serves all products.
constexpr int64_t kLayoutRows = 64;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

dnnl::memory::desc rows_desc(int64_t rows, int64_t cols, int64_t stride) {
  return dnnl::memory::desc({rows, cols}, kF32, dnnl::memory::dims{stride, 1});
}

}  // namespace

struct DnnlWeightState {
  dnnl::memory::desc weights_desc;  // the primitive's layout
  torch::Tensor buffer;             // what `weights` lies in
  dnnl::memory weights;
  torch::Tensor bias;  // [1, N] contiguous, undefined without one
  dnnl::memory bias_memory;
  // One prepared product per (rows, row stride of a, row stride of out, accumulate): its primitive and the arguments
  // it runs on, whose data pointers are set at each call (under the mutex).
  struct Product {
    dnnl::matmul primitive;
    dnnl::memory src, dst;
    std::unordered_map<int, dnnl::memory> args;
  };
  std::mutex mutex;
  std::map<std::tuple<int64_t, int64_t, int64_t, bool>, Product> products;

  dnnl::matmul::primitive_desc describe(int64_t M, int64_t K, int64_t N, int64_t lda, int64_t ldo, bool accumulate,
                                        const dnnl::memory::desc& weights_md) const {
    dnnl::primitive_attr attr;
    if (accumulate) {
      dnnl::post_ops sum;
      sum.append_sum(1.0f);
      attr.set_post_ops(sum);
    }
    const dnnl::memory::desc bias_md =
        bias.defined() ? dnnl::memory::desc({1, N}, kF32, Tag::ab) : dnnl::memory::desc();
    return {dnnl::matmul::desc(rows_desc(M, K, lda), weights_md, bias_md, rows_desc(M, N, ldo)), attr, cpu_engine()};
  }
};

std::string dnnl_kernel() {
  try {
    DnnlWeightState probe;
    const auto pd = probe.describe(kLayoutRows, 64, 64, 64, 64, false, dnnl::memory::desc({64, 64}, kF32, Tag::any));
    return pd.impl_info_str();
  } catch (const dnnl::error& e) {
    return std::string("none (oneDNN: ") + e.what() + ")";
  }
}

DnnlWeight dnnl_pack(const torch::Tensor& operand, const torch::Tensor& bias) {
  TORCH_CHECK(operand.dim() == 2 && operand.is_cpu() && operand.scalar_type() == torch::kFloat,
              "dnnl_pack: a [K, N] float32 CPU operand");
  const int64_t K = operand.size(0), N = operand.size(1);
  auto state = std::make_shared<DnnlWeightState>();
  if (bias.defined()) state->bias = bias.reshape({1, N}).to(torch::kFloat).contiguous();
  const auto pd = state->describe(kLayoutRows, K, N, K, N, false, dnnl::memory::desc({K, N}, kF32, Tag::any));
  if (std::string(pd.impl_info_str()).rfind("brg", 0) != 0) return {};  // a gemm or reference kernel: the packed loop
  const torch::Tensor given = operand.contiguous();
  dnnl::memory given_memory({{K, N}, kF32, Tag::ab}, cpu_engine(), given.data_ptr<float>());
  state->weights_desc = pd.weights_desc();
  // In a tensor of LibTorch's allocator, so that memory statistics count it as they count the packed loop's panels.
  state->buffer =
      torch::empty({static_cast<int64_t>(state->weights_desc.get_size() / sizeof(float)) + 1}, torch::kFloat);
  state->weights = dnnl::memory(state->weights_desc, cpu_engine(), state->buffer.data_ptr<float>());
  dnnl::stream stream(cpu_engine());
  dnnl::reorder(given_memory, state->weights).execute(stream, given_memory, state->weights);
  stream.wait();
  if (bias.defined())
    state->bias_memory = dnnl::memory({{1, N}, kF32, Tag::ab}, cpu_engine(), state->bias.data_ptr<float>());
  return {std::move(state), K, N};
}

void dnnl_matmul(const torch::Tensor& a, const DnnlWeight& w, const torch::Tensor& out, bool accumulate) {
  const int64_t M = a.size(0), K = w.rows, N = w.cols;
  TORCH_CHECK(w && a.dim() == 2 && a.size(1) == K && a.stride(1) == 1 && out.dim() == 2 && out.size(0) == M &&
                  out.size(1) == N && out.stride(1) == 1 && a.scalar_type() == torch::kFloat &&
                  out.scalar_type() == torch::kFloat,
              "dnnl_matmul: a [M, K] and out [M, N] float32 with contiguous rows, and a packed weight");
  if (M == 0) return;
  DnnlWeightState& state = *w.state;
  const int64_t lda = a.stride(0), ldo = out.stride(0);
  std::lock_guard<std::mutex> lock(state.mutex);
  if (state.products.size() > 256) state.products.clear();  // prefills of many lengths
  auto [it, fresh] = state.products.try_emplace({M, lda, ldo, accumulate});
  DnnlWeightState::Product& product = it->second;
  if (fresh) {
    product.primitive = dnnl::matmul(state.describe(M, K, N, lda, ldo, accumulate, state.weights_desc));
    product.src = dnnl::memory(rows_desc(M, K, lda), cpu_engine(), nullptr);
    product.dst = dnnl::memory(rows_desc(M, N, ldo), cpu_engine(), nullptr);
    product.args = {{DNNL_ARG_SRC, product.src}, {DNNL_ARG_WEIGHTS, state.weights}, {DNNL_ARG_DST, product.dst}};
    if (state.bias.defined()) product.args.emplace(DNNL_ARG_BIAS, state.bias_memory);
  }
  product.src.set_data_handle(a.data_ptr());
  product.dst.set_data_handle(out.data_ptr());
  thread_local dnnl::stream stream(cpu_engine());
  product.primitive.execute(stream, product.args);
  stream.wait();
}

#else  // a build without Debian's oneDNN (PyPI's LibTorch keeps its own to itself): the packed loop everywhere

struct DnnlWeightState {};

std::string dnnl_kernel() {
  return "none (this build does not link oneDNN)";
}

DnnlWeight dnnl_pack(const torch::Tensor&, const torch::Tensor&) {
  return {};
}

void dnnl_matmul(const torch::Tensor&, const DnnlWeight&, const torch::Tensor&, bool) {
  TORCH_CHECK(false, "dnnl_matmul: this build does not link oneDNN");
}

#endif

}  // namespace ppo
