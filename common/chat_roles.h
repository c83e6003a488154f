// The roles of a chat message: what text/chat_template.h renders and what a veRL record's prompt may hold.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

#include "common/strings.h"

namespace ppo {

inline const std::vector<std::string>& chat_roles() {
  static const std::vector<std::string> roles = {"system", "user", "assistant", "tool"};
  return roles;
}

inline bool is_chat_role(const std::string& role) {
  return std::find(chat_roles().begin(), chat_roles().end(), role) != chat_roles().end();
}

// "supported: system, user, assistant, tool", for messages.
inline std::string supported_chat_roles() {
  return "supported: " + join(chat_roles(), ", ");
}

}  // namespace ppo
