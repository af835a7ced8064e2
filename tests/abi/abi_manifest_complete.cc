// Checks that the ABI manifest (bindings/abi_manifest.txt, printed by abi_manifest.c) names
// exactly the numeric constants, structs and struct fields that the public header declares, so
// that a constant or field added to the header cannot be missed by the bindings' layout checks.
// usage: llmrt_abi_manifest_complete HEADER MANIFEST
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

std::string ReadAll(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Names the header declares: "const NAME", "struct NAME", "field STRUCT.FIELD".
std::set<std::string> HeaderNames(const std::string& header) {
  std::set<std::string> names;
  const std::regex define(R"(\n#define (LLM[A-Z0-9_]*) +\(?-?[0-9])");
  for (std::sregex_iterator it(header.begin(), header.end(), define), end; it != end; ++it) {
    names.insert("const " + (*it)[1].str());
  }
  const std::regex structure(R"(typedef struct (llm_\w+) \{([^}]*)\} (llm_\w+);)");
  const std::regex comment(R"(/\*[^*]*\*+(?:[^/*][^*]*\*+)*/)");
  const std::regex fn_pointer(R"(\(\*(\w+)\))");
  const std::regex plain(R"((\w+)\s*(\[[^\]]*\])?$)");
  for (std::sregex_iterator it(header.begin(), header.end(), structure), end; it != end; ++it) {
    const std::string name = (*it)[1].str();
    names.insert("struct " + name);
    const std::string body = std::regex_replace((*it)[2].str(), comment, "");
    std::stringstream statements(body);
    std::string stmt;
    while (std::getline(statements, stmt, ';')) {
      stmt = std::regex_replace(stmt, std::regex(R"(^\s+|\s+$)"), "");
      if (stmt.empty()) continue;
      std::smatch m;
      if (std::regex_search(stmt, m, fn_pointer) || std::regex_search(stmt, m, plain)) {
        names.insert("field " + name + "." + m[1].str());
      }
    }
  }
  return names;
}

std::set<std::string> ManifestNames(const std::string& manifest) {
  std::set<std::string> names;
  std::stringstream lines(manifest);
  std::string kind, name;
  std::string line;
  while (std::getline(lines, line)) {
    std::stringstream words(line);
    if (words >> kind >> name) names.insert(kind + " " + name);
  }
  return names;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: " << argv[0] << " HEADER MANIFEST\n";
    return 2;
  }
  const std::set<std::string> header = HeaderNames(ReadAll(argv[1]));
  const std::set<std::string> manifest = ManifestNames(ReadAll(argv[2]));
  int missing = 0;
  for (const std::string& n : header) {
    if (manifest.count(n) == 0) {
      std::cerr << "in the header, not in the manifest: " << n << "\n";
      ++missing;
    }
  }
  for (const std::string& n : manifest) {
    if (header.count(n) == 0) {
      std::cerr << "in the manifest, not in the header: " << n << "\n";
      ++missing;
    }
  }
  if (header.size() < 150) {
    std::cerr << "only " << header.size() << " names parsed from the header: the parser is broken\n";
    return 1;
  }
  std::cout << header.size() << " names checked\n";
  return missing == 0 ? 0 : 1;
}
