#include "text_stream.h"

#include <algorithm>

namespace llm_server {

bool StopMatcher::Push(const std::string& text, std::string* out) {
  if (stopped_) return true;
  pending_ += text;
  if (stops_.empty()) {
    *out += pending_;
    pending_.clear();
    return false;
  }
  // The earliest occurrence of any stop string wins.
  size_t first = std::string::npos;
  for (const std::string& s : stops_) first = std::min(first, pending_.find(s));
  if (first != std::string::npos) {
    out->append(pending_, 0, first);
    pending_.clear();
    stopped_ = true;
    return true;
  }
  // Keep the longest tail of pending_ that is a proper prefix of a stop string. A stop string
  // starts on a character boundary and pending_ holds whole characters, so the cut never splits
  // a character.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    for (size_t k = std::min(s.size() - 1, pending_.size()); k > hold; --k) {
      if (pending_.compare(pending_.size() - k, k, s, 0, k) == 0) {
        hold = k;
        break;
      }
    }
  }
  out->append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return false;
}

void StopMatcher::Flush(std::string* out) {
  if (!stopped_) *out += pending_;
  pending_.clear();
}

TextStream::TextStream(const llm_tokenizer* tokenizer, std::vector<std::string> stops)
    : stop_(std::move(stops)), buf_(256) {
  // skip_special: EOS and the chat format's turn tokens are not part of the reply's text.
  llm_detokenizer_create(tokenizer, /*skip_special=*/1, &detok_);
}

TextStream::~TextStream() { llm_detokenizer_destroy(detok_); }

bool TextStream::Push(int32_t token, std::string* out) {
  if (detok_ == nullptr) return false;
  size_t len = 0;
  llm_status st = llm_detokenizer_push(detok_, token, buf_.data(), buf_.size(), &len);
  if (st == LLM_ERR_BUFFER_TOO_SMALL) {
    // The token was taken and its text stays ready: fetch it with a buffer that fits.
    buf_.resize(len + 1);
    st = llm_detokenizer_push(detok_, LLM_TOKEN_NONE, buf_.data(), buf_.size(), &len);
  }
  if (st != LLM_OK) return false;  // an id the tokenizer has no text for adds nothing
  return stop_.Push(std::string(buf_.data(), len), out);
}

void TextStream::Finish(std::string* out) {
  if (detok_ != nullptr) {
    size_t len = 0;
    llm_status st = llm_detokenizer_flush(detok_, buf_.data(), buf_.size(), &len);
    if (st == LLM_ERR_BUFFER_TOO_SMALL) {
      buf_.resize(len + 1);
      st = llm_detokenizer_flush(detok_, buf_.data(), buf_.size(), &len);
    }
    if (st == LLM_OK && len > 0) stop_.Push(std::string(buf_.data(), len), out);
  }
  stop_.Flush(out);
}

}  // namespace llm_server
