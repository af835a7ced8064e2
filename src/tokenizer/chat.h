// Chat formats of the two families (docs/models.md section 5), rendered to text that is then
// encoded with parse_special.
//  Kimi: <|im_system|>system<|im_middle|>...<|im_end|><|im_user|>user<|im_middle|>...<|im_end|>
//        <|im_assistant|>assistant<|im_middle|>
//  GLM:  [gMASK]<sop><|system|>\n...<|user|>\n...<|assistant|> then <think> (thinking) or
//        \n</think> (not thinking) as the generation prompt.
#ifndef LLMRT_TOKENIZER_CHAT_H_
#define LLMRT_TOKENIZER_CHAT_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "src/tokenizer/tokenizer.h"

namespace llmrt {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (GLM also "observation"; Kimi also "tool")
  std::string content;
};

absl::StatusOr<std::string> ApplyChatTemplate(TokenizerFamily family, const std::vector<ChatMessage>& messages,
                                              bool add_generation_prompt, bool enable_thinking);

}  // namespace llmrt

#endif  // LLMRT_TOKENIZER_CHAT_H_
