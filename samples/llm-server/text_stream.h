// Turns a request's generated tokens into the text it may send: incremental detokenization (whole
// UTF-8 characters only) and OpenAI `stop` strings, which end the output before their first
// occurrence. Text that could be the start of a stop string is held back until it is decided, so
// streamed chunks concatenate to exactly the non-streamed text.
#ifndef LLMRT_SAMPLES_LLM_SERVER_TEXT_STREAM_H_
#define LLMRT_SAMPLES_LLM_SERVER_TEXT_STREAM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "llmrt/llmrt.h"

namespace llm_server {

// Holds back text that may begin a stop string. Stop strings are non-empty.
class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds text; appends what is now safe to send to *out. Returns true when a stop string
  // completed: *out then ends just before it and everything after is dropped.
  bool Push(const std::string& text, std::string* out);
  // The end of the generation: appends what was held back.
  void Flush(std::string* out);

 private:
  const std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

class TextStream {
 public:
  // REQUIRES: `tokenizer` outlives the stream.
  TextStream(const llm_tokenizer* tokenizer, std::vector<std::string> stops);
  ~TextStream();
  TextStream(const TextStream&) = delete;
  TextStream& operator=(const TextStream&) = delete;

  // Adds a generated token; appends the text now ready to *out. Returns true when a stop string
  // ended the output. Special tokens (EOS, turn ends) add no text.
  bool Push(int32_t token, std::string* out);
  // The generation ended: appends held-back text (an incomplete character becomes U+FFFD).
  void Finish(std::string* out);

 private:
  llm_detokenizer* detok_ = nullptr;
  StopMatcher stop_;
  std::vector<char> buf_;
};

}  // namespace llm_server

#endif  // LLMRT_SAMPLES_LLM_SERVER_TEXT_STREAM_H_
