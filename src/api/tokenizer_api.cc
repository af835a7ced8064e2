// The C ABI: tokenizers, detokenizers and chat templates.
#include <cstring>
#include <string>
#include <vector>

#include "src/api/api_internal.h"
#include "src/tokenizer/chat.h"

using llmrt::api::Fail;
using llmrt::api::HandleErrorScope;
using llmrt::api::FromHandle;
using llmrt::api::ReadOptions;
using llmrt::api::Report;
using llmrt::api::ToHandle;
using llmrt::api::ToLlmStatus;
using llmrt::api::WriteOut;
using llmrt::api::WriteText;

extern "C" {

LLM_API llm_status llm_tokenizer_create(const char* model_dir, llm_tokenizer** out_tokenizer) {
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_tokenizer);
  *out_tokenizer = nullptr;
  LLM_REQUIRE(model_dir);
  auto t = llmrt::Tokenizer::Load(model_dir);
  if (!t.ok()) return Report(t.status());
  *out_tokenizer = new llm_tokenizer{std::move(t).value()};
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_tokenizer_create_v2(const char* model_dir, llm_tokenizer** out_tokenizer, llm_error* error) {
  const llm_status st = llm_tokenizer_create(model_dir, out_tokenizer);
  llmrt::api::FillError(st, error);
  return st;
}

LLM_API void llm_tokenizer_destroy(llm_tokenizer* tokenizer) {
  if (tokenizer == nullptr) return;
  llmrt::api::ForgetHandleErrors(tokenizer);
  delete tokenizer;
}

LLM_API llm_status llm_tokenizer_last_error(const llm_tokenizer* tokenizer, llm_error* error) {
  return llmrt::api::LastErrorOf(tokenizer, "tokenizer", llmrt::api::KeyOf(tokenizer), error);
}

LLM_API llm_status llm_detokenizer_last_error(const llm_detokenizer* detokenizer, llm_error* error) {
  return llmrt::api::LastErrorOf(detokenizer, "detokenizer", llmrt::api::KeyOf(detokenizer), error);
}

LLM_API llm_status llm_tokenizer_get_info(const llm_tokenizer* tokenizer, llm_tokenizer_info* info) {
  HandleErrorScope error_scope(tokenizer);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(info);
  if (info->struct_size < sizeof(uint32_t)) return Fail(LLM_ERR_INVALID_ARGUMENT, "info->struct_size is not set");
  llm_tokenizer_info out;
  std::memset(&out, 0, sizeof(out));
  out.struct_size = sizeof(out);
  out.family = tokenizer->rep->family() == llmrt::TokenizerFamily::kKimi ? LLM_TOKENIZER_KIMI : LLM_TOKENIZER_GLM;
  out.vocab_size = static_cast<uint32_t>(tokenizer->rep->vocab_size());
  out.bos_id = tokenizer->rep->bos_id();
  out.eos_id = tokenizer->rep->eos_id();
  WriteOut(out, info);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_tokenize(const llm_tokenizer* tokenizer, const char* text, size_t text_len,
                                int32_t parse_special, int32_t* tokens, size_t capacity, size_t* out_count) {
  HandleErrorScope error_scope(tokenizer);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(out_count);
  if (text_len > 0) LLM_REQUIRE(text);
  if (capacity > 0) LLM_REQUIRE(tokens);
  auto encoded = tokenizer->rep->Encode(std::string_view(text, text_len), parse_special != 0);
  if (!encoded.ok()) return Report(encoded.status());
  const std::vector<int32_t>& ids = *encoded;
  *out_count = ids.size();
  if (capacity < ids.size()) {
    return Fail(LLM_ERR_BUFFER_TOO_SMALL, "the text encodes to " + std::to_string(ids.size()) + " tokens");
  }
  std::copy(ids.begin(), ids.end(), tokens);
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_detokenize(const llm_tokenizer* tokenizer, const int32_t* tokens, size_t num_tokens,
                                  int32_t skip_special, char* text, size_t capacity, size_t* out_len) {
  HandleErrorScope error_scope(tokenizer);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(out_len);
  if (num_tokens > 0) LLM_REQUIRE(tokens);
  if (capacity > 0) LLM_REQUIRE(text);
  auto s = llmrt::Decode(*tokenizer->rep, absl::Span<const int32_t>(tokens, num_tokens), skip_special != 0);
  if (!s.ok()) return Report(s.status());
  return WriteText(*s, text, capacity, out_len);
  LLM_GUARD_END
}

LLM_API llm_status llm_tokenizer_special_id(const llm_tokenizer* tokenizer, const char* text, int32_t* out_id) {
  HandleErrorScope error_scope(tokenizer);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(text);
  LLM_REQUIRE(out_id);
  *out_id = tokenizer->rep->SpecialId(text);
  if (*out_id < 0) return Fail(LLM_ERR_NOT_FOUND, std::string("no special token \"") + text + "\"");
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API llm_status llm_detokenizer_create(const llm_tokenizer* tokenizer, int32_t skip_special,
                                          llm_detokenizer** out_detokenizer) {
  HandleErrorScope error_scope(tokenizer);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(out_detokenizer);
  *out_detokenizer = nullptr;
  LLM_REQUIRE(tokenizer);
  *out_detokenizer = new llm_detokenizer{llmrt::IncrementalDetokenizer(*tokenizer->rep, skip_special != 0), {}};
  return LLM_OK;
  LLM_GUARD_END
}

LLM_API void llm_detokenizer_destroy(llm_detokenizer* detokenizer) {
  if (detokenizer == nullptr) return;
  llmrt::api::ForgetHandleErrors(detokenizer);
  delete detokenizer;
}

LLM_API llm_status llm_detokenizer_push(llm_detokenizer* d, int32_t token, char* text, size_t capacity,
                                        size_t* out_len) {
  HandleErrorScope error_scope(d);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(d);
  LLM_REQUIRE(out_len);
  if (capacity > 0) LLM_REQUIRE(text);
  if (token != LLM_TOKEN_NONE) {
    absl::Status st = d->rep.Push(token, &d->ready);
    if (!st.ok()) return Report(st);
  }
  llm_status rc = WriteText(d->ready, text, capacity, out_len);
  if (rc == LLM_OK) d->ready.clear();
  return rc;
  LLM_GUARD_END
}

LLM_API llm_status llm_detokenizer_flush(llm_detokenizer* d, char* text, size_t capacity, size_t* out_len) {
  HandleErrorScope error_scope(d);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(d);
  LLM_REQUIRE(out_len);
  if (capacity > 0) LLM_REQUIRE(text);
  d->rep.Flush(&d->ready);
  llm_status rc = WriteText(d->ready, text, capacity, out_len);
  if (rc == LLM_OK) d->ready.clear();
  return rc;
  LLM_GUARD_END
}

LLM_API llm_status llm_chat_apply_template(const llm_tokenizer* tokenizer, const llm_chat_message* messages,
                                           size_t num_messages, int32_t add_generation_prompt,
                                           int32_t enable_thinking, char* text, size_t capacity, size_t* out_len) {
  HandleErrorScope error_scope(tokenizer);
  LLM_GUARD_BEGIN
  LLM_REQUIRE(tokenizer);
  LLM_REQUIRE(out_len);
  if (num_messages > 0) LLM_REQUIRE(messages);
  if (capacity > 0) LLM_REQUIRE(text);
  // The lengths are checked before anything is copied: the text limit bounds the rendering.
  size_t total = 0;
  for (size_t i = 0; i < num_messages; ++i) {
    if (messages[i].role == nullptr || messages[i].content == nullptr) {
      return Fail(LLM_ERR_INVALID_ARGUMENT, "message " + std::to_string(i) + " has a NULL role or content");
    }
    total += std::strlen(messages[i].role) + std::strlen(messages[i].content) + 16;  // + the tags around it
    if (total > llmrt::kMaxTextBytes) {
      return Fail(LLM_ERR_OUT_OF_RANGE, "the messages hold more than the " + std::to_string(llmrt::kMaxTextBytes) +
                                            "-byte text limit (message " + std::to_string(i) + ")");
    }
  }
  std::vector<llmrt::ChatMessage> m;
  m.reserve(num_messages);
  for (size_t i = 0; i < num_messages; ++i) m.push_back({messages[i].role, messages[i].content});
  auto s = llmrt::ApplyChatTemplate(tokenizer->rep->family(), m, add_generation_prompt != 0, enable_thinking != 0);
  if (!s.ok()) return Report(s.status());
  return WriteText(*s, text, capacity, out_len);
  LLM_GUARD_END
}

}  // extern "C"
