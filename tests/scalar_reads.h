// Counts, while alive, the operators that copy a value from the device to the host and so wait for it:
// item() (aten::_local_scalar_dense), nonzero and masked_select (their output size), is_nonzero, equal. Tensor copies
// to the host are not operator calls on a CPU-only machine: the code under test counts those itself where it matters
// (rollout_host_reads).
#pragma once

#include <ATen/record_function.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>

namespace ppo_test {

inline std::atomic<int64_t> g_scalar_reads{0};

class ScalarReadCounter {
 public:
  ScalarReadCounter() {
    g_scalar_reads = 0;
    handle_ = at::addGlobalCallback(
        at::RecordFunctionCallback([](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
          for (const char* name : {"aten::_local_scalar_dense", "aten::item", "aten::nonzero", "aten::masked_select",
                                   "aten::is_nonzero", "aten::equal"})
            if (std::strcmp(fn.name(), name) == 0) ++g_scalar_reads;
          return nullptr;
        }).scopes({at::RecordScope::FUNCTION}));
  }
  ~ScalarReadCounter() { at::removeCallback(handle_); }
  ScalarReadCounter(const ScalarReadCounter&) = delete;
  ScalarReadCounter& operator=(const ScalarReadCounter&) = delete;
  int64_t count() const { return g_scalar_reads; }

 private:
  at::CallbackHandle handle_;
};

}  // namespace ppo_test
