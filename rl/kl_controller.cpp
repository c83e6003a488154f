// KL-in-reward coefficient controller; see kl_controller.h. Source: veRL verl/trainer/ppo/core_algos.py.
#include "rl/kl_controller.h"

#include <algorithm>

#include "common/error.h"

namespace ppo {

void KlController::update(double current_kl, int64_t n_steps) {
  if (type != "adaptive") return;
  const double proportional_error = std::clamp(current_kl / target - 1.0, -0.2, 0.2);
  value *= 1.0 + proportional_error * static_cast<double>(n_steps) / horizon;
}

std::vector<std::string> kl_controller_names() {
  return {"fixed", "adaptive"};
}

KlController make_kl_controller(const std::string& type, double kl_coef, double target, double horizon,
                                const std::string& key) {
  usage_check(type == "fixed" || type == "adaptive",
              key + ".type: unknown type '" + type + "'; valid: fixed, adaptive");
  if (type == "adaptive") {
    usage_check(horizon > 0, key + ".horizon: must be > 0 for the adaptive controller, got " + std::to_string(horizon));
    usage_check(target > 0, key + ".target_kl: must be > 0 for the adaptive controller, got " + std::to_string(target));
  }
  KlController ctrl;
  ctrl.type = type;
  ctrl.value = kl_coef;
  ctrl.target = target;
  ctrl.horizon = horizon;
  return ctrl;
}

}  // namespace ppo
