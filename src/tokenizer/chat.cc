#include "src/tokenizer/chat.h"

#include "absl/strings/str_cat.h"

namespace llmrt {

namespace {

absl::StatusOr<std::string> Render(TokenizerFamily family, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt, bool enable_thinking) {
  size_t content_bytes = 0;
  for (const auto& m : messages) content_bytes += m.content.size();
  if (content_bytes > kMaxTextBytes) {
    return absl::OutOfRangeError(absl::StrCat("the messages hold ", content_bytes, " bytes, more than the ",
                                              kMaxTextBytes, "-byte text limit"));
  }
  std::string out;
  if (family == TokenizerFamily::kKimi) {
    for (const auto& m : messages) {
      const char* tag = nullptr;
      if (m.role == "system") tag = "<|im_system|>";
      if (m.role == "user") tag = "<|im_user|>";
      if (m.role == "assistant") tag = "<|im_assistant|>";
      if (m.role == "tool") tag = "<|im_system|>";
      if (tag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown chat role \"", m.role.substr(0, 64), "\""));
      absl::StrAppend(&out, tag, m.role, "<|im_middle|>", m.content, "<|im_end|>");
    }
    if (add_generation_prompt) absl::StrAppend(&out, "<|im_assistant|>assistant<|im_middle|>");
    return out;
  }
  out = "[gMASK]<sop>";
  for (const auto& m : messages) {
    const char* tag = nullptr;
    if (m.role == "system") tag = "<|system|>";
    if (m.role == "user") tag = "<|user|>";
    if (m.role == "assistant") tag = "<|assistant|>";
    if (m.role == "observation") tag = "<|observation|>";
    if (tag == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown chat role \"", m.role.substr(0, 64), "\""));
    absl::StrAppend(&out, tag, "\n", m.content);
  }
  if (add_generation_prompt) absl::StrAppend(&out, "<|assistant|>", enable_thinking ? "<think>" : "\n</think>");
  return out;
}

}  // namespace

absl::StatusOr<std::string> ApplyChatTemplate(TokenizerFamily family, const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt, bool enable_thinking) {
  auto out = Render(family, messages, add_generation_prompt, enable_thinking);
  if (out.ok() && out->size() > kMaxTextBytes) {
    return absl::OutOfRangeError(absl::StrCat("the rendered chat is ", out->size(), " bytes, longer than the ",
                                              kMaxTextBytes, "-byte text limit"));
  }
  return out;
}

}  // namespace llmrt
