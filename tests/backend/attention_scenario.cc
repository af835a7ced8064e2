#include "tests/backend/attention_scenario.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace llmrt::conformance {

std::string ScenarioSpec::Describe() const {
  std::string s = absl::StrCat(codec->name(), " width ", shape.width(), " page ", page_size, " fresh ", fresh,
                               " layer ", layer, " seqs");
  for (const auto& [h, n] : seqs) absl::StrAppend(&s, " (", h, "+", n, ")");
  return s;
}

Scenario ScenarioBuilder::Build(const ScenarioSpec& spec, std::mt19937& rng) {
  Scenario sc;
  const KvCodec& codec = *spec.codec;
  const int64_t ps = spec.page_size, W = spec.shape.width();
  int64_t pages = 3;  // a few the batch does not use
  for (const auto& [h, n] : spec.seqs) pages += (h + n + ps - 1) / ps;
  sc.hb = MakeHostBatch(spec.seqs, ps, pages, rng);
  const HostBatch& hb = sc.hb;
  const int64_t T = hb.num_tokens();
  KvStoreOptions o;
  o.codec = spec.codec;
  o.shape = spec.shape;
  o.page_size = ps;
  o.num_pages = pages;
  o.fresh_rows = spec.fresh ? T : 0;
  sc.store = Must(KvStore::Create(be_, o), "KvStore::Create");
  const KvCacheView& v = sc.store->view();

  // Values of every position, and the layer scale of per-layer codecs (calibrated on them).
  float amax = 0.0f;
  sc.values.resize(spec.seqs.size());
  for (size_t s = 0; s < spec.seqs.size(); ++s) {
    const int64_t len = spec.seqs[s].first + spec.seqs[s].second;
    for (int64_t p = 0; p < len; ++p) {
      std::vector<float> row = RandomNormal(static_cast<size_t>(W), rng);
      if (spec.shape_values) spec.shape_values(static_cast<int64_t>(s), p, row.data());
      for (float x : row) amax = std::max(amax, std::fabs(x));
      sc.values[s].push_back(std::move(row));
    }
  }
  if (codec.scale_kind() == KvScaleKind::kPerLayer) {
    sc.layer_scale = codec.CalibratedScale(amax);
    MustOk(sc.store->SetScale(spec.layer, sc.layer_scale), "SetScale");
  }

  // Pages: random bytes everywhere (a read outside a context shows up as garbage, often NaN),
  // the history rows encoded by the codec's scalar reference.
  std::vector<uint8_t> bytes(v.pages.bytes());
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  for (size_t s = 0; s < spec.seqs.size(); ++s) {
    for (int64_t p = 0; p < spec.seqs[s].first; ++p) {
      codec.EncodeRow(*v.layout, sc.values[s][p].data(), sc.layer_scale,
                      bytes.data() + KvRowOffset(v, hb.Slot(static_cast<int64_t>(s), p), spec.layer));
    }
  }
  MustOk(be_.Upload(bytes.data(), bytes.size(), v.pages), "Upload");

  // The pass's own rows through KvWrite, parts as column views of one activation.
  sc.batch = UploadBatch(be_, hb);
  std::vector<float> rows(static_cast<size_t>(T * (W + 1)), 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t s = hb.token_seq[t], p = hb.token_ctx[t] - 1;
    std::copy_n(sc.values[s][p].data(), W, rows.data() + t * (W + 1) + 1);
  }
  const Tensor parent = UploadF32(be_, rows, {T, W + 1});
  std::vector<Tensor> parts;
  int64_t start = 1;
  for (const KvPart& part : spec.shape.parts) {
    parts.push_back(parent.Cols(start, start + part.count));
    start += part.count;
  }
  KvWriteParts(be_, v, spec.layer, parts, sc.batch);
  MustOk(be_.Synchronize(), "KvWrite");

  // What attention reads (KvCacheView's phase policy).
  sc.read.resize(spec.seqs.size());
  sc.from_fresh.resize(spec.seqs.size());
  for (size_t s = 0; s < spec.seqs.size(); ++s) {
    for (int64_t p = 0; p < static_cast<int64_t>(sc.values[s].size()); ++p) {
      const bool fresh = v.fresh_rows > 0 && p >= spec.seqs[s].first;
      sc.from_fresh[s].push_back(fresh);
      sc.read[s].push_back(fresh ? RoundToBf16(sc.values[s][p])
                                 : CodecRoundTrip(codec, *v.layout, sc.values[s][p].data(), sc.layer_scale));
    }
  }
  return sc;
}

double AttentionTolerance(double weighted_abs_values, double max_score_error, int64_t n) {
  return 2.0 * weighted_abs_values * (2.0 * max_score_error + (2.0 * static_cast<double>(n) + 16.0) * kU) + 1e-30;
}

}  // namespace llmrt::conformance
