// Single-threaded encode throughput on a corpus of documents (JSON lines, one string each), as
// written by tests/tokenizer/make_fixture.py --bench-corpus. tests/tokenizer/bench_hf.py times
// HF tokenizers on the same file the same way; docs/perf/tokenizer.md records both.
//
//   tokenizer_bench TOKENIZER_DIR CORPUS.jsonl [RUNS]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOKENIZER_DIR CORPUS.jsonl [RUNS]\n", argv[0]);
    return 2;
  }
  const int runs = argc > 3 ? std::atoi(argv[3]) : 5;
  const auto load_start = std::chrono::steady_clock::now();
  auto tok = q38::Tokenizer::FromDirectory(argv[1]);
  if (!tok.ok()) {
    std::fprintf(stderr, "%s\n", std::string(tok.status().message()).c_str());
    return 1;
  }
  std::printf("load: %.3f s\n",
              std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count());
  std::vector<std::string> docs;
  size_t bytes = 0;
  {
    std::ifstream in(argv[2]);
    std::string line;
    while (std::getline(in, line)) {
      docs.push_back(nlohmann::json::parse(line).get<std::string>());
      bytes += docs.back().size();
    }
  }
  if (docs.empty()) {
    std::fprintf(stderr, "no documents in %s\n", argv[2]);
    return 1;
  }
  std::vector<double> seconds;
  size_t tokens = 0;
  std::vector<int32_t> ids;
  for (int r = 0; r < runs; ++r) {
    tokens = 0;
    const auto start = std::chrono::steady_clock::now();
    for (const std::string& d : docs) {
      ids.clear();
      auto s = (*tok)->EncodeTo(d, {}, &ids);
      if (!s.ok()) {
        std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
        return 1;
      }
      tokens += ids.size();
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    seconds.push_back(t);
    std::printf("run %d: %.3f s  %.2f MB/s  %.0f tokens/s\n", r + 1, t, bytes / t / 1e6, tokens / t);
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  std::printf("q38 tokenizer: %zu documents, %zu bytes, %zu tokens\n", docs.size(), bytes, tokens);
  std::printf("median of %d runs: %.3f s  %.2f MB/s  %.0f tokens/s\n", runs, median, bytes / median / 1e6,
              tokens / median);
  return 0;
}
